"""The harness end to end on the tiny zoo: invariants, audit, resume after SIGKILL."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from audited import counts_pass
from refusing_models import tiny_jamba
from suite_files import TINY_ZOO, write_suite, zoo_models

from specmoe.bench.suite_run import run_suite
from specmoe.metrics import TIME_KEYS, RunCounts, RunTimes
from specmoe.report.summary_table import format_summary
from specmoe.results.compare import compare
from specmoe.results.run_audit import audit_run
from specmoe.results.store import Store
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite

SUITE = {
    "name": "mini",
    "zoo": TINY_ZOO | {"seed": 0},
    "defaults": {
        "prompts": 1,
        "repeats": 2,
        "warmup": 0,
        "max_new_tokens": 12,
        "dtype": "float32",
        "prompt_set": "factual",
    },
    "models": zoo_models("moe", "draft-xs"),
    "groups": [
        {
            "name": "sd",
            "target": ["moe"],
            "draft": ["draft-xs", "oracle:1.0"],
            "oracle_cost": "draft-xs",
            "gamma": [2],
            "batch_size": [1, 2],
        }
    ],
}


@pytest.fixture()
def mini_suite(tmp_path) -> Path:
    return write_suite(tmp_path, **SUITE)


def test_small_suite_runs_end_to_end(mini_suite, tiny_zoo, tmp_path):
    suite = load_suite(mini_suite)
    rows = run_suite(suite, tmp_path / "r.db", tiny_zoo, progress=False)
    assert sorted(r.run_id for r in rows) == sorted(s.run_id for s in expand(suite))
    for row in rows:
        c = row.counts
        assert c.emitted + c.truncated == c.accepted + c.rounds
        assert c.accepted <= c.drafted
        assert c.emitted == 12 * row.config["batch_size"]
        assert counts_pass(row), row.audit_reason
        if row.arm == "sd":  # greedy SD output is compared with plain decoding of the same prompts
            assert "plain greedy decoding" in row.audit_reason
    oracle = [r for r in rows if r.config["draft"] == "oracle:1.0"]
    assert oracle and all(r.acceptance_rate == 1.0 for r in oracle)
    comparisons = compare(rows)
    assert len(comparisons) == 4  # 2 drafts x 2 batch sizes
    assert "speedup" in format_summary(rows)


def test_rerun_skips_finished_runs(mini_suite, tiny_zoo, tmp_path):
    suite = load_suite(mini_suite)
    db = tmp_path / "r.db"
    first = run_suite(suite, db, tiny_zoo, progress=False)
    second = run_suite(suite, db, tiny_zoo, progress=False)
    assert [r.created_at for r in first] == [r.created_at for r in second]
    with Store(db) as store:
        assert len(store.rows()) == len(first)


def _dump(db: Path) -> dict[str, tuple]:
    with sqlite3.connect(db) as conn:
        return {row[0]: row for row in conn.execute("SELECT * FROM runs")}


def _count(db: Path) -> int:
    """Rows stored so far; 0 while the store is still being created."""
    try:
        return len(_dump(db)) if db.exists() else 0
    except sqlite3.OperationalError:
        return 0


def test_resume_after_sigkill_loses_and_duplicates_nothing(mini_suite, tiny_zoo, tmp_path):
    db = tmp_path / "r.db"
    cmd = [
        sys.executable,
        "-m",
        "specmoe.cli",
        "bench",
        "run",
        str(mini_suite),
        "--db",
        str(db),
        "--zoo",
        str(tiny_zoo),
        "--quiet",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if _count(db) > 0 and proc.poll() is None:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    before = _dump(db)
    total = len(expand(load_suite(mini_suite)))
    assert 0 < len(before) < total, "the kill must land mid-suite"
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = _dump(db)
    assert len(after) == total
    assert all(after[run_id] == row for run_id, row in before.items())


def _row(speedup: float, alpha: float, gamma: int):
    rounds = 100
    accepted = round(alpha * gamma * rounds)
    counts = {
        "rounds": rounds,
        "target_forwards": rounds,
        "drafted": gamma * rounds,
        "accepted": accepted,
        "emitted": accepted + rounds,
        "truncated": 0,
    }
    base_counts = {**counts, "drafted": 0, "accepted": 0, "emitted": 100, "target_forwards": 100}
    baseline = SimpleNamespace(
        counts=RunCounts.from_dict(base_counts), times=_times(decode_s=1.0), tokens_per_s=100.0
    )
    times = _times(verify_s=0.8, draft_s=0.1)
    return RunCounts.from_dict(counts), times, gamma, 100.0 * speedup, baseline


def _times(**seconds: float) -> RunTimes:
    return RunTimes.from_dict({**{k: 0.0 for k in TIME_KEYS}, **seconds})


def test_audit_fails_an_impossible_speedup_and_passes_a_consistent_one():
    impossible = audit_run(*_row(1.25, 0.002, 16))
    assert impossible.verdict == "fail" and "1 + alpha*gamma" in impossible.reason
    consistent = audit_run(*_row(1.05, 0.3, 4))
    assert consistent.verdict == "pass", consistent.reason


def test_audit_catches_broken_counts():
    counts, times, gamma, tps, baseline = _row(1.0, 0.5, 4)
    counts = replace(counts, emitted=counts.emitted + 1)
    assert audit_run(counts, times, gamma, tps, baseline).verdict == "fail"


def test_report_renders_from_a_tiny_zoo_suite(mini_suite, tiny_zoo, tmp_path):
    from specmoe.report import write_report

    db = tmp_path / "r.db"
    run_suite(load_suite(mini_suite), db, tiny_zoo, progress=False)
    html_path = write_report(db, tmp_path / "report")
    html = html_path.read_text(encoding="utf-8")
    figures = sorted((tmp_path / "report" / "figures").glob("*.png"))
    assert figures, "a suite with SD runs draws figures"
    for png in figures:
        assert png.stat().st_size > 0 and f'"figures/{png.name}"' in html
    assert '<section id="audit">' in html


def test_a_target_that_cannot_roll_back_is_measured_without_its_sd_arms(tiny_zoo, tmp_path, caplog):
    jamba = tiny_jamba(tiny_zoo, tmp_path / "jamba")
    group = {"name": "sd", "target": ["jamba"], "draft": ["jamba", "ngram"], "gamma": [2], "batch_size": [1]}
    models = {"jamba": {"path": jamba}}
    path = write_suite(tmp_path, **{**SUITE, "models": models, "groups": [group]})
    with caplog.at_level("WARNING"):
        rows = run_suite(load_suite(path), tmp_path / "r.db", tiny_zoo, progress=False)
    assert [r.arm for r in rows] == ["baseline"] * 2  # two repeats, no SD arm
    assert all("speculative decoding on it is refused" in r.env["sd_refused"] for r in rows)
    assert sum("skipped" in record.getMessage() for record in caplog.records) == 4  # 2 drafts x 2 repeats
    assert "SD skipped: 1 target(s)" in format_summary(rows)
