"""The report's time-per-token and prompt-phase views, its row order, UNSTABLE and all-noisy rows, the
γ × batch-size cells with their intervals, and captions that say what the data shows. Synthetic runs
(tests/test_report.py's `simulate`); no timing is asserted, only how stored times are combined."""

from __future__ import annotations

import csv
import random
from dataclasses import replace
from pathlib import Path

import pytest
from test_report import simulate, spec  # tests/ is on sys.path under pytest's default import mode

from specmoe.metrics import RunTimes, decode_split_per_token, local_time_to_first_token, ms_per_output_token
from specmoe.report import write_report
from specmoe.report.arm_times import arm_timings, first_token_s
from specmoe.report.figures import interval_note
from specmoe.report.gamma_batch import cell_text, gamma_batch_table, speedup_grids
from specmoe.report.intervals import Interval
from specmoe.report.moesd_figures import curve_relation
from specmoe.report.results import collect
from specmoe.report.slices import sort_key
from specmoe.report.tables import sd_table
from specmoe.report.timing_tables import decode_split_table, prompt_phase_table
from specmoe.results.store import RunRow, Store
from specmoe.stats import Estimate

REASON = "other processes used 1.00 cores while it ran"
BUSY = {"noise": REASON, "noise_guard": True, "load_avg": 3.5, "other_cpu": 1.0, "attempts": 3}


def arms(s, repeats=(0, 1)) -> list[RunRow]:
    """Both arms of an SD configuration, paired by repeat (one prompt batch)."""
    return [simulate(replace(a, repeat=r), 0.5) for r in repeats for a in (s.baseline(), s)]


def unique(rows: list[RunRow]) -> list[RunRow]:
    """One row per run: SD configurations that share a baseline share its runs, as in the runner."""
    first: dict[str, RunRow] = {}
    for row in rows:
        first.setdefault(row.run_id, row)
    return list(first.values())


def unstable(rows: list[RunRow]) -> list[RunRow]:
    """The SD arm's verify passes timed 1.0×, 1.6×, 0.6× across repeats: the paired step ratio's
    spread across repeats of one batch is what `bench summary` marks UNSTABLE."""
    factors = {0: 1.0, 1: 1.6, 2: 0.6}
    return [
        replace(r, times=replace(r.times, verify_s=r.times.verify_s * factors[r.repeat]))
        if r.arm == "sd"
        else r
        for r in rows
    ]


def noisy(rows: list[RunRow]) -> list[RunRow]:
    return [replace(r, noisy=True, measure=BUSY) for r in rows]


def small_store_rows() -> list[RunRow]:
    """A γ × B grid on one pair, one UNSTABLE configuration, one configuration every run of which
    (both arms) the noise guard flagged; shuffled, as interleaved blocks store them."""
    rows = []
    for gamma in (2, 4):
        for batch in (1, 4):
            s = spec("moe", "draft-xs", gamma=gamma, batch=batch)
            rows += unstable(arms(s, (0, 1, 2))) if (gamma, batch) == (2, 1) else arms(s)
    rows = unique(rows + noisy(arms(spec("dense-l", "draft-xs", gamma=4))))
    random.Random(3).shuffle(rows)
    return rows


def write_small_report(folder: Path) -> Path:
    with Store(folder / "small.sqlite") as store:
        for row in small_store_rows():
            store.add(row)
    return write_report(folder / "small.sqlite", folder / "out")


# --- definitions ----------------------------------------------------------------------------------


def test_ms_per_output_token_pools_seconds_over_tokens_with_the_runs_interval():
    few = ms_per_output_token([0.2, 0.3], [100, 100])
    assert few.value == pytest.approx(2.5) and few.level is None and few.n == 2  # a range below 5 runs
    assert (few.low, few.high) == pytest.approx((2.0, 3.0))
    many = ms_per_output_token([0.2, 0.3, 0.25, 0.22, 0.28], [100] * 5)
    assert many.level == 0.95 and many.n == 5 and many.low < many.value < many.high


