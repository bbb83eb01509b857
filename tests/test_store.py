"""The results store: round trip, no duplicates, WAL, crash safety under SIGKILL, export."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from specmoe.errors import SpecmoeError
from specmoe.metrics import COUNT_KEYS, TIME_KEYS, RunCounts, RunTimes
from specmoe.results import store as store_module
from specmoe.results.store import RunRow, Store, export


def make_row(i: int, suite: str = "s", trace_len: int = 3) -> RunRow:
    arm = "baseline" if i % 2 == 0 else "sd"
    return RunRow(
        run_id=f"run-{i:05d}",
        config_key=f"key-{i // 2}",
        baseline_key=f"key-{i // 2}",
        suite=suite,
        group="B",
        arm=arm,
        repeat=i % 3,
        config={"target": "moe", "draft": None if arm == "baseline" else "draft-xs", "gamma": 4, "i": i},
        env={"torch": "2.x", "host": {"cpus": 2}},
        counts=RunCounts(*(i + n for n in range(len(COUNT_KEYS)))),
        times=RunTimes(*(0.5 * n for n in range(len(TIME_KEYS)))),
        tokens_per_s=100.0 + i,
        acceptance_rate=None if arm == "baseline" else 0.25,
        rounds_trace=[{"round": r, "accepted": [r % 5], "verify_s": 0.01 * r} for r in range(trace_len)],
        audit_verdict="ok",
        audit_reason="",
        created_at=f"2026-01-01T00:00:{i % 60:02d}",
    )


def test_round_trip(tmp_path):
    rows = [make_row(i) for i in range(5)]
    with Store(tmp_path / "r.sqlite") as store:
        for row in rows:
            store.add(row)
        assert store.has("run-00003") and not store.has("run-00099")
        assert store.finished_ids() == {r.run_id for r in rows}
        assert len(store) == 5
    with Store(tmp_path / "r.sqlite") as store:
        assert store.rows() == rows  # insertion order, every field, nested JSON included


def test_rows_filters_by_suite(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        store.add(make_row(0, suite="a"))
        store.add(make_row(1, suite="b"))
        store.add(make_row(2, suite="a"))
        assert [r.run_id for r in store.rows("a")] == ["run-00000", "run-00002"]
        assert [r.run_id for r in store.rows()] == ["run-00000", "run-00001", "run-00002"]


def test_duplicate_insert_is_skipped_and_keeps_one(tmp_path):
    # Two runners sharing a store: the one that finishes a run second skips it, without an error.
    with Store(tmp_path / "r.sqlite") as store, Store(tmp_path / "r.sqlite") as other:
        assert store.add(make_row(1)) is True
        assert other.add(make_row(1)) is False
        assert len(store) == 1
        assert other.add(make_row(2)) is True  # the skipped insert left no open transaction behind
        assert len(store) == 2


def test_a_foreign_sqlite_file_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('a')")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(
        SpecmoeError, match=r"not a specmoe results store \(tables: users\); it was left untouched"
    ):
        Store(path)
    assert path.read_bytes() == before and not Path(f"{path}-wal").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"hello, not a database" * 100, "not a readable results store (file is not a database)"),
        (None, "is not a file"),
    ],
)
def test_unusable_store_files_are_one_line(tmp_path, content, message):
    path = tmp_path / "r.db"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(SpecmoeError, match=re.escape(message)):
        Store(path)


def test_a_store_in_a_missing_folder_is_one_line(tmp_path):
    with pytest.raises(SpecmoeError, match="does not exist; create it"):
        Store(tmp_path / "nope" / "r.db")
    assert not (tmp_path / "nope").exists()


def test_corrupted_pages_are_one_line(tmp_path):
    path = tmp_path / "r.db"
    with Store(path) as store:
        for i in range(20):
            store.add(make_row(i))
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xab" * (len(data) - 4096)  # every page after the first
    path.write_bytes(bytes(data))
    with pytest.raises(SpecmoeError, match="database disk image is malformed"), Store(path) as store:
        store.rows()


def test_a_full_disk_is_one_line_and_keeps_the_store_usable(tmp_path):
    with Store(tmp_path / "r.db") as store:
        # A page limit makes SQLite report SQLITE_FULL exactly as a full disk does.
        store._conn.execute(
            f"PRAGMA max_page_count = {store._conn.execute('PRAGMA page_count').fetchone()[0]}"
        )
        with pytest.raises(SpecmoeError, match="the disk is full; free space and run again"):
            store.add(make_row(0, trace_len=2000))
        assert len(store) == 0


def test_a_locked_store_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "r.db"
    Store(path).close()
    monkeypatch.setattr(store_module, "LOCK_TIMEOUT_S", 0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(SpecmoeError, match="locked by another process"):
            Store(path)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_store_fails_on_open(tmp_path):
    path = tmp_path / "r.db"
    Store(path).close()
    path.chmod(0o444)
    with pytest.raises(SpecmoeError, match="read-only"):
        Store(path)


def test_wal_mode_and_schema_version(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as store:
        assert store.journal_mode == "wal"
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent, not per connection
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(2,)]
    conn.close()


V1_SCHEMA = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version VALUES (1);
CREATE TABLE runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL UNIQUE, config_key TEXT NOT NULL,
    baseline_key TEXT NOT NULL, suite TEXT NOT NULL, group_name TEXT NOT NULL,
    arm TEXT NOT NULL CHECK (arm IN ('baseline', 'sd')), repeat INTEGER NOT NULL, config TEXT NOT NULL,
    env TEXT NOT NULL, counts TEXT NOT NULL, times TEXT NOT NULL, tokens_per_s REAL NOT NULL,
    acceptance_rate REAL, rounds_trace TEXT NOT NULL, audit_verdict TEXT NOT NULL,
    audit_reason TEXT NOT NULL, created_at TEXT NOT NULL
);
"""


