"""`specmoe bench summary`: which columns show, how rows group, the JSON shape, the interval labels.

The rows are made here (no model runs): each SD run is paired with the baseline of its batch and
repeat, and its tokens/s are chosen, so every number in a table is known in advance.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specmoe.cli import main
from specmoe.cli import summary as summary_cli
from specmoe.errors import SpecmoeError
from specmoe.metrics import COUNT_KEYS, TIME_KEYS, RunCounts, RunTimes
from specmoe.metrics import latency_percentiles as percentiles
from specmoe.report.summary_json import to_json
from specmoe.report.summary_table import (
    BY_CHOICES,
    CATEGORY,
    CONFIG,
    build,
    check_by,
    format_text,
    speedup_text,
)
from specmoe.results.latency import served_latency
from specmoe.results.store import RunRow, Store
from specmoe.stats import Estimate, ratio_of_means

BASE = {
    "target": "moe",
    "prompt_set": "code",
    "prompt_length": None,
    "batch_size": 1,
    "temperature": 0.0,
    "moe_top_k": 4,
    "dtype": "float32",
    "device": "cpu",
    "max_new_tokens": 32,
    "concurrency": None,
    "requests": None,
    "compile": False,
    "chat": False,
    "group": "g",
    "suite": "s",
}


def pair(cell: str, batch: int, repeat: int, speedup: float, trace=(), **config) -> list[RunRow]:
    """A baseline run and one SD run on prompt batch `batch` of configuration `cell`."""
    base_key = f"{cell}-base-{batch}"
    rows = []
    for arm, rate in (("baseline", 100.0), ("sd", 100.0 * speedup)):
        key = base_key if arm == "baseline" else f"{cell}-sd-{batch}"
        sd = arm == "sd"
        settings = {
            **BASE,
            **config,
            "draft": config.get("draft", "draft-xs") if sd else None,
            "gamma": config.get("gamma", 4) if sd else 0,
        }
        cell_key = f"{cell}-sd" if sd else f"{cell}-base"
        rows.append(
            RunRow(
                run_id=f"{key}-{repeat}",
                config_key=key,
                baseline_key=base_key,
                suite=settings["suite"],
                group=settings["group"],
                arm=arm,
                repeat=repeat,
                config={**settings, "arm": arm, "cell_key": cell_key, "config_key": key},
                env={},
                counts=RunCounts.from_dict({k: 8 for k in COUNT_KEYS}),
                times=RunTimes.from_dict({k: 0.5 for k in TIME_KEYS}),
                tokens_per_s=rate,
                acceptance_rate=0.5 if sd else None,
                rounds_trace=list(trace),
                audit_verdict="pass",
                audit_reason="",
                created_at="2026-01-01T00:00:00",
                prompts=[{"prompt_id": f"p{batch}", "category": "code" if batch % 2 else "factual"}],
            )
        )
    return rows


def cell(name: str, units: int, speedup: float, **config) -> list[RunRow]:
    return [row for b in range(units) for row in pair(name, b, 0, speedup, **config)]


def sparsity_rows() -> list[RunRow]:
    """Two configurations that differ in the MoE's top-k alone, as in the MoESD sparsity sweep."""
    return cell("k1", 6, 1.2, moe_top_k=1) + cell("k8", 6, 0.8, moe_top_k=8)


def test_a_column_that_varies_is_shown_and_one_that_does_not_is_listed_once():
    table = build(sparsity_rows())
    names = [c.name for c in table.columns]
    assert names == ["target", "draft", "gamma", "top_k"]  # top-k varies; the identity columns always show
    assert table.fixed["dtype"] == "float32" and table.fixed["batch"] == 1 and not table.pooled
    text = format_text(table)
    assert text.splitlines()[0].startswith("every row: prompt code, batch 1, temperature 0, dtype float32")
    header = text.splitlines()[1]
    assert "top-k" in header and "dtype" not in header and "temp" not in header
    rows = {line.split()[3]: line for line in text.splitlines()[3:5]}  # by top-k
    assert "1.20×" in rows["1"] and "0.80×" in rows["8"]


