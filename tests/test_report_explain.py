"""The data behind the report's explaining and serving views: pure functions from stored rows to the
series a figure plots. No pixels are compared; figures are checked for the settings they promise."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
from test_report import (
    simulate,
    spec,
)  # tests/ is on sys.path under pytest's default import mode

from specmoe.bench.served_rows import served_row
from specmoe.drafts import ModelDraft
from specmoe.metrics import position_acceptance, time_shares_of
from specmoe.perf.advise import advise
from specmoe.report import write_report
from specmoe.report.explain_figures import position_series, time_split_bars
from specmoe.report.figures import Omitted, count_label
from specmoe.report.gamma_batch import gamma_batch_heatmap, speedup_grids
from specmoe.report.modelled import modelled_pair, pair_alpha
from specmoe.report.results import collect, decode_time_shares, position_counts
from specmoe.report.served import ecdf, percentiles, served_arms, serving_table
from specmoe.report.serving_figures import latency_cdfs, latency_curves, speedup_vs_concurrency
from specmoe.report.slices import varying_axes
from specmoe.report.study_figures import acceptance_vs_gamma, label_offsets
from specmoe.report.write import _load_fit
from specmoe.results.store import Store
from specmoe.serving.load import RequestRecord, ServedRun
from specmoe.serving.prometheus import SpecCounters
from specmoe.serving.spec import ServerSpec
from specmoe.suite.types import ModelSpec, RunSpec

FITS = Path(__file__).resolve().parents[1] / "docs" / "results" / "cpu" / "findings" / "fits"


def results_of(specs: list[RunSpec]):
    rows = []
    for s in specs:
        for repeat in (0, 1):
            rows += [
                simulate(replace(s.baseline(), repeat=repeat), 0.5),
                simulate(replace(s, repeat=repeat), 0.5),
            ]
    return collect(rows)


# --- metrics ---------------------------------------------------------------------------------------


def test_time_shares_of_split_the_sum_and_survive_zero():
    assert time_shares_of(1.0, 3.0, 0.0) == {"draft": 0.25, "verify": 0.75, "overhead": 0.0}
    assert time_shares_of(0.0, 0.0, 0.0) == {"draft": 0.0, "verify": 0.0, "overhead": 0.0}


def test_position_acceptance_divides_by_every_sequence_round():
    assert position_acceptance([8, 4, 2], 10) == [0.8, 0.4, 0.2]
    assert position_acceptance([0, 0], 0) == []


# --- results: the raw counts behind the views ------------------------------------------------------


def test_position_counts_from_per_prompt_records_traces_and_server_counters():
    row = simulate(spec("moe", "draft-xs", gamma=3), 0.6)
    # From the round trace: a sequence-round that accepted k proposals accepted positions 1..k.
    accepted = [a for r in row.rounds_trace for a in r["accepted"]]
    expected = [sum(a >= j for a in accepted) for j in (1, 2, 3)]
    assert position_counts([row]) == (expected, len(accepted))
    # The per-prompt records win when every row kept them.
    prompts = [
        {"accepted_by_position": [5, 3, 1], "rounds": 9},
        {"accepted_by_position": [2, 1, 0], "rounds": 4},
    ]
    assert position_counts([replace(row, prompts=prompts)]) == ([7, 4, 1], 13)
    # A server's counters when there is neither.
    server = {"kind": "server", "counters": {"accepted_by_position": [6, 3, 1], "rounds": 10}}
    assert position_counts([replace(row, rounds_trace=[server])]) == ([6, 3, 1], 10)
    assert position_counts([replace(row, rounds_trace=[])]) == ([], 0)


def test_decode_time_shares_sum_the_runs_and_are_unknown_for_servers():
    rows = [simulate(spec("moe", "draft-xs", repeat=r), 0.5) for r in (0, 1)]
    shares = decode_time_shares(rows)
    draft = sum(r.times.draft_s for r in rows)
    total = sum(r.times.draft_s + r.times.verify_s + r.times.overhead_s for r in rows)
    assert shares["draft"] == pytest.approx(draft / total)
    assert sum(shares.values()) == pytest.approx(1.0)
    unknown = replace(rows[0], times=replace(rows[0].times, draft_s=None))
    assert decode_time_shares([unknown, rows[1]]) is None


# --- time split and acceptance by position ---------------------------------------------------------


def test_time_split_has_a_bar_per_configuration_naming_what_varies():
    results = results_of(
        [spec("moe", "draft-xs", gamma=g) for g in (2, 4)] + [spec("moe", "draft-xs", batch=2)]
    )
    bars = time_split_bars(results, varying_axes(r.config for r in results.rows))
    assert [b.label for b in bars] == [
        "moe (top-2) · draft-xs · γ=2 · B=1",
        "moe (top-2) · draft-xs · γ=4 · B=1",
        "moe (top-2) · draft-xs · γ=4 · B=2",
    ]
    for bar, r in zip(bars, results.sd, strict=True):
        assert bar.shares == r.time_shares and bar.speedup == r.speedup.value


def test_acceptance_by_position_is_one_series_per_pair_and_gamma_falling_with_position():
    results = results_of([spec(d, "draft-xs", gamma=g) for d in ("moe", "dense-l") for g in (2, 4)])
    series, fixed = position_series(results)
    assert [(s.label, s.gamma) for s in series] == [
        ("moe (top-2) · draft-xs", 2),
        ("dense-l · draft-xs", 2),
        ("moe (top-2) · draft-xs", 4),
        ("dense-l · draft-xs", 4),
    ]
    for s in series:
        assert len(s.shares) == s.gamma
        assert all(a >= b for a, b in zip(s.shares, s.shares[1:], strict=False))
    assert fixed["batch_size"] == 1


# --- the γ × batch-size grid -----------------------------------------------------------------------


GRID_SPECS = [spec("moe", "draft-xs", gamma=g, batch=b) for g in (2, 4) for b in (1, 4)] + [
    spec("moe", "draft-xs", gamma=3, batch=4)
]


def test_speedup_grid_has_only_the_gammas_run_and_blanks_where_not_run():
    results = results_of(GRID_SPECS)
    (grid,), _ = speedup_grids(results)
    assert grid.gammas == (2, 3, 4) and grid.batches == (1, 4)  # no row for γ = 1, never run
    by_cell = {(r.config["gamma"], r.config["batch_size"]): r.speedup.value for r in results.sd}
    assert grid.speedup[1] == (None, by_cell[(3, 4)])  # γ = 3 was run at B = 4 only
    assert grid.speedup[2] == (by_cell[(4, 1)], by_cell[(4, 4)])
    intervals = {(r.config["gamma"], r.config["batch_size"]): r.speedup for r in results.sd}
    assert grid.cells[2][1].speedup == intervals[(4, 4)]  # each cell keeps its interval, level and n
    assert grid.picks == {}  # no fit given
    best = grid.best_measured(1)
    assert grid.speedup[best][1] == max(v[1] for v in grid.speedup if v[1] is not None)


def test_the_model_pick_is_what_specmoe_advise_picks():
    fits = tuple(_load_fit(FITS / f"{name}-float32.json") for name in ("moe", "draft-xs"))
    results = replace(results_of(GRID_SPECS), fits=fits)
    (grid,), _ = speedup_grids(results, fits)
    pair = modelled_pair(results.sd[0].settings, fits)
    alpha = pair_alpha([r for r in results.sd])
    advice = advise(pair.target, [pair.draft], [alpha], [1, 4], 4, gammas=[2, 3, 4])  # the γ run
    assert grid.picks == {row["batch"]: row["best"]["gamma"] for row in advice["rows"]}
    assert grid.no_pay == {row["batch"] for row in advice["rows"] if not row["pays"]}


def test_the_grid_is_omitted_with_a_single_gamma_or_a_single_batch_size():
    single_gamma = results_of([spec("moe", "draft-xs", batch=b) for b in (1, 2, 4)])
    single_batch = results_of([spec("moe", "draft-xs", gamma=g) for g in (2, 4, 8)])
    for results in (single_gamma, single_batch):
        outcome = gamma_batch_heatmap(results, ())
        assert isinstance(outcome, Omitted) and "two or more γ and two or more batch sizes" in outcome.reason


# --- fixes to the study's views --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (12, "12"),
        (1234, "1.2K"),
        (6580, "6.6K"),
        (9960, "10K"),
        (76e6, "76M"),
        (831e6, "831M"),
        (1.5e9, "1.5B"),
    ],
)
def test_parameter_counts_read_as_people_write_them(count, text):
    assert count_label(count) == text


def test_labels_of_nearby_points_take_different_slots():
    offsets = label_offsets([(76, 0.81), (76, 0.15), (76, 0.11), (231, 0.39)], (155, 0.7))
    assert offsets[0] == offsets[1] == offsets[3]  # far apart: the first slot
    assert offsets[2] != offsets[1]  # 0.04 apart at the same x


def test_acceptance_vs_gamma_spans_zero_to_one_hundred_percent():
    drawn = acceptance_vs_gamma(results_of([spec("moe", "draft-xs", gamma=g) for g in (2, 4)]), ())
    assert drawn.figure.axes[0].get_ylim() == (0, 100)


def test_every_model_curve_names_its_series(tmp_path):
    from specmoe.report.moesd_figures import speedup_vs_batch

    fits = tuple(_load_fit(FITS / f"{name}-float32.json") for name in ("moe", "draft-xs"))
    specs = [spec(t, "draft-xs", batch=b) for t in ("moe", "dense-l") for b in (1, 4)]
    specs += [spec("moe", "oracle:0.9", batch=b) for b in (1, 4)]
    drawn = speedup_vs_batch(replace(results_of(specs), fits=fits), ())
    labels = drawn.figure.axes[0].get_legend_handles_labels()[1]
    assert len(labels) == len(set(labels))
    assert "moe (top-2) · draft-xs, model (α=" in " ".join(labels)
    assert "moe (top-2) · oracle:0.9, model (α=0.90)" in labels


# --- serving views ---------------------------------------------------------------------------------


def _server(name: str, port: int) -> ModelSpec:
    server = ServerSpec(url=f"http://10.0.0.5:{port}", model="served", engine="vllm")
    return ModelSpec(name=name, zoo=None, path=None, backend="openai", server=server)


def served_spec(draft: bool, concurrency: int, repeat: int) -> RunSpec:
    sd = RunSpec(
        suite="serve",
        group="g",
        arm="sd",
        target="plain",
        draft=ModelDraft("eagle"),
        gamma=3,
        prompt_set="factual",
        prompt_length=None,
        batch_size=1,
        temperature=0.0,
        max_new_tokens=16,
        moe_top_k=None,
        dtype="auto",
        device="server",
        repeat=repeat,
        warmup=0,
        target_model=_server("plain", 8000),
        draft_model=_server("eagle", 8001),
        concurrency=concurrency,
    )
    return sd if draft else sd.baseline()


def served_rows(levels=(1, 4)) -> list:
    """Both arms at each concurrency, two repeats, through the same row builder as real server runs."""
    rows, baselines = [], {}
    rng = random.Random(0)
    for concurrency in levels:
        for repeat in (0, 1):
            for draft in (False, True):
                s = served_spec(draft, concurrency, repeat)
                step = (0.006 if draft else 0.004) * (1 + 0.1 * concurrency)
                requests = []
                for i in range(concurrency):
                    first = 0.02 * (1 + rng.random())
                    requests.append(
                        RequestRecord(
                            i,
                            0.0,
                            first,
                            first + 15 * step,
                            first + 15 * step,
                            16,
                            "usage",
                            16,
                            "length",
                            0,
                            None,
                            None,
                        )
                    )
                counters = SpecCounters(10 * concurrency, 30 * concurrency, 18 * concurrency, None, "metrics")
                run = ServedRun(
                    tuple(requests), counters if draft else SpecCounters(None, None, None, None, "none")
                )
                server = s.target_model.server if not draft else s.draft_model.server
                row = served_row(
                    s, server, run, baselines.get((concurrency, repeat)), {}, "2026-01-01T00:00:00Z"
                )
                if not draft:
                    baselines[(concurrency, repeat)] = row
                rows.append(row)
    return rows


def test_served_arms_pool_every_request_of_an_arm():
    rows = served_rows()
    arms = served_arms(rows)
    assert len(arms) == 4  # two arms × two concurrencies
    for arm in arms.values():
        assert len(arm.ttft_s) == len(arm.tpot_s) == 2 * arm.config["concurrency"]
        assert arm.runs == 2
    sd = next(a for a in arms.values() if a.arm == "sd" and a.config["concurrency"] == 4)
    expected = [
        t["ttft_s"]
        for r in rows
        if r.arm == "sd" and r.config["concurrency"] == 4
        for t in r.rounds_trace
        if t["kind"] == "request"
    ]
    assert list(sd.ttft_s) == expected


def test_ecdf_and_percentiles():
    xs, ys = ecdf([3.0, 1.0, 2.0, 2.0])
    assert list(xs) == [1.0, 2.0, 2.0, 3.0] and list(ys) == [0.25, 0.5, 0.75, 1.0]
    assert percentiles([1.0, 2.0, 3.0, 4.0, 5.0], (50, 90)) == (3.0, 4.6)
    assert percentiles([], (50, 99)) == (None, None)


def test_serving_table_has_both_arms_at_each_concurrency():
    results = collect(served_rows())
    table = serving_table(results)
    assert [(r["arm"], r["concurrency"], r["requests"]) for r in table.records] == [
        ("baseline", 1, 2),
        ("sd", 1, 2),
        ("baseline", 4, 8),
        ("sd", 4, 8),
    ]
    assert all(r["ttft_p50_s"] <= r["ttft_p90_s"] <= r["ttft_p99_s"] for r in table.records)
    assert isinstance(serving_table(results_of([spec("moe", "draft-xs")])), Omitted)


def test_latency_curves_and_concurrency_views_from_server_runs():
    results = collect(served_rows())
    curves, _chosen = latency_curves(results)
    assert [(c.concurrency, c.arm) for c in curves] == [
        (1, "baseline"),
        (1, "sd"),
        (4, "baseline"),
        (4, "sd"),
    ]
    assert all(c.ttft[1][-1] == 1.0 and len(c.tpot[0]) == 2 * c.concurrency for c in curves)
    for build in (speedup_vs_concurrency, latency_cdfs):
        assert not isinstance(build(results, ()), Omitted)
    local = results_of([spec("moe", "draft-xs", gamma=g) for g in (2, 4)])
    for build in (speedup_vs_concurrency, latency_cdfs):
        assert isinstance(build(local, ()), Omitted)
    single = collect(served_rows(levels=(4,)))
    assert isinstance(speedup_vs_concurrency(single, ()), Omitted)  # one concurrency: no line
    assert not isinstance(latency_cdfs(single, ()), Omitted)  # but its distributions still show


def test_a_served_store_renders_its_serving_views_and_concurrency_column(tmp_path):
    with Store(tmp_path / "s.db") as store:
        for row in served_rows():
            store.add(row)
    page = write_report(tmp_path / "s.db", tmp_path / "out").read_text(encoding="utf-8")
    for name in ("speedup_vs_concurrency", "latency_cdf"):
        assert f'"figures/{name}.png"' in page
    assert '"tables/serving_latency.csv"' in page
    assert "<th>concurrency</th>" in page
    missing = page.split('<section id="not-available">')[1]
    assert "Where SD decode time goes" in missing  # servers do not report per-round times
