"""The compiled path's static cache is exact: float64 SD through it equals plain greedy decoding.

Inductor takes a minute per shape on a small CPU, so the static cache is checked eagerly (the same
code the compiled graphs run) and graph capture with torch.compile's "eager" backend, which traces
the graphs without generating code. The inductor path's float64 identity is checked by
benchmarks/decoding/decode_speed.py.
"""

from __future__ import annotations

import pytest

from specmoe.api import load_model
from specmoe.backends.hf_experts import NAME as GATHERED
from specmoe.backends.hf_static import SLOT_STEP, StaticHFBackend
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.metrics import invariant_violations

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [40, 41], [99]]  # different lengths, one a single token


def _static(tiny_zoo, name: str, experts: str = "batched_mm", **options) -> StaticHFBackend:
    eager = load_model(tiny_zoo / name, dtype="float64", experts_implementation=experts)
    return StaticHFBackend(eager.model, name, eager.device, **options)


def _plain(target, prompts, tokens):
    return [
        decode(target, [p], DecodeConfig(max_new_tokens=tokens, ignore_eos=True)).outputs[0].token_ids
        for p in prompts
    ]


@pytest.fixture(scope="module")
def static_pair(tiny_zoo):
    return _static(tiny_zoo, "moe", compile=False), _static(tiny_zoo, "draft-xs", compile=False)


@pytest.mark.parametrize("gamma", [1, 4])
@pytest.mark.parametrize("batch", [1, 3])
def test_static_cache_sd_matches_eager_greedy_decoding(exact_models, static_pair, gamma, batch):
    target, draft = static_pair
    prompts = PROMPTS[:batch]
    expected = _plain(exact_models["moe"], prompts, 20)
    assert [
        o.token_ids for o in decode(target, prompts, DecodeConfig(max_new_tokens=20, ignore_eos=True)).outputs
    ] == expected
    result = decode(
        target, prompts, DecodeConfig(max_new_tokens=20, gamma=gamma, ignore_eos=True), ModelDrafter(draft)
    )
    assert [o.token_ids for o in result.outputs] == expected
    assert invariant_violations(result) == []


def test_static_cache_compacts_and_grows_past_its_slots(exact_models, static_pair):
    # Ragged acceptance leaves holes; decoding past the first SLOT_STEP slots forces compaction and
    # a larger cache, and rows finishing early leave the padded batch.
    target, draft = static_pair
    tokens = SLOT_STEP + 40
    expected = _plain(exact_models["moe"], PROMPTS[:2], tokens)
    result = decode(
        target,
        PROMPTS[:2],
        DecodeConfig(max_new_tokens=tokens, gamma=3, ignore_eos=True),
        ModelDrafter(draft),
    )
    assert [o.token_ids for o in result.outputs] == expected
    assert target._slots > SLOT_STEP


def test_compiled_graphs_are_exact_and_compile_time_is_kept_apart(exact_models, tiny_zoo):
    target = _static(tiny_zoo, "moe", compiler="eager")
    draft = _static(tiny_zoo, "draft-xs", compiler="eager")
    expected = _plain(exact_models["moe"], PROMPTS[:2], 10)
    config = DecodeConfig(max_new_tokens=10, gamma=4, ignore_eos=True)
    first = decode(target, PROMPTS[:2], config, ModelDrafter(draft))
    again = decode(target, PROMPTS[:2], config, ModelDrafter(draft))
    assert [o.token_ids for o in first.outputs] == [o.token_ids for o in again.outputs] == expected
    assert first.compile_s > 0 and again.compile_s == 0  # each shape compiles once, outside decode_s
    assert target._seen == {(2, 5, SLOT_STEP, ())} and (2, 1, SLOT_STEP, ()) in draft._seen


def test_rows_leave_the_static_batch_independently(tiny_zoo):
    target, draft = _static(tiny_zoo, "moe", compile=False), _static(tiny_zoo, "draft-xs", compile=False)
    reference = load_model(tiny_zoo / "moe", dtype="float64")
    eos = _plain(reference, PROMPTS, 16)[1][4]  # the second sequence's 5th token ends sequences now
    reference.eos_token_ids = target.eos_token_ids = frozenset({eos})
    expected = [decode(reference, [p], DecodeConfig(max_new_tokens=16)).outputs[0].token_ids for p in PROMPTS]
    result = decode(target, PROMPTS, DecodeConfig(max_new_tokens=16, gamma=3), ModelDrafter(draft))
    assert [o.token_ids for o in result.outputs] == expected
    assert len({len(t) for t in expected}) > 1  # rows really left at different rounds


def test_gathered_experts_through_compiled_graphs_are_exact(exact_models, tiny_zoo):
    # The compiled path's default experts on CPU. Three rows pad to S = 4: one-token steps (4 x 2
    # slots <= 32 experts) run the fused contraction, the 5-token verify blocks (40 slots) and the
    # eager prefill the expert loop.
    target = _static(tiny_zoo, "moe", experts=GATHERED, compiler="eager")
    draft = _static(tiny_zoo, "draft-xs", compiler="eager")
    expected = _plain(exact_models["moe"], PROMPTS, 10)
    plain = decode(target, PROMPTS, DecodeConfig(max_new_tokens=10, ignore_eos=True))
    assert [o.token_ids for o in plain.outputs] == expected
    config = DecodeConfig(max_new_tokens=10, gamma=4, ignore_eos=True)
    assert [o.token_ids for o in decode(target, PROMPTS, config, ModelDrafter(draft)).outputs] == expected
