"""The composition of an SD decode's seconds: known inputs give known speedups, and `model predict`,
`advise` and the check against measured runs all go through it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from specmoe.findings.model_check import Checked, check_advice, check_rows, sd_schedule, trace_rounds
from specmoe.metrics import RunCounts, RunTimes
from specmoe.perf.advise import advise
from specmoe.perf.compose import (
    PlainSchedule,
    Rounds,
    SDSchedule,
    composed_speedup,
    draft_round_s,
    expected_schedules,
    expected_speedup,
    live_share,
    wide_share,
)
from specmoe.perf.predict import predict_rows
from specmoe.results.store import RunRow
from specmoe.theory import expected_tokens_per_round, sd_speedup


@dataclass(frozen=True)
class Table:
    """Forward seconds from a table keyed by tokens (the same at every batch size)."""

    seconds: dict[int, float]
    label: str = "table"

    def time(self, batch: float, tokens: float) -> float:
        return self.seconds[int(tokens)]

    def extrapolated(self, batch: float, tokens: float) -> bool:
        return False


TARGET = Table({1: 10.0, 2: 13.0, 3: 16.0, 5: 20.0, 9: 30.0})
DRAFT = Table({1: 2.0, 2: 3.0})


def test_a_draft_round_charges_its_first_step_by_how_wide_it_is():
    assert draft_round_s(DRAFT, 1, 4, 0.0) == 8.0  # four one-token steps
    assert draft_round_s(DRAFT, 1, 4, 1.0) == 9.0  # a two-token first step, then three
    assert draft_round_s(DRAFT, 1, 4, 0.5) == 8.5
    assert draft_round_s(None, 1, 4, 1.0) == 0.0  # a free drafter


def test_full_acceptance_feeds_two_tokens_first_in_every_round():
    # α = 1: 5 tokens per round; round = 3 + 3·2 + 20 = 29; plain = 5 steps of 10.
    assert expected_speedup(TARGET, DRAFT, 1.0, 4, 1) == pytest.approx(50 / 29)


def test_without_host_time_or_wide_steps_it_is_moesds_formula():
    # α = 0: no round is fully accepted, so every first draft step is one token wide.
    assert expected_speedup(TARGET, DRAFT, 0.0, 4, 1) == pytest.approx(sd_speedup(0.0, 4, 10.0, 20.0, 2.0))
    assert expected_speedup(TARGET, DRAFT, 0.0, 4, 1) == pytest.approx(10 / 28)


def test_host_seconds_are_charged_per_round_and_per_plain_step():
    # α = 0: one token per round of 8 + 20 + 2 host = 30 s; a plain step is 10 + 1 host = 11 s.
    assert expected_speedup(TARGET, DRAFT, 0.0, 4, 1, host_s=2.0, plain_host_s=1.0) == pytest.approx(11 / 30)
    # n-gram lookup is host work of the drafter: the same charge without a draft model.
    assert expected_speedup(TARGET, None, 0.0, 4, 1, draft_host_s=2.0) == pytest.approx(10 / 22)


def test_the_wide_share_of_a_batch_is_any_row_fully_accepted():
    assert wide_share(0.5, 2, 1) == pytest.approx(0.25)
    assert wide_share(0.5, 2, 2) == pytest.approx(1 - 0.75**2)
    sd, plain = expected_schedules(0.5, 2, 2)
    assert sd.groups == (Rounds(2, 1.0, pytest.approx(0.4375)),)
    assert sd.emitted == pytest.approx(2 * 1.75) and plain.steps == pytest.approx(1.75)


def test_a_ragged_batch_costs_its_rounds_at_the_rows_still_live():
    # 2 rounds: one at 2 rows with a one-token first step, one at 1 row after a full acceptance.
    sd = SDSchedule(4, (Rounds(2, 1, 0.0), Rounds(1, 1, 1.0)), emitted=8)
    plain = PlainSchedule(2, 4, 8)
    # SD: (8 + 20) + (9 + 20) = 57 s for 8 tokens; plain: 4 steps of 10 s for 8 tokens.
    assert composed_speedup(TARGET, DRAFT, sd, plain) == pytest.approx(40 / 57)


def test_predict_and_advise_print_the_composed_speedup():
    row = predict_rows(TARGET, DRAFT, [1], [4], [0.6])[0]
    assert row["speedup"]["0.6"] == pytest.approx(expected_speedup(TARGET, DRAFT, 0.6, 4, 1))
    advice = advise(TARGET, [DRAFT], [0.6], [1], gammas=[1, 2, 4, 8])
    best = advice["rows"][0]["best"]
    scores = {g: expected_speedup(TARGET, DRAFT, 0.6, g, 1) for g in (1, 2, 4, 8)}
    assert best["gamma"] == max(scores, key=scores.get)
    assert best["speedup"] == pytest.approx(max(scores.values()))


def test_the_trace_says_which_rounds_fed_two_tokens_first():
    trace = [
        {"rows": [0, 1], "accepted": [2, 0]},  # row 0 accepted all γ = 2
        {"rows": [0, 1], "accepted": [1, 2]},  # so this round's first step is wide; row 1 full
        {"rows": [1], "accepted": [0]},  # row 0 finished; row 1 was full: wide
        {"rows": [1], "accepted": [0]},  # narrow
    ]
    assert trace_rounds(trace, 2) == (
        Rounds(1.0, 1.0, 0.0),
        Rounds(1.0, 1.0, 1.0),
        Rounds(2.0, 1.0, 0.0),
        Rounds(2.0, 1.0, 1.0),
    )


def _row(arm: str, key: str, repeat: int, counts: dict, times: dict, gamma: int, trace=()) -> RunRow:
    config = {
        "suite": "s", "group": "g", "target": "moe", "draft": "draft-xs" if arm == "sd" else "",
        "dtype": "float32", "gamma": gamma, "batch_size": 1, "moe_top_k": None, "prompt_set": "code",
        "cell_key": key, "config_key": key, "target_model": {"backend": "hf", "zoo_preset": "bench"},
    }  # fmt: skip
    decode = times["draft_s"] + times["verify_s"] + times["overhead_s"]
    return RunRow(
        run_id=f"{key}-{repeat}", config_key=key, baseline_key="base", suite="s", group="g", arm=arm,
        repeat=repeat, config=config, env={},
        counts=RunCounts.from_dict({"truncated": 0, **counts}),
        times=RunTimes.from_dict({"prefill_s": 0.1, "decode_s": decode, "wall_s": decode + 0.1, **times}),
        tokens_per_s=counts["emitted"] / decode, acceptance_rate=None, rounds_trace=list(trace),
        audit_verdict="pass", audit_reason="", created_at="2026-01-01T00:00:00+00:00",
    )  # fmt: skip


def _runs(gamma: int, accepted_per_round: int, units: int = 5) -> list[RunRow]:
    """Runs whose clocks are exactly what TARGET and DRAFT say, with 1 s of host time per round."""
    rounds = 4
    emitted = rounds * (accepted_per_round + 1)
    full = accepted_per_round == gamma
    trace = [{"rows": [0], "accepted": [accepted_per_round]}] * rounds
    draft_s = sum(draft_round_s(DRAFT, 1, gamma, 1.0 if full and i else 0.0) for i in range(rounds))
    rows = []
    for repeat in range(units):
        plain = {
            "rounds": emitted,
            "target_forwards": emitted,
            "drafted": 0,
            "accepted": 0,
            "emitted": emitted,
        }
        plain_times = {"draft_s": 0.0, "verify_s": 10.0 * emitted, "overhead_s": 0.0}
        rows.append(_row("baseline", "base", repeat, plain, plain_times, 0))
        counts = {"rounds": rounds, "target_forwards": rounds, "drafted": rounds * gamma,
                  "accepted": rounds * accepted_per_round, "emitted": emitted}  # fmt: skip
        times = {
            "draft_s": draft_s,
            "verify_s": rounds * TARGET.time(1, gamma + 1),
            "overhead_s": 1.0 * rounds,
        }
        rows.append(_row("sd", f"sd{gamma}", repeat, counts, times, gamma, trace))
    return rows


def test_runs_timed_as_the_model_says_are_predicted_exactly():
    rows = _runs(gamma=4, accepted_per_round=4)
    schedule = sd_schedule(next(r for r in rows if r.arm == "sd"))
    assert schedule.host_s == 1.0 and schedule.groups == (Rounds(1.0, 1.0, 0.0), Rounds(1.0, 3.0, 1.0))
    [cell] = check_rows(rows, lambda config: (TARGET, DRAFT), "transformers")
    assert isinstance(cell, Checked)
    assert cell.error == pytest.approx(0.0, abs=1e-12)
    assert cell.verify_error == pytest.approx(0.0, abs=1e-12) and cell.draft_error == pytest.approx(
        0.0, abs=1e-12
    )


def test_the_advice_check_asks_advise_with_what_the_runs_measured():
    rows = _runs(gamma=2, accepted_per_round=0) + _runs(gamma=8, accepted_per_round=0)
    cells = check_rows(rows, lambda config: (TARGET, DRAFT), "transformers")
    [checked] = check_advice(cells, lambda config: (TARGET, DRAFT))
    assert checked.gammas == (2, 8) and checked.advised == 2 and checked.best == 2 and checked.lost == 0.0
    expected = advise(TARGET, [DRAFT], [checked.alpha], [1], gammas=[2, 8], host_s=1.0)["rows"][0]["best"]
    assert checked.predicted == pytest.approx(expected["speedup"])


@dataclass(frozen=True)
class RoutedTable(Table):
    """TARGET's seconds, halved for a verify whose traced expert count is passed in."""

    def time(self, batch: float, tokens: float, active: float | None = None) -> float:
        return self.seconds[int(tokens)] * (0.5 if active is not None else 1.0)