def test_the_split_sums_to_decode_and_a_baseline_drafts_nothing():
    times = [RunTimes(0.01, 0.6, 0.1, 0.4, 0.1, 0.61), RunTimes(0.01, 0.9, 0.2, 0.6, 0.1, 0.91)]
    split = decode_split_per_token(times, [100, 100])
    parts = sum(split[p].value for p in ("draft", "verify", "overhead"))
    assert parts == pytest.approx(split["decode"].value) == pytest.approx(7.5)
    base = decode_split_per_token([RunTimes(0.01, 0.5, 0.0, 0.45, 0.05, 0.51)], [100])
    assert base["draft"].value == 0.0
    server = [RunTimes(0.01, 0.5, None, None, None, 0.51)]
    assert decode_split_per_token(server, [100]) is None


def test_local_time_to_first_token_is_prefill_plus_the_first_round():
    row = simulate(spec("moe", "draft-xs"), 0.5)
    first = row.rounds_trace[0]
    expected = row.times.prefill_s + first["draft_s"] + first["verify_s"] + first["overhead_s"]
    assert first_token_s(row) == pytest.approx(expected)
    assert local_time_to_first_token(0.25, 0.5) == 0.75
    assert first_token_s(replace(row, rounds_trace=[])) is None


# --- one row per configuration, both arms, in the report's order -----------------------------------


def test_arm_timings_cover_both_arms_keep_all_noisy_ones_and_sort_by_target_draft_gamma_batch():
    timings = arm_timings(small_store_rows())
    keys = [sort_key(t.config) for t in timings]
    assert keys == sorted(keys)
    described = [
        (t.config["target"], t.config.get("draft"), t.config["gamma"], t.config["batch_size"])
        for t in timings
    ]
    assert described == [
        ("dense-l", None, 0, 1),
        ("dense-l", "draft-xs", 4, 1),
        ("moe", None, 0, 1),
        ("moe", None, 0, 4),
        ("moe", "draft-xs", 2, 1),
        ("moe", "draft-xs", 2, 4),
        ("moe", "draft-xs", 4, 1),
        ("moe", "draft-xs", 4, 4),
    ]
    flagged = [t for t in timings if t.config["target"] == "dense-l"]
    assert [t.no_number for t in flagged] == ["all 2 runs flagged noisy: no number"] * 2
    assert all(t.per_token_ms is None and t.reason == REASON for t in flagged)
    moe_sd = timings[4]
    assert moe_sd.runs == 3 and moe_sd.ttft_ms.n == 3 and moe_sd.prefill_ms.level is None


def test_timing_tables_list_every_configuration_and_say_why_one_has_no_number():
    results = collect(small_store_rows())
    for build in (decode_split_table, prompt_phase_table):
        table = build(results)
        assert len(table.records) == 8
        notices = [c for row in table.cells for c in row if "all 2 runs flagged noisy: no number" in c]
        assert len(notices) == 2 and REASON in notices[0]
    split = decode_split_table(results)
    baseline = next(r for r in split.records if r["arm"] == "baseline" and r["no_number"] is None)
    assert baseline["draft_ms"] == 0.0 and baseline["decode_ms_level"] is None  # 2 runs: a range


def test_every_table_lists_rows_by_target_draft_gamma_batch(tmp_path):
    report = write_small_report(tmp_path)
    for name in (
        "baseline_throughput",
        "sd_results",
        "decode_ms_per_token",
        "prefill_ttft",
        "gamma_batch_speedup",
    ):
        with (report.parent / "tables" / f"{name}.csv").open(encoding="utf-8") as f:
            records = list(csv.DictReader(f))
        order = [sort_key({k: _number(v) for k, v in r.items()}) for r in records]
        assert order == sorted(order), name


def _number(text: str):
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return text


# --- UNSTABLE and all-noisy rows --------------------------------------------------------------------


def test_an_unstable_row_never_reads_pass(tmp_path):
    results = collect(small_store_rows())
    (shaky,) = [r for r in results.sd if r.unstable]
    assert (shaky.config["gamma"], shaky.config["batch_size"]) == (2, 1)
    table = sd_table(results)
    status = [row[-1] for row in table.cells]
    assert sum(s.startswith("UNSTABLE: ") for s in status) == 1 and status.count("pass") == 3
    page = write_small_report(tmp_path).read_text(encoding="utf-8")
    header = page.split("<nav>")[0]
    assert 'class="pass"' not in header and "1 SD configuration UNSTABLE" in header