def test_a_version_1_store_is_upgraded_in_place_and_keeps_its_runs(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    row = make_row(0)
    conn.execute(
        "INSERT INTO runs (run_id, config_key, baseline_key, suite, group_name, arm, repeat, config, "
        "env, counts, times, tokens_per_s, acceptance_rate, rounds_trace, audit_verdict, audit_reason, "
        "created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (row.run_id, row.config_key, row.baseline_key, row.suite, row.group, row.arm, row.repeat,
         json.dumps(row.config), json.dumps(row.env),
         json.dumps(asdict(row.counts)), json.dumps(asdict(row.times)),
         row.tokens_per_s, row.acceptance_rate, "[]", row.audit_verdict, row.audit_reason, row.created_at),
    )  # fmt: skip
    conn.commit()
    conn.close()
    with Store(path) as store:
        (old,) = store.rows()
        assert (old.run_id, old.counts, old.noisy, old.prompts, old.measure) == (
            row.run_id,
            row.counts,
            False,
            [],
            {},
        )
        store.add(make_row(1))  # a resumed suite adds to it
        assert store.finished_ids() == {row.run_id, make_row(1).run_id}
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [(2,)]
    conn.close()


def test_foreign_schema_version_is_refused(tmp_path):
    path = tmp_path / "r.sqlite"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = 7")
    conn.commit()
    conn.close()
    with pytest.raises(SpecmoeError, match="schema version"):
        Store(path)


@pytest.mark.parametrize(
    "change",
    [
        {"arm": "draft"},
        {"counts": {k: 0 for k in COUNT_KEYS}},  # untyped counts
        {"times": {k: 0.0 for k in TIME_KEYS}},
        {"tokens_per_s": float("nan")},
    ],
)
def test_malformed_rows_are_refused(change):
    row = make_row(1)
    # The constructor's own fields only: `settings` is derived, and passing it would fail for that.
    values = {**{f.name: getattr(row, f.name) for f in fields(row) if f.init}, **change}
    with pytest.raises((ValueError, TypeError)):
        RunRow(**values)


@pytest.mark.parametrize(
    ("kind", "values"),
    [(RunCounts, {"rounds": 1}), (RunTimes, {**{k: 0.0 for k in TIME_KEYS}, "extra_s": 1.0})],
)
def test_stored_counts_and_times_need_exactly_their_keys(kind, values):
    with pytest.raises(ValueError, match="needs exactly the keys"):
        kind.from_dict(values)


WRITER = textwrap.dedent(
    """
    import sys
    from specmoe.results.store import RunRow, Store
    from specmoe.metrics import COUNT_KEYS, TIME_KEYS, RunCounts, RunTimes

    db, total = sys.argv[1], int(sys.argv[2])
    with Store(db) as store:
        done = store.finished_ids()
        for i in range(total):
            run_id = f"run-{i:05d}"
            if run_id in done:
                continue
            # A long trace makes each row span many pages, so the kill can land inside a write.
            trace = [{"round": r, "i": i, "pad": "x" * 40} for r in range(100 + i)]
            store.add(RunRow(
                run_id=run_id, config_key=f"k{i}", baseline_key=f"k{i}", suite="s", group="g",
                arm="baseline", repeat=0, config={"i": i}, env={},
                counts=RunCounts(*(i for _ in COUNT_KEYS)), times=RunTimes(*(0.0 for _ in TIME_KEYS)),
                tokens_per_s=float(i + 1), acceptance_rate=None,
                rounds_trace=trace, audit_verdict="ok", audit_reason="", created_at="t",
            ))
            print(i, flush=True)
    """
)


