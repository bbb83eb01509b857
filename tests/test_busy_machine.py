"""On a busy machine the noise guard flags runs: every table still lists their configurations, with
how many runs were flagged and why, and says once what to do about it; the report says so in its
header and environment, and gives no reason for an empty view that the flagged runs make untrue.

The rows are made here (no model runs), as in tests/test_summary_table.py.
"""

from __future__ import annotations

import csv
import re
from dataclasses import replace

from test_report import simulate, spec
from test_summary_table import cell

from specmoe.report import write_report
from specmoe.report.summary_json import to_json
from specmoe.report.summary_table import build, format_text
from specmoe.results.noisy import NOISE_FIX
from specmoe.results.store import RunRow, Store

REASON = "other processes used 1.00 cores while it ran"
BUSY = {"noise": REASON, "noise_guard": True, "load_avg": 3.5, "other_cpu": 1.0, "attempts": 3}
QUIET = {"noise": None, "noise_guard": True, "load_avg": 0.5, "other_cpu": 0.02, "attempts": 1}


def flagged(rows: list[RunRow]) -> list[RunRow]:
    return [replace(r, noisy=True, measure=BUSY) for r in rows]


def test_a_summary_of_flagged_runs_lists_each_configuration_why_and_the_fix_once():
    rows = flagged(cell("a", 3, 1.5) + cell("b", 3, 1.2, gamma=2))
    text = format_text(build(rows))
    lines = text.splitlines()
    table_rows = [line for line in lines if "all 6 runs flagged noisy: no number" in line]
    assert len(table_rows) == 2  # never a header with no rows
    assert "noise guard: 12 of 12 runs flagged noisy" in text
    assert sum(f"6 noisy runs left out ({REASON})" in line for line in lines) == 2
    assert text.count(NOISE_FIX) == 1 and "--threads 1" in NOISE_FIX and "SPECMOE_NOISE_GUARD=0" in NOISE_FIX
    data = to_json(build(rows))
    assert data["noise_fix"] == NOISE_FIX and {r["noise_reason"] for r in data["rows"]} == {REASON}


def test_a_partly_noisy_cell_shows_the_numbers_of_its_clean_pairs_marked():
    rows = cell("a", 4, 1.5)
    rows = [replace(r, noisy=True, measure=BUSY) if r.config_key.endswith("-0") else r for r in rows]
    (only,) = build(rows).comparisons
    assert only.units == 3 and only.noisy == 2 and only.speedup.n == 3 and not only.no_number
    row = next(line for line in format_text(build(rows)).splitlines() if "draft-xs" in line)
    assert "1.50×" in row and "(2 noisy)" in row


def test_a_summary_without_flagged_runs_prints_no_fix():
    assert NOISE_FIX not in format_text(build(cell("a", 3, 1.5)))


def _page_text(html: str) -> str:
    """The page's words, tags gone and spaces collapsed (none before punctuation)."""
    return re.sub(r" ([,.;:])", r"\1", re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def test_a_report_of_flagged_runs_lists_them_and_says_so_in_its_header(tmp_path):
    rows = flagged(cell("a", 3, 1.5, moe_top_k=2) + cell("b", 3, 1.2, gamma=2))
    with Store(tmp_path / "r.db") as store:
        for row in rows:
            store.add(row)
    path = write_report(tmp_path / "r.db", tmp_path / "out")
    html = path.read_text(encoding="utf-8")
    header = html.split("<nav>")[0]
    assert 'class="pass"' not in header and "all 12 runs pass" not in header
    assert "12 of 12 runs flagged noisy" in header
    tables = _page_text(html.split('<section id="tables">')[1].split("</section>")[0])
    # Both baselines; and each of the four arms (3 runs each) in the two per-arm time tables.
    assert tables.count("all 3 runs flagged noisy: no number") == 2 + 2 * 4
    assert tables.count("all 6 runs flagged noisy: no number") == 2  # both SD configurations
    assert REASON in tables
    environment = _page_text(html.split('<section id="environment">')[1].split("</section>")[0])
    assert "noise guard on" in environment and "runs flagged noisy 12 of 12" in environment
    assert "median 3.50, max 3.50" in environment and NOISE_FIX in environment
    missing = _page_text(html.split('<section id="not-available">')[1])
    assert "no baseline runs." not in missing  # there were baseline runs: all flagged
    assert "no baseline runs among the runs the noise guard kept" in missing
    with (path.parent / "tables" / "sd_results.csv").open(encoding="utf-8") as f:
        records = list(csv.DictReader(f))
    assert [r["noisy_runs"] for r in records] == ["6", "6"] and records[0]["speedup"] == ""


def test_a_report_of_partly_flagged_runs_counts_them_beside_the_numbers(tmp_path):
    sd = spec("moe", "draft-xs")
    specs = [replace(arm, repeat=r) for r in range(4) for arm in (sd.baseline(), sd)]
    rows = [replace(simulate(s, 0.5), measure=QUIET) for s in specs]
    rows = [replace(r, noisy=True, measure=BUSY) if r.repeat == 0 else r for r in rows]
    with Store(tmp_path / "r.db") as store:
        for row in rows:
            store.add(row)
    html = write_report(tmp_path / "r.db", tmp_path / "out").read_text(encoding="utf-8")
    tables = _page_text(html.split('<section id="tables">')[1].split("</section>")[0])
    assert "3 (1 noisy left out)" in tables  # the baseline: 3 clean runs of 4
    assert "3 (2 noisy left out)" in tables  # the SD configuration: 3 clean pairs of 4
    assert "2 of 8 runs flagged noisy, left out of every number" in _page_text(html.split("<nav>")[0])
    environment = _page_text(html.split('<section id="environment">')[1].split("</section>")[0])
    assert "median 0.50, max 3.50" in environment
