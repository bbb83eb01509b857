"""Greedy speculative decoding is token-identical to greedy decoding of the target, in float64."""

from __future__ import annotations

import pytest

from specmoe.api import load_model
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.metrics import invariant_violations, totals

PROMPTS = [[11, 12, 13, 14, 15, 16, 17], [40, 41], [99]]  # different lengths, one a single token


def _plain(target, prompts, **config):
    return [decode(target, [p], DecodeConfig(**config)).outputs[0].token_ids for p in prompts]


@pytest.mark.parametrize("target_name", ["moe", "dense-s"])
@pytest.mark.parametrize("gamma", [1, 4, 16])
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_sd_matches_greedy_decoding(exact_models, target_name, gamma, batch):
    target, draft = exact_models[target_name], exact_models["draft-xs"]
    prompts = PROMPTS[:batch]
    expected = _plain(target, prompts, max_new_tokens=24, ignore_eos=True)
    result = decode(
        target, prompts, DecodeConfig(max_new_tokens=24, gamma=gamma, ignore_eos=True), ModelDrafter(draft)
    )
    assert [o.token_ids for o in result.outputs] == expected
    assert invariant_violations(result) == []
    assert all(len(o.token_ids) == 24 for o in result.outputs)


def test_self_draft_accepts_everything_and_stays_exact(exact_models, tiny_zoo):
    target = exact_models["moe"]
    expected = _plain(target, PROMPTS, max_new_tokens=30, ignore_eos=True)
    drafter = ModelDrafter(load_model(tiny_zoo / "moe", dtype="float64"))  # a backend holds one batch
    result = decode(target, PROMPTS, DecodeConfig(max_new_tokens=30, gamma=4, ignore_eos=True), drafter)
    t = totals(result)
    assert [o.token_ids for o in result.outputs] == expected
    assert t.accepted == t.drafted  # every proposal accepted
    assert t.target_forwards == 6  # 30 tokens at 5 per round


def test_max_new_tokens_reached_inside_a_block(exact_models, tiny_zoo):
    target = exact_models["moe"]
    expected = _plain(target, PROMPTS, max_new_tokens=7, ignore_eos=True)
    # a self-draft commits 5 tokens per round, so the budget of 7 ends inside the second block
    drafter = ModelDrafter(load_model(tiny_zoo / "moe", dtype="float64"))
    result = decode(target, PROMPTS, DecodeConfig(max_new_tokens=7, gamma=4, ignore_eos=True), drafter)
    assert [o.token_ids for o in result.outputs] == expected
    assert [o.truncated for o in result.outputs] == [3, 3, 3]
    assert {o.finish_reason for o in result.outputs} == {"length"}
    assert invariant_violations(result) == []


def test_eos_inside_a_draft_block(tiny_zoo):
    target = load_model(tiny_zoo / "moe", dtype="float64")
    reference = _plain(target, PROMPTS, max_new_tokens=24, ignore_eos=True)
    eos = reference[0][6]  # a token the first sequence emits 7th: make it the end-of-sequence token
    target.eos_token_ids = frozenset({eos})
    expected = _plain(target, PROMPTS, max_new_tokens=24)
    assert expected[0] == reference[0][: reference[0].index(eos) + 1]
    drafter = ModelDrafter(load_model(tiny_zoo / "moe", dtype="float64"))
    result = decode(target, PROMPTS, DecodeConfig(max_new_tokens=24, gamma=4), drafter)
    assert [o.token_ids for o in result.outputs] == expected
    first = result.outputs[0]
    assert first.finish_reason == "eos" and first.truncated > 0
    assert invariant_violations(result) == []


def test_sequences_leave_the_batch_independently(exact_models):
    target, draft = exact_models["moe"], exact_models["draft-xs"]
    expected = _plain(target, PROMPTS, max_new_tokens=12, ignore_eos=True)
    result = decode(
        target, PROMPTS, DecodeConfig(max_new_tokens=12, gamma=3, ignore_eos=True), ModelDrafter(draft)
    )
    assert [o.token_ids for o in result.outputs] == expected
    # ragged acceptance: per-sequence round counts may differ, and every record names its rows
    assert all(len(r.rows) == len(r.accepted) == len(r.emitted) for r in result.rounds)