def assert_rows_complete(rows: list[RunRow]) -> None:
    ids = [r.run_id for r in rows]
    assert ids == [f"run-{i:05d}" for i in range(len(rows))]  # a prefix, in order, no duplicates
    for i, row in enumerate(rows):
        assert row.config == {"i": i} and row.counts.emitted == i
        assert len(row.rounds_trace) == 100 + i and row.rounds_trace[-1]["i"] == i


def test_sigkill_mid_suite_keeps_finished_runs_and_resumes_without_duplicates(tmp_path):
    db, total = tmp_path / "r.sqlite", 150
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db), str(total)], stdout=subprocess.PIPE, text=True
    )
    printed = 0
    for _ in writer.stdout:
        printed += 1
        if printed == 25:
            os.kill(writer.pid, signal.SIGKILL)
            break
    writer.wait()
    writer.stdout.close()
    assert writer.returncode == -signal.SIGKILL

    with Store(db) as store:
        survivors = store.rows()
    assert printed <= len(survivors) < total  # every acknowledged run survived; the rest did not run
    assert_rows_complete(survivors)

    subprocess.run([sys.executable, "-c", WRITER, str(db), str(total)], check=True, capture_output=True)
    with Store(db) as store:
        rows = store.rows()
    assert len(rows) == total
    assert_rows_complete(rows)


def test_csv_export_columns(tmp_path):
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        for i in range(3):
            store.add(make_row(i))
    out = tmp_path / "runs.csv"
    assert export(db, out, "csv") == 3
    with out.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        records = list(reader)
        columns = reader.fieldnames
    assert columns == [
        "run_id", "config_key", "baseline_key", "suite", "group", "arm", "repeat",
        "config.draft", "config.gamma", "config.i", "config.target",
        "env.host.cpus", "env.torch",
        "counts.rounds", "counts.target_forwards", "counts.drafted", "counts.accepted", "counts.emitted",
        "counts.truncated",
        "times.prefill_s", "times.decode_s", "times.draft_s", "times.verify_s", "times.overhead_s",
        "times.wall_s", "times.state_s",
        "tokens_per_s", "acceptance_rate", "noisy", "audit_verdict", "audit_reason", "created_at",
    ]  # fmt: skip
    assert "rounds_trace" not in columns
    assert [r["run_id"] for r in records] == ["run-00000", "run-00001", "run-00002"]
    assert records[0]["acceptance_rate"] == "" and records[1]["acceptance_rate"] == "0.25"
    assert records[1]["counts.emitted"] == str(1 + COUNT_KEYS.index("emitted"))


def test_csv_export_is_byte_identical_for_the_same_runs(tmp_path):
    outputs = []
    for name in ("a", "b"):
        with Store(tmp_path / f"{name}.sqlite") as store:
            for i in range(4):
                store.add(make_row(i))
        export(tmp_path / f"{name}.sqlite", tmp_path / f"{name}.csv", "csv")
        outputs.append((tmp_path / f"{name}.csv").read_bytes())
    assert outputs[0] == outputs[1]


def test_export_errors(tmp_path):
    db = tmp_path / "r.sqlite"
    Store(db).close()
    with pytest.raises(SpecmoeError, match="unknown export format 'xlsx'; available: csv, parquet"):
        export(db, tmp_path / "x", "xlsx")
    with pytest.raises(SpecmoeError, match="results store not found"):
        export(tmp_path / "missing.sqlite", tmp_path / "x.csv", "csv")
    assert not (tmp_path / "missing.sqlite").exists()


def test_parquet_export(tmp_path):
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        store.add(make_row(0))
        store.add(make_row(1))
    out = tmp_path / "runs.parquet"
    try:
        import pyarrow.parquet as pq
    except ImportError:
        with pytest.raises(
            SpecmoeError, match=r"parquet export needs the 'parquet' extra.*-e '\.\[parquet\]'"
        ):
            export(db, out, "parquet")
        return
    assert export(db, out, "parquet") == 2
    table = pq.read_table(out)
    assert table.column_names[:3] == ["run_id", "config_key", "baseline_key"]
    assert table.column("run_id").to_pylist() == ["run-00000", "run-00001"]