def test_temperature_dtype_and_batch_show_when_they_vary():
    rows = cell("a", 5, 1.0) + cell("b", 5, 1.1, temperature=0.7, dtype="bfloat16", batch_size=8)
    assert [c.name for c in build(rows).columns] == [
        "target",
        "draft",
        "gamma",
        "batch",
        "temperature",
        "dtype",
    ]
    text = format_text(build(rows))
    assert " 0.7 " in text and "bfloat16" in text


def test_by_a_column_pools_the_others_and_says_so():
    rows = sparsity_rows() + cell("k1g2", 6, 1.0, moe_top_k=1, gamma=2)
    table = build(rows, ["gamma"])
    assert [c.name for c in table.columns] == ["gamma"]
    assert table.pooled == {"top_k": ["1", "8"]}
    by_gamma = {c.config["gamma"]: c for c in table.comparisons}
    assert by_gamma[4].units == 12 and by_gamma[4].speedup.value == pytest.approx(1.0)  # (120 + 80) / 200
    assert by_gamma[2].units == 6
    assert "pooled in each row: top_k 1, 8" in format_text(table)


def test_by_a_column_never_pools_different_targets_or_drafts():
    rows = (
        cell("real", 6, 0.8)
        + cell("oracle", 6, 1.4, draft="oracle:0.5")
        + cell("dense", 6, 1.1, target="dense-s")
    )
    table = build(rows, ["gamma"])
    assert table.split == ("target", "draft")
    assert [c.name for c in table.columns] == ["gamma", "target", "draft"]
    got = {(c.config["target"], c.config["draft"]): c.speedup.value for c in table.comparisons}
    expected = {("moe", "draft-xs"): 0.8, ("moe", "oracle:0.5"): 1.4, ("dense-s", "draft-xs"): 1.1}
    assert got == pytest.approx(expected)
    assert (
        "rows also split by target and draft: a speedup is never pooled over different targets or drafts"
        in (format_text(table))
    )
    assert to_json(table)["split"] == ["target", "draft"]
    assert build(rows, ["target", "draft"]).split == ()  # named: nothing to add
    assert build(cell("one", 6, 0.8), ["gamma"]).split == ()  # one target and one draft: nothing to split


def test_by_config_and_category_splits_each_configuration_by_its_prompts():
    table = build(cell("a", 6, 1.0), [CONFIG, CATEGORY])
    assert sorted((c.category, c.units) for c in table.comparisons) == [("code", 3), ("factual", 3)]
    assert "category" in format_text(table).splitlines()[1]


def test_an_unknown_column_is_one_line_with_a_near_match():
    with pytest.raises(SpecmoeError, match=r"unknown --by column 'topk' \(did you mean 'top_k'\?\)"):
        check_by(["topk"])
    assert check_by([]) == (CONFIG,)


def test_the_help_of_by_names_every_column():
    assert (summary_cli.CONFIG, summary_cli.CATEGORY) == (CONFIG, CATEGORY)
    for name in BY_CHOICES:
        assert name in summary_cli.BY_HELP


@pytest.mark.parametrize(
    ("estimate", "text"),
    [
        (Estimate(1.12, 1.05, 1.19, 10, 0.95), "1.12× [1.05, 1.19] 95% n=10"),
        (Estimate(0.95, 0.90, 1.01, 2, None), "0.95× [0.90, 1.01] range, n=2"),
        (Estimate(1.30, 1.30, 1.30, 1, None), "1.30× n=1"),
    ],
)
def test_interval_labels_carry_level_and_n(estimate, text):
    assert speedup_text(estimate) == text


def test_no_level_is_claimed_below_five_units():
    four = ratio_of_means([1.0, 1.2, 1.1, 1.3], [1.0] * 4)
    five = ratio_of_means([1.0, 1.2, 1.1, 1.3, 1.2], [1.0] * 5)
    assert "range, n=4" in speedup_text(four) and "95%" not in speedup_text(four)
    assert speedup_text(five).endswith("95% n=5")
    text = format_text(build(cell("few", 3, 1.1) + cell("many", 5, 1.1, gamma=2)))
    assert "range, n=3" in text and "95% n=5" in text