# --- the γ × batch-size grid ------------------------------------------------------------------------


def test_grid_cells_carry_intervals_and_no_row_for_a_gamma_not_run():
    results = collect(small_store_rows())
    (grid,), _ = speedup_grids(results)
    assert grid.gammas == (2, 4) and grid.batches == (1, 4)
    cell = grid.cells[0][0]
    assert cell.unstable and cell.speedup.n == 3
    text = cell_text(cell)
    assert f"{cell.speedup.value:.2f}×" in text and "range, n=3" in text and "UNSTABLE" in text
    table = gamma_batch_table(results)
    assert [(r["gamma"], r["batch_size"]) for r in table.records] == [(2, 1), (2, 4), (4, 1), (4, 4)]
    assert all(r["speedup_n"] in (2, 3) and r["speedup_level"] is None for r in table.records)


def test_a_cell_with_every_pair_flagged_stays_in_the_grid_without_a_number():
    rows = [r for g in (2, 4) for b in (1, 4) for r in arms(spec("moe", "draft-xs", gamma=g, batch=b))]
    rows = unique(rows + noisy([r for r in arms(spec("moe", "draft-xs", gamma=3, batch=4)) if r.arm == "sd"]))
    (grid,), _ = speedup_grids(collect(rows))
    assert grid.gammas == (2, 3, 4)
    assert grid.cells[1][0] is None  # γ = 3 at B = 1: not run
    assert grid.cells[1][1].speedup is None and "flagged noisy" in grid.cells[1][1].no_number


# --- captions say what the data shows ----------------------------------------------------------------


def _at(value: float, low: float, high: float) -> Estimate:
    return Estimate(value, low, high, 6, 0.95)


def test_the_oracle_caption_states_where_the_curve_really_is():
    above = [(_at(1.2, 1.1, 1.3), 1.5), (_at(1.4, 1.3, 1.5), 1.6)]
    assert curve_relation(above) == "Here the curve sits above all 2 measured points."
    below = [(_at(1.2, 1.1, 1.3), 1.0)]
    assert "sits below all 1 measured points" in curve_relation(below)
    mixed = [*above, (_at(1.2, 1.1, 1.3), 1.25), (_at(1.2, 1.1, 1.3), 0.9)]
    assert curve_relation(mixed) == (
        "Here the curve passes above 2, through the interval of 1 and below 1 of the 4 measured points."
    )


def test_the_interval_note_counts_what_the_bars_are():
    intervals = [
        Interval(1.0, 0.9, 1.1, 6, 0.95),
        Interval(1.0, 0.9, 1.1, 9, 0.95),
        Interval(1.0, 0.8, 1.2, 2),
    ]
    note = interval_note([*intervals, Interval(1.0, 1.0, 1.0, 1)], "runs")
    assert note == (
        "Error bars: 95% t-interval over runs for 2 points (n=6–9); the units' range, no confidence "
        "level, for 1 point (n=2); no bar for 1 point measured once (n=1)."
    )
    assert "95%" not in interval_note([Interval(1.0, 0.8, 1.2, 4)])  # nothing below 5 units is 95%


def test_oracle_drafts_appear_where_the_docs_say(tmp_path):
    rows = unique([r for p in (0.3, 0.9) for g in (2, 4) for r in arms(spec("moe", f"oracle:{p}", gamma=g))])
    with Store(tmp_path / "o.db") as store:
        for row in rows:
            store.add(row)
    report = write_report(tmp_path / "o.db", tmp_path / "out")
    drawn = {p.stem for p in (report.parent / "figures").glob("*.png")}
    # Left out: the views of deployable drafts (docs/report.md, "Oracle drafts").
    assert not drawn & {"speedup_vs_active_params", "acceptance_vs_gamma", "speedup_vs_gamma"}
    assert {
        "throughput",
        "oracle_speedup",
        "accepted_length",
        "time_split",
        "acceptance_by_position",
    } <= drawn
    assert {"decode_ms_per_token", "prefill_ttft"} <= drawn
    docs = (Path(__file__).parents[1] / "docs" / "report.md").read_text(encoding="utf-8")
    assert "appear only in the oracle view" not in docs
