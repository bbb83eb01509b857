"""A decode step waits for the device once: counted on CPU, where the same calls are made.

On a CUDA GPU every read of a device value (`.tolist()`, `int(t)`, `.nonzero()`, `bool(t)`) and every
blocking upload drains the queue of launched kernels. `benchmarks/decoding/host_syncs.py` counts them per
region; here the counts are pinned: the one read per round is the verify result (or the sampled
token), and the models' forwards, the caches' bookkeeping and the drafter read nothing. Counts,
never times: they do not depend on the machine.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from specmoe.api import load_model
from specmoe.backends.hf_static import StaticHFBackend
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [40, 41], [99]]  # ragged: padding, then holes


def _counting():
    path = Path(__file__).parents[1] / "benchmarks" / "decoding" / "host_syncs.py"
    spec = importlib.util.spec_from_file_location("host_syncs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module.counting


@pytest.fixture(scope="module")
def pair(tiny_zoo):
    return load_model(tiny_zoo / "moe", dtype="float32"), load_model(tiny_zoo / "draft-xs", dtype="float32")


def _per_round(target, draft, batch: int, gamma: int = 4) -> dict:
    """Counts of a long run minus a short one, per round between them (prefill cancels)."""
    counting = _counting()
    models = (target.model,) if draft is None else (target.model, draft.model)
    runs = []
    for tokens in (8, 3):
        with counting(*models) as counter:
            drafter = ModelDrafter(draft) if draft is not None else None
            config = DecodeConfig(max_new_tokens=tokens, gamma=gamma, ignore_eos=True)
            rounds = len(decode(target, PROMPTS[:batch], config, drafter).rounds)
        runs.append((counter, rounds))
    (long, long_rounds), (short, short_rounds) = runs
    out = {}
    for region in ("model", "host loop"):
        a, b = long.regions[region], short.regions[region]
        out[region] = {
            "reads": (sum(a.reads.values()) - sum(b.reads.values())) / (long_rounds - short_rounds),
            "uploads": (a.uploads - b.uploads) / (long_rounds - short_rounds),
        }
    return out


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("speculative", [False, True])
def test_an_eager_round_reads_the_device_once(pair, batch, speculative):
    target, draft = pair
    counts = _per_round(target, draft if speculative else None, batch)
    assert counts["model"] == {"reads": 0, "uploads": 0}  # no mask check inside transformers either
    assert counts["host loop"] == {"reads": 1, "uploads": 0}


@pytest.mark.parametrize("batch", [1, 3])
def test_a_static_cache_round_reads_the_device_once(pair, batch):
    target, draft = (StaticHFBackend(m.model, m.name, m.device, compile=False) for m in pair)
    counts = _per_round(target, draft, batch)
    assert counts["host loop"] == {"reads": 1, "uploads": 0}
    assert counts["model"] == {"reads": 0, "uploads": 0}
