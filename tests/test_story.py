"""The demo's sentences: each verdict follows from the interval, each reason from the given costs, and
a sentence never claims a reason its numbers contradict. Numbers are made here (no model runs)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_summary_table import cell

from specmoe.audit.foreign import AuditRow, audit_csv
from specmoe.metrics import RoundCost, round_cost
from specmoe.perf.breakeven import round_breakeven
from specmoe.report.story import (
    CellAccount,
    Outcome,
    accounts,
    audit_line,
    batch_sweeps,
    outcome,
    sentence,
    sweep_sentence,
)
from specmoe.results.compare import cell_key, compare_by
from specmoe.stats import Estimate
from specmoe.theory import expected_active_experts

STUDY_CSV = Path(__file__).resolve().parent.parent / "docs" / "results" / "study-runs.csv"


@pytest.mark.parametrize(
    ("estimate", "expected"),
    [
        (Estimate(1.2, 1.1, 1.3, 6, 0.95), Outcome.PAYS),
        (Estimate(0.8, 0.7, 0.9, 3, None), Outcome.LOSES),
        (Estimate(1.05, 0.95, 1.15, 6, 0.95), Outcome.EVEN),
        (Estimate(1.1, 1.1, 1.1, 1, None), Outcome.PAYS),  # one unit: its point
    ],
)
def test_the_verdict_comes_from_the_whole_interval(estimate, expected):
    assert outcome(estimate) is expected


def test_a_round_cost_is_counted_in_the_baselines_plain_steps():
    # baseline: 10 forwards in 1 s (0.1 s a step); SD: 4 rounds, 0.2 s drafting, 0.6 s verifying, 0.04 s rest
    cost = round_cost(4, 1.0, 10, (0.2, 0.6, 0.04), 4)
    assert (cost.draft, cost.verify, cost.overhead) == pytest.approx((0.5, 1.5, 0.1))
    assert cost.total == pytest.approx(2.1) and cost.draft_step == pytest.approx(0.125)


@pytest.mark.parametrize("total", [1.5, 2.0, 3.7])
def test_break_even_is_where_a_round_emits_what_it_costs(total):
    # A round emits τ tokens per sequence; it breaks even at τ = its cost, so the rate is (cost − 1) / γ.
    found = round_breakeven(4, total, 0.4)
    assert found is not None and found.tau == pytest.approx(total, abs=1e-4)
    assert found.rate == pytest.approx((total - 1) / 4, abs=1e-4)


def test_no_acceptance_breaks_even_when_a_round_costs_more_than_it_can_emit():
    assert round_breakeven(4, 5.2, 2.0) is None
    assert round_breakeven(4, 4.9, 2.0) is not None


def _account(
    speedup: Estimate, cost: RoundCost | None, emitted: float, acceptance: float = 0.2
) -> CellAccount:
    (comparison,) = compare_by(cell("c", 6, 1.0, gamma=4), cell_key)
    comparison = replace(comparison, speedup=speedup, acceptance_rate=acceptance)
    breakeven = None if cost is None else round_breakeven(cost.gamma, cost.total, cost.draft)
    return CellAccount(comparison, cost, emitted, breakeven)


LOSS = Estimate(0.62, 0.58, 0.66, 6, 0.95)
GAIN = Estimate(1.21, 1.12, 1.30, 6, 0.95)


def test_a_loss_is_explained_by_a_round_costing_more_than_it_emits():
    text = sentence(_account(LOSS, RoundCost(4, 1.2, 1.6, 0.1), 1.8))
    assert text.startswith(
        "moe + draft-xs, γ=4, B=1, code prompts: SD loses (0.62× [0.58, 0.66] 95% n=6) because"
    )
    assert "a round cost 2.90 plain steps (4 draft steps at 0.30 each, a verify of 5 tokens at 1.60" in text
    assert "emitted 1.80 tokens per sequence, 20% of proposals accepted" in text
    assert "breaks even from 48% of proposals accepted" in text  # (2.9 − 1) / 4


def test_a_gain_is_explained_and_a_round_too_dear_for_any_acceptance_says_so():
    text = sentence(_account(GAIN, RoundCost(4, 0.4, 1.1, 0.1), 3.2, acceptance=0.8))
    assert "SD pays (1.21× [1.12, 1.30] 95% n=6) because a round cost 1.60 plain steps" in text
    assert "breaks even from 15%" in text
    dear = sentence(_account(LOSS, RoundCost(4, 3.6, 1.6, 0.1), 4.9, acceptance=0.98))
    assert "no acceptance pays at these costs: even a fully accepted round emits only 5 tokens" in dear


def test_a_verdict_the_costs_contradict_gets_no_because():
    text = sentence(_account(LOSS, RoundCost(4, 0.4, 1.1, 0.1), 3.2, acceptance=0.8))
    assert "because" not in text and "although by its mean costs it should not" in text
    even = sentence(_account(Estimate(1.0, 0.9, 1.1, 6, 0.95), RoundCost(4, 0.4, 1.1, 0.1), 1.6))
    assert "breaks about even" in even and "an interval holding 1×" in even and "because" not in even


def test_few_units_are_never_called_95_percent_in_a_sentence():
    text = sentence(_account(Estimate(0.8, 0.7, 0.9, 3, None), RoundCost(4, 1.2, 1.6, 0.1), 1.8))
    assert "range, n=3" in text and "95%" not in text


def test_the_tally_counts_each_verdict_and_the_configurations_without_a_number():
    from test_busy_machine import flagged

    from specmoe.report.story import tally

    found = [_account(LOSS, None, 1.0), _account(GAIN, None, 1.0), *accounts(flagged(cell("n", 3, 1.0)))]
    expected = "In this run SD paid in 1 of 3 configurations, lost in 1 and broke about even in 0"
    assert tally(found) == expected + "; 1 have no number."


def test_accounts_are_derived_from_stored_runs():
    (found,) = accounts(cell("a", 6, 0.5))
    # every time 0.5 s and every count 8: a step costs 1/16 s; a round 3 × 0.5 / 8 s = 3 steps
    assert found.cost == RoundCost(4, 1.0, 1.0, 1.0)
    assert found.emitted_per_round == 1.0 and found.breakeven == round_breakeven(4, 3.0, 1.0)


def test_a_configuration_without_a_clean_unit_is_listed_with_no_reason_given():
    from test_busy_machine import flagged

    (found,) = accounts(flagged(cell("a", 3, 0.5)))
    assert found.cost is None and found.comparison.no_number
    assert sentence(found).endswith("all 6 runs flagged noisy: no number, so nothing is said about it")
    assert batch_sweeps([found]) == []


def _sweep(speedups: dict[int, float], verify: dict[int, float]) -> list[CellAccount]:
    found = []
    for batch, value in speedups.items():
        account = _account(
            Estimate(value, value - 0.05, value + 0.05, 6, 0.95), RoundCost(4, 0.8, verify[batch], 0.1), 2.5
        )
        config = {**account.config, "batch_size": batch, "draft": "oracle:0.8"}
        found.append(replace(account, comparison=replace(account.comparison, config=config)))
    return found


def test_a_batch_sweep_says_where_sd_pays_and_how_its_verify_cost_moves():
    found = _sweep({16: 1.2, 1: 0.8, 4: 1.0}, {1: 1.6, 4: 1.3, 16: 1.05})
    (series,) = batch_sweeps(found)
    assert [a.config["batch_size"] for a in series] == [1, 4, 16]
    text = sweep_sentence(series, {"moe": (32, 2)})
    assert "moe + oracle:0.8, γ=4, B = 1, 4, 16: speedup 0.80×, 1.00×, 1.20×." in text
    assert "A verify of 4 + 1 tokens cost 1.60, 1.30, 1.05 plain steps" in text
    assert "SD pays at B = 16 (whole interval above 1×) and peaks at B=16." in text
    # the runs' own top-k (4, as BASE says) overrides the zoo's (2)
    at_one = expected_active_experts(5, 32, 4) / expected_active_experts(1, 32, 4)
    assert "(4 of 32 experts per token" in text and f"a verify wakes {at_one:.1f}×, " in text
    assert f"(a step of B=16 already wakes {expected_active_experts(16, 32, 4):.1f} of 32)" in text
    assert "Expected under uniform routing" not in sweep_sentence(series, {})  # dense or unknown shape
    losing = sweep_sentence(_sweep({1: 0.8, 4: 0.9}, {1: 1.6, 4: 1.3}), {})
    assert "SD pays at none of them beyond its interval; the best is B=4." in losing


def test_configurations_differing_in_more_than_batch_are_not_a_sweep():
    found = _sweep({1: 0.8}, {1: 1.6}) + [
        replace(a, comparison=replace(a.comparison, config={**a.config, "gamma": 2}))
        for a in _sweep({4: 1.0}, {4: 1.3})
    ]
    assert batch_sweeps(found) == []


def test_the_audit_line_counts_the_verdicts_and_names_the_furthest_claim():
    rows = [
        AuditRow("a", "impossible", "claims 1.30× at α = 2.60%, γ = 4; bound 1.10×", 1.30, 1.104),
        AuditRow("b", "impossible", "claims 1.15×", 1.15, 1.10),
        AuditRow("c", "consistent", "", 1.0, 1.0),
    ]
    line = audit_line(rows, "the study")
    assert line.startswith("the study: 3 rows, 2 impossible, 1 consistent (possible, not thereby right)")
    assert line.endswith("the furthest beyond the bound, a, claims 1.30× at α = 2.60%, γ = 4; bound 1.10×")


@pytest.mark.skipif(not STUDY_CSV.is_file(), reason="the study's rows ship with the repository")
def test_the_audit_line_of_the_studys_published_rows():
    line = audit_line(audit_csv(STUDY_CSV), "rows")
    assert line.startswith("rows: 306 rows, 126 impossible, 162 consistent")
    assert "any end-to-end decode is bounded by 1 + αγ" in line
