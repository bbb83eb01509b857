"""Pricing a hybrid model's linear-attention rollback by engine method (`specmoe.perf.rollback`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmoe.errors import SpecmoeError
from specmoe.perf.drafts import DraftMethod
from specmoe.perf.engines import load_engines
from specmoe.perf.firstprinciples import load_config
from specmoe.perf.hardware import load_hardware
from specmoe.perf.rollback import HybridRollback, kept_after_rejection, rejection_share, rollback_s
from specmoe.perf.setup import configured_setup

EXAMPLES = Path(__file__).parents[1] / "docs" / "perf-examples"


class _Flat:
    """A forward that costs 1 ms whatever its size."""

    def time(self, batch: float, tokens: float) -> float:
        return 1e-3


@pytest.fixture(scope="module")
def hybrid():
    return load_config(EXAMPLES / "qwen3-next-80b-a3b.json")


def test_rejection_and_kept_tokens_follow_iid_acceptance():
    assert rejection_share(0.0, 4) == 1.0 and rejection_share(1.0, 4) == 0.0
    assert kept_after_rejection(0.0, 4) == 1.0  # the first proposal rejected: the last token stays
    # α = 0.5, γ = 2: P(0 accepted) = 0.5, P(1) = 0.25, given a rejection: 1 + 0.25 / 0.75 tokens
    assert kept_after_rejection(0.5, 2) == pytest.approx(1 + 1 / 3)


def test_each_method_moves_the_bytes_it_says(hybrid):
    state, weights, bandwidth = hybrid.state_bytes, hybrid.linear_bytes, 1e12
    assert state > 0 and weights > 0
    per_position = rollback_s(hybrid, HybridRollback.PER_POSITION, bandwidth, 0.5, 4, 2)
    assert per_position == pytest.approx(5 * state * 2 / bandwidth)
    # nothing rejected: a re-advance only copies the checkpoint, a redecode only saves and restores
    for method in (HybridRollback.READVANCE, HybridRollback.REDECODE):
        assert rollback_s(hybrid, method, bandwidth, 1.0, 4, 2, _Flat()) == pytest.approx(
            2 * state * 2 / bandwidth
        )
    # every round rejects at α = 0: the redecode replays through the whole model (1 ms here)
    redecode = rollback_s(hybrid, HybridRollback.REDECODE, bandwidth, 0.0, 4, 1, _Flat())
    assert redecode == pytest.approx(2 * state / bandwidth + 1e-3)
    readvance = rollback_s(hybrid, HybridRollback.READVANCE, bandwidth, 0.0, 4, 1)
    assert readvance == pytest.approx((2 * state + weights + 2 * state) / bandwidth)


def test_a_model_without_linear_attention_costs_nothing():
    dense = load_config(EXAMPLES / "qwen3-30b-a3b.json")
    assert dense.state_bytes == 0
    for method in HybridRollback:
        assert rollback_s(dense, method, 1e12, 0.3, 4, 8, _Flat()) == 0.0


def test_advise_prices_the_rollback_for_hybrid_targets_only(hybrid):
    hardware, engines = load_hardware(EXAMPLES / "h100-sxm.json"), load_engines()
    draft = load_config(EXAMPLES / "qwen3-0.6b.json")
    setup = configured_setup(hybrid, hardware, engines["sglang"], DraftMethod.MODEL, draft)
    assert setup.is_hybrid and setup.state_s(0.6, 4, 8) > 0
    free = configured_setup(hybrid, hardware, engines["sglang"], DraftMethod.MODEL, draft, label="x")
    priced = setup.speedup(0.6, 4, 8)
    object.__setattr__(free, "target_arch", None)  # the same setup without the rollback term
    assert priced < free.speedup(0.6, 4, 8)
    with pytest.raises(SpecmoeError, match="cannot roll back"):
        configured_setup(
            hybrid, load_hardware(EXAMPLES / "m2-ultra.json"), engines["mlx"], DraftMethod.MODEL, draft
        )