def test_json_shape():
    data = to_json(build(sparsity_rows()))
    assert set(data) == {"by", "columns", "fixed", "pooled", "split", "rows", "latency", "runs", "noise_fix"}
    assert data["noise_fix"] is None  # no run flagged
    assert data["by"] == ["config"] and data["columns"] == ["target", "draft", "gamma", "top_k"]
    assert data["runs"] == {"total": 24, "noisy": 0, "beyond_bound": 0, "audit_failed": 0}
    first = data["rows"][0]
    assert {"target", "draft", "gamma", "top_k", "units", "prompts", "baseline_tokens_per_s"} <= set(first)
    assert set(first["speedup"]) == {"value", "low", "high", "level", "n", "text"}
    assert first["speedup"]["level"] == 0.95 and first["speedup"]["n"] == 6
    assert data["latency"] == []
    json.dumps(data, allow_nan=False)  # NaN never reaches the JSON


def served_trace(ttft_ms: list[float]) -> list[dict]:
    requests = [{"kind": "request", "ttft_s": t / 1000, "tpot_s": t / 10000} for t in ttft_ms]
    return [*requests, {"kind": "server", "counters": {}}]


def test_server_rows_get_ttft_and_tpot_percentiles_per_arm_and_concurrency():
    rows = []
    for concurrency in (1, 4):
        for b in range(2):
            trace = served_trace([10.0 * (i + 1) for i in range(concurrency)])
            rows += pair(
                "srv", b, concurrency, 1.5, trace=trace, concurrency=concurrency, requests=concurrency
            )
    # One cell per arm and concurrency, as the suite's keys make them (a new row, so its typed
    # settings are parsed from the new key too).
    rows = [
        replace(
            row, config={**row.config, "cell_key": f"{row.config['cell_key']}-c{row.config['concurrency']}"}
        )
        for row in rows
    ]
    latency = served_latency(rows)
    assert [(s.config["draft"], s.config["concurrency"], s.requests) for s in latency] == [
        (None, 1, 2),
        ("draft-xs", 1, 2),
        (None, 4, 8),
        ("draft-xs", 4, 8),
    ]
    assert latency[2].ttft_s == pytest.approx({"p50": 0.025, "p90": 0.04, "p99": 0.04})
    data = to_json(build(rows))
    assert "concurrency" in data["columns"] and data["latency"][0]["ttft_s"]["p50"] == pytest.approx(0.01)
    assert "TTFT p50/p90/p99 ms" in format_text(build(rows))
    pooled = to_json(build(rows, ["concurrency"]))["latency"]  # --by: each arm at each concurrency
    assert [(s["arm"], s["concurrency"], s["requests"]) for s in pooled] == [
        ("baseline", 1, 2),
        ("sd", 1, 2),
        ("baseline", 4, 8),
        ("sd", 4, 8),
    ]


def test_the_latency_table_counts_the_noisy_runs_it_leaves_out_and_says_why():
    rows = []
    for b in range(3):
        rows += pair("srv", b, 0, 1.5, trace=served_trace([10.0, 20.0]), concurrency=2, requests=2)
    reason = "other processes used 1.00 cores while it ran"
    first_baseline = rows[0].run_id
    rows = [
        replace(r, noisy=True, measure={"noise": reason}) if r.run_id == first_baseline else r for r in rows
    ]
    baseline = next(s for s in served_latency(rows) if s.config["draft"] is None)
    assert (baseline.runs, baseline.noisy, baseline.noise_reason, baseline.requests) == (2, 1, reason, 4)
    text = format_text(build(rows))
    assert "2 (+1 noisy)" in text
    where = "server latency arm=baseline target=moe draft=– gamma=0 concurrency=2"
    assert f"{where}: 1 noisy runs left out ({reason})" in text
    latency = to_json(build(rows))["latency"]
    assert [(s["noisy"], s["noise_reason"]) for s in latency] == [(1, reason), (0, None)]
    all_noisy = [replace(r, noisy=True, measure={"noise": reason}) for r in rows]
    assert [(s.runs, s.noisy, s.ttft_s) for s in served_latency(all_noisy)] == [(0, 3, {}), (0, 3, {})]


def test_percentiles_of_nothing_are_empty():
    assert percentiles([]) == {}
    assert percentiles([1.0, 2.0, 3.0]) == {"p50": 2.0, "p90": pytest.approx(2.8), "p99": pytest.approx(2.98)}