def test_traced_expert_counts_reach_the_verify_and_profiles_compose_without_them():
    rows = _runs(gamma=4, accepted_per_round=0)
    routed_target = RoutedTable(TARGET.seconds)
    routing = {r.run_id: 4.0 for r in rows if r.arm == "sd"}
    [cell] = check_rows(
        rows, lambda c: (routed_target, DRAFT), "transformers", lambda c: (TARGET, DRAFT), routing
    )
    assert cell.routed == 4.0
    assert cell.verify_error == pytest.approx(-0.5)  # the traced count reached every verify
    assert cell.from_profiles == pytest.approx(cell.measured)  # profiles: random tokens, N(n)
    # a cell with a unit not traced composes every unit with N(n)
    del routing[next(iter(routing))]
    [cell] = check_rows(rows, lambda c: (routed_target, DRAFT), "transformers", None, routing)
    assert cell.routed is None and cell.verify_error == pytest.approx(0.0, abs=1e-12)


def test_a_finite_decode_needs_whole_rounds_per_row():
    # α = 0: one token a round; α = 1: γ + 1 a round, the last round cut short by the budget
    assert sum(live_share(0.0, 4, 32)) == pytest.approx(32)
    assert sum(live_share(1.0, 4, 32)) == pytest.approx(7)  # ceil(32 / 5)
    # gamma + 1 at or above the token budget: one full round ends every row
    assert sum(live_share(1.0, 8, 8)) == pytest.approx(1) and sum(live_share(1.0, 4, 2)) == pytest.approx(1)
    assert sum(live_share(0.0, 8, 8)) == pytest.approx(8)
    # a row needs at least the steady state's N / E[emitted] rounds (the last one wastes some)
    steady = 32 / float(expected_tokens_per_round(0.9, 4))
    assert sum(live_share(0.9, 4, 32)) > steady


def test_a_batch_of_finite_decodes_runs_while_any_row_is_live():
    one, _ = expected_schedules(0.9, 4, 1, new_tokens=32)
    many, plain = expected_schedules(0.9, 4, 16, new_tokens=32)
    assert one.rounds == pytest.approx(sum(live_share(0.9, 4, 32)))
    assert many.rounds > one.rounds  # the slowest of 16 rows sets the loop's length
    # every row emits its budget, and the live rows summed over rounds are each row's own rounds
    assert many.emitted == plain.emitted == 16 * 32
    assert sum(g.batch * g.rounds for g in many.groups) == pytest.approx(16 * one.rounds, rel=1e-6)
