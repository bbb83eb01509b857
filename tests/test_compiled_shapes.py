"""How many graphs the compiled path compiles, and what happens past its limit.

A graph is compiled per (S rows, t block width, L cache slots). A run sizes its cache once, from
the horizon the decode loop passes (`reserve`), on a doubling ladder of L; a shape past
`MAX_SHAPES` runs eagerly on the same static cache, with one warning, and decodes the same tokens.
Graphs are captured with torch.compile's "eager" backend, as in tests/test_compiled_path.py.
"""

from __future__ import annotations

import logging

from specmoe.api import load_model
from specmoe.backends import hf_static
from specmoe.backends.hf_static import SLOT_STEP, StaticHFBackend
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [40, 41]]


def _static(tiny_zoo, name: str, **options) -> StaticHFBackend:
    eager = load_model(tiny_zoo / name, dtype="float64", experts_implementation="batched_mm")
    return StaticHFBackend(eager.model, name, eager.device, **options)


def _plain(target, prompts, tokens):
    config = DecodeConfig(max_new_tokens=tokens, ignore_eos=True)
    return [decode(target, [p], config).outputs[0].token_ids for p in prompts]


class _Unsized:
    """A backend whose `reserve` is not passed on: a caller that does not say how long rows will get."""

    def __init__(self, backend) -> None:
        self._backend = backend

    def reserve(self, tokens: int) -> None:
        return None

    def __getattr__(self, name: str):
        return getattr(self._backend, name)


def test_the_cache_is_sized_once_for_the_run_on_a_doubling_ladder(tiny_zoo):
    target = _static(tiny_zoo, "draft-xs", compile=False)
    target.reserve(SLOT_STEP + 1)
    target.prefill([[1, 2, 3]])
    assert target._slots == 2 * SLOT_STEP
    target.prefill([[1, 2, 3]])  # no horizon: a short prompt keeps the cache it has (same S)
    assert target._slots == 2 * SLOT_STEP
    target.reserve(5 * SLOT_STEP)
    target.prefill([[1, 2, 3], [4]])
    assert target._slots == 8 * SLOT_STEP


def test_without_a_horizon_the_cache_compacts_and_grows_mid_decode(exact_models, tiny_zoo, monkeypatch):
    monkeypatch.setattr(hf_static, "SLOT_STEP", 16)  # small caches, so a short run outgrows one
    target = _static(tiny_zoo, "moe", compile=False)
    draft = _static(tiny_zoo, "draft-xs", compile=False)
    compactions = []
    make_room = StaticHFBackend._make_room

    def counted(self, t: int) -> None:
        compactions.append(t)
        make_room(self, t)

    monkeypatch.setattr(StaticHFBackend, "_make_room", counted)
    config = DecodeConfig(max_new_tokens=40, gamma=3, ignore_eos=True)
    result = decode(_Unsized(target), PROMPTS, config, ModelDrafter(_Unsized(draft)))
    assert [o.token_ids for o in result.outputs] == _plain(exact_models["moe"], PROMPTS, 40)
    assert compactions and target._slots > 16


def test_past_the_shape_limit_a_shape_runs_eagerly_with_one_warning(
    exact_models, tiny_zoo, monkeypatch, caplog
):
    monkeypatch.setattr(hf_static, "MAX_SHAPES", 1)
    target = _static(tiny_zoo, "moe", compiler="eager")
    draft = _static(tiny_zoo, "draft-xs", compile=False)
    expected = _plain(exact_models["moe"], PROMPTS[:1], 10)
    plain = decode(target, PROMPTS[:1], DecodeConfig(max_new_tokens=10, ignore_eos=True))  # compiles t = 1
    with caplog.at_level(logging.WARNING, logger="specmoe.backends.hf_static"):
        config = DecodeConfig(max_new_tokens=10, gamma=4, ignore_eos=True)
        sd = decode(target, PROMPTS[:1], config, ModelDrafter(draft))  # t = 5: past the limit
    assert [o.token_ids for o in plain.outputs] == [o.token_ids for o in sd.outputs] == expected
    assert plain.compile_s > 0 and sd.compile_s == 0
    assert target._seen == {(1, 1, SLOT_STEP, ())}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "batch 1, block 5" in warnings[0] and "runs eagerly" in warnings[0]