def test_cli_summary_prints_the_table_or_json_and_filters_by_suite(tmp_path, capsys):
    db = tmp_path / "r.db"
    with Store(db) as store:
        for row in sparsity_rows():
            store.add(row)
    assert main(["bench", "summary", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "top-k" in out and "1.20× [1.20, 1.20] 95% n=6" in out
    assert main(["bench", "summary", "--db", str(db), "--json", "--by", "top_k"]) == 0
    assert [r["top_k"] for r in json.loads(capsys.readouterr().out)["rows"]] == [1, 8]
    assert main(["bench", "summary", "--db", str(db), "--suite", "other"]) == 2
    assert "holds no runs of suite 'other'; it holds: s" in capsys.readouterr().err
    assert main(["bench", "summary", "--db", str(tmp_path / "none.db")]) == 2
    assert "results store not found" in capsys.readouterr().err


# --- the physical bound: a speedup no measurement can produce is never shown as a number -------


def test_a_speedup_beyond_the_physical_bound_is_shown_as_impossible():
    # Every SD run here drafted 8 and accepted 8 at γ = 4: α = 1, so 1 + αγ = 5.
    rows = (
        cell("sane", 2, 1.5) + cell("liar", 2, 143_470_222.0, moe_top_k=2) + cell("over", 2, 6.0, moe_top_k=3)
    )
    table = build(rows)
    by_top_k = {c.config["moe_top_k"]: c for c in table.comparisons}
    assert by_top_k[4].impossible == ""
    assert by_top_k[2].impossible.startswith("speedup 1.43e+08 exceeds 1 + alpha*gamma = 5")
    assert by_top_k[3].impossible.startswith("speedup 6 exceeds 1 + alpha*gamma = 5")
    text = format_text(table)
    assert not any(shown in text for shown in ("143470222.00×", "1.43e+08×", "6.00×"))
    lines = {line.split()[3]: line for line in text.splitlines()[3:6]}  # by top-k
    assert "impossible" in lines["2"] and "impossible" in lines["3"] and "1.50×" in lines["4"]
    assert "impossible: 2 rows break the physical bound" in text
    record = {r["top_k"]: r for r in to_json(table)["rows"]}
    assert record[2]["speedup"] is None and record[2]["impossible"].startswith("speedup 1.43e+08")
    assert record[4]["speedup"]["value"] == pytest.approx(1.5) and record[4]["impossible"] is None


def test_without_draft_counts_the_bound_is_one_plus_gamma_and_without_gamma_a_ceiling():
    from specmoe.results.run_audit import SPEEDUP_CEILING, impossible_speedup

    assert impossible_speedup(4.9, 4) == "" and "exceeds 1 + gamma = 5" in impossible_speedup(5.5, 4)
    assert impossible_speedup(999.0, None) == "" and "sanity ceiling" in impossible_speedup(
        2 * SPEEDUP_CEILING, None
    )
    assert "not a finite number" in impossible_speedup(float("inf"), 4)


def test_the_report_tables_show_an_impossible_speedup_as_such():
    from specmoe.report.results import collect
    from specmoe.report.tables import sd_table

    def report_rows(name: str, speedup: float, **config) -> list[RunRow]:
        # The report pairs an SD cell with its baseline cell by this key, which the runner writes.
        return [
            replace(r, config={**r.config, "baseline_cell_key": f"{name}-base"}, prompts=[])
            for r in cell(name, 2, speedup, **config)
        ]

    table = sd_table(collect(report_rows("liar", 143_470_222.0) + report_rows("sane", 1.5, moe_top_k=2)))
    speedups = {r["moe_top_k"]: r for r in table.records}
    assert speedups[4]["speedup_impossible"].startswith("speedup 1.43e+08") and speedups[4]["speedup"] is None
    assert speedups[2]["speedup_impossible"] is None
    column = table.columns.index("speedup [interval] (level, n)")
    shown = sorted(row[column] for row in table.cells)
    assert shown[0].startswith("1.50×") and shown[1].startswith("impossible (speedup 1.43e+08 exceeds")
