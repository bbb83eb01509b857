"""The results store: one SQLite file per campaign, one row per finished run.

Each run is inserted in its own transaction, in WAL mode with synchronous=FULL, so a suite killed at
any moment keeps every run that finished and no part of the one that did not; resuming skips the
stored run ids (`finished_ids`). Inserting a run id twice stores it once: `add` returns False for the
second, so runners sharing a store skip a run another one finished. Nested values (config, env,
counts, times, the per-round trace, the per-prompt records, how the run was measured) are stored as
canonical JSON text; SQLite's json_extract reads them in ad hoc queries.

Schema version 2 added the per-prompt records (`prompts`), the measurement record (`measure`: start
and end times, threads, the machine's load, attempts) and the `noisy` flag. A version-1 file is
upgraded in place when opened: its runs keep their values and get empty records and noisy = 0.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any

from specmoe.canonical import canonical_json, json_value
from specmoe.errors import SpecmoeError
from specmoe.metrics import RunCounts, RunTimes
from specmoe.results.export import EXPORT_FORMATS, export_records, write_records
from specmoe.results.run_row import FailedAttempt, RunRow

STORE_SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- insertion order
    run_id TEXT NOT NULL UNIQUE,
    config_key TEXT NOT NULL,
    baseline_key TEXT NOT NULL,
    suite TEXT NOT NULL,
    group_name TEXT NOT NULL,
    arm TEXT NOT NULL CHECK (arm IN ('baseline', 'sd')),
    repeat INTEGER NOT NULL,
    config TEXT NOT NULL,
    env TEXT NOT NULL,
    counts TEXT NOT NULL,
    times TEXT NOT NULL,
    tokens_per_s REAL NOT NULL,
    acceptance_rate REAL,
    rounds_trace TEXT NOT NULL,
    audit_verdict TEXT NOT NULL,
    audit_reason TEXT NOT NULL,
    created_at TEXT NOT NULL,
    prompts TEXT NOT NULL DEFAULT '[]',
    measure TEXT NOT NULL DEFAULT '{}',
    noisy INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_suite ON runs (suite);
CREATE INDEX IF NOT EXISTS runs_config_key ON runs (config_key);
-- Attempts that produced no row (the task raised, or the process running it died). Added within
-- version 1: opening an older file creates the table, and older readers never look at it.
CREATE TABLE IF NOT EXISTS failed_attempts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    final INTEGER NOT NULL,
    error TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""
_COLUMNS = (
    "run_id, config_key, baseline_key, suite, group_name, arm, repeat, config, env, counts, times, "
    "tokens_per_s, acceptance_rate, rounds_trace, audit_verdict, audit_reason, created_at, prompts, measure, "
    "noisy"
)
# Columns added by schema version 2, with the values an upgraded version-1 run gets.
_V2_COLUMNS = (
    "prompts TEXT NOT NULL DEFAULT '[]'",
    "measure TEXT NOT NULL DEFAULT '{}'",
    "noisy INTEGER NOT NULL DEFAULT 0",
)


LOCK_TIMEOUT_S = 30.0  # how long a write waits for another process's transaction to end
_STORE_TABLES = frozenset({"schema_version", "runs"})


class Store:
    """A results database; use as a context manager (`with Store(path) as store:`).

    Opening checks, before anything is written, that the file is empty or already a specmoe store
    and that it can be written: a store is never modified unless it is one, and a read-only store
    fails at once rather than after a suite's first run. Every SQLite failure becomes one line
    naming the file, the problem and the fix (`_store_error`).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        _check_location(self.path)
        try:
            # Autocommit mode: transactions are opened explicitly, one per write.
            self._conn = sqlite3.connect(self.path, isolation_level=None, timeout=LOCK_TIMEOUT_S)
        except sqlite3.Error as err:
            raise _store_error(self.path, err) from None
        try:
            self._check_is_store()
            self._conn.execute("PRAGMA journal_mode=WAL")
            # FULL: each commit is fsynced, so a finished run survives a power cut too, not only a
            # killed process; one fsync per run (milliseconds) is noise next to a run (seconds).
            self._conn.execute("PRAGMA synchronous=FULL")
            self._create_schema()
        except sqlite3.Error as err:
            self._conn.close()
            raise _store_error(self.path, err) from None
        except SpecmoeError:
            self._conn.close()
            raise

    def _check_is_store(self) -> None:
        """Refuse an SQLite file that holds other tables: it is someone else's database."""
        tables = {row[0] for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        tables.discard("sqlite_sequence")
        if tables and not tables >= _STORE_TABLES:
            raise SpecmoeError(
                f"{self.path} is an SQLite database but not a specmoe results store "
                f"(tables: {', '.join(sorted(tables)[:5])}); it was left untouched; pass a new --db path"
            )

    def _create_schema(self) -> None:
        with self._transaction():
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._conn.execute(statement)
            versions = [row[0] for row in self._conn.execute("SELECT version FROM schema_version")]
            if not versions:
                self._conn.execute("INSERT INTO schema_version (version) VALUES (?)", (STORE_SCHEMA_VERSION,))
            elif versions == [1]:
                self._upgrade_from_1()
            elif versions != [STORE_SCHEMA_VERSION]:
                raise SpecmoeError(
                    f"{self.path}: store schema version {versions}, this specmoe reads "
                    f"{STORE_SCHEMA_VERSION}; use a new store file"
                )

    def _upgrade_from_1(self) -> None:
        columns = {row[1] for row in self._conn.execute("PRAGMA table_info(runs)")}
        for definition in _V2_COLUMNS:
            if definition.split()[0] not in columns:
                self._conn.execute(f"ALTER TABLE runs ADD COLUMN {definition}")
        self._conn.execute("UPDATE schema_version SET version = ?", (STORE_SCHEMA_VERSION,))

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn)

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    @property
    def journal_mode(self) -> str:
        return self._conn.execute("PRAGMA journal_mode").fetchone()[0]

    def has(self, run_id: str) -> bool:
        return self._conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None

    def finished_ids(self) -> set[str]:
        try:
            return {row[0] for row in self._conn.execute("SELECT run_id FROM runs")}
        except sqlite3.Error as err:
            raise _store_error(self.path, err) from None

    def add(self, row: RunRow) -> bool:
        """Insert one finished run in its own transaction. Returns False, storing nothing, when the
        run id is already stored: another process sharing the store finished the same run first."""
        values = (
            row.run_id,
            row.config_key,
            row.baseline_key,
            row.suite,
            row.group,
            row.arm,
            row.repeat,
            canonical_json(row.config),
            canonical_json(row.env),
            canonical_json(asdict(row.counts)),
            canonical_json(row.times.to_dict()),
            row.tokens_per_s,
            row.acceptance_rate,
            canonical_json(row.rounds_trace),
            row.audit_verdict,
            row.audit_reason,
            row.created_at,
            canonical_json(row.prompts),
            canonical_json(row.measure),
            int(row.noisy),
        )
        placeholders = ", ".join("?" * len(values))
        try:
            with self._transaction():
                self._conn.execute(f"INSERT INTO runs ({_COLUMNS}) VALUES ({placeholders})", values)
        except sqlite3.IntegrityError:
            if self.has(row.run_id):
                return False
            raise
        except sqlite3.Error as err:
            raise _store_error(self.path, err) from None
        return True

    def add_failure(self, failure: FailedAttempt, created_at: str) -> None:
        """Record an attempt that produced no row, in its own transaction."""
        try:
            with self._transaction():
                self._conn.execute(
                    "INSERT INTO failed_attempts (run_id, attempt, final, error, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (failure.run_id, failure.attempt, int(failure.final), failure.error, created_at),
                )
        except sqlite3.Error as err:
            raise _store_error(self.path, err) from None

    def failures(self) -> list[FailedAttempt]:
        """Every recorded failed attempt, in the order they happened."""
        query = "SELECT run_id, attempt, final, error FROM failed_attempts ORDER BY seq"
        return [FailedAttempt(r, a, e, bool(f)) for r, a, f, e in self._conn.execute(query)]

    def rows(self, suite: str | None = None) -> list[RunRow]:
        """Stored runs in insertion order, optionally only those of one suite."""
        try:
            return list(self._iter_rows(suite))
        except sqlite3.Error as err:
            raise _store_error(self.path, err) from None

    def _iter_rows(self, suite: str | None) -> Iterator[RunRow]:
        query = f"SELECT {_COLUMNS} FROM runs"
        params: tuple[str, ...] = ()
        if suite is not None:
            query += " WHERE suite = ?"
            params = (suite,)
        for values in self._conn.execute(query + " ORDER BY seq", params):
            try:
                row = _row_from_values(values)
            except (ValueError, TypeError, KeyError) as err:  # a row edited or damaged outside specmoe
                what = f"column {err.column}" if isinstance(err, _BadColumn) else "row"
                raise SpecmoeError(
                    f"run {values[0]!r} has a malformed {what} ({_first_line(err)}), in {self.path}; "
                    f"restore the store from a copy, or delete the run (DELETE FROM runs WHERE run_id = "
                    f"'{values[0]}') to measure it again"
                ) from None
            yield row

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


def check_store_path(path: str | Path) -> None:
    """Raise what opening a store at `path` would, without creating the file: an existing file must
    be a writable specmoe store, a new one needs an existing, writable folder."""
    path = Path(path)
    if path.exists():
        Store(path).close()
    else:
        _check_location(path)


def _check_location(path: Path) -> None:
    """One line for a store path that cannot work, before SQLite tries (and says only "unable to
    open database file"). WAL mode writes -wal and -shm files beside the store, so its folder must
    be writable too."""
    folder = path.parent
    if not folder.is_dir():
        raise SpecmoeError(
            f"{path}: folder {folder} does not exist; create it (mkdir -p {folder}) or pass another --db"
        )
    if path.exists() and not path.is_file():
        raise SpecmoeError(f"{path} is not a file; pass the path of a results .db file")
    for where in (path, folder) if path.exists() else (folder,):
        if not os.access(where, os.W_OK):
            raise SpecmoeError(f"{where} is read-only; make it writable or pass --db in a writable folder")


# SQLite's primary result codes (sqlite3.h), read from `sqlite_errorcode & 0xFF`.
_SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_READONLY, _SQLITE_IOERR = 5, 6, 8, 10
_SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 11, 13, 14, 26


def _store_error(path: Path, err: sqlite3.Error) -> SpecmoeError:
    """The one line for an SQLite failure on the store at `path`: what happened and what to do."""
    code = (getattr(err, "sqlite_errorcode", None) or 0) & 0xFF
    if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
        why = f"locked by another process for {LOCK_TIMEOUT_S:g} s; wait for it to finish or use another --db"
    elif code == _SQLITE_READONLY:
        why = "read-only; make the file and its folder writable or pass another --db"
    elif code == _SQLITE_FULL:
        why = "the disk is full; free space and run again (stored runs are kept, the suite resumes)"
    elif code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        why = f"not a readable results store ({err}); restore it from a copy or pass a new --db path"
    elif code == _SQLITE_CANTOPEN:
        why = "cannot be opened; check the path and its permissions"
    elif code == _SQLITE_IOERR:
        why = f"disk I/O error ({err}); check the disk and free space, then run again"
    else:
        why = f"not a usable results store ({err}); pass a new .db path"
    return SpecmoeError(f"{path}: {why}")


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception. IMMEDIATE takes the write lock up
    front, so a concurrent writer waits (busy timeout) instead of failing mid-transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            try:
                self._conn.execute("COMMIT")
                return
            except sqlite3.Error:  # a full disk can fail the commit itself; leave no transaction open
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")


class _BadColumn(ValueError):
    """A stored JSON column that does not parse, with the column's name."""

    def __init__(self, column: str, err: Exception) -> None:
        super().__init__(_first_line(err))
        self.column = column


def _json(column: str, text: Any, kind: type[dict] | type[list] = dict) -> Any:
    try:
        value = json_value(text)
    except (TypeError, ValueError) as err:
        raise _BadColumn(column, err) from None
    if not isinstance(value, kind):  # readers index it: a JSON number here would fail far away
        raise _BadColumn(column, TypeError(f"a JSON {type(value).__name__}, not {kind.__name__}"))
    return value


def _first_line(err: Exception) -> str:
    if isinstance(err, _BadColumn):
        return str(err)
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _row_from_values(values: tuple[Any, ...]) -> RunRow:
    (run_id, config_key, baseline_key, suite, group, arm, repeat, config, env, counts, times,
     tokens_per_s, acceptance_rate, trace, verdict, reason, created_at, prompts, measure,
     noisy) = values  # fmt: skip
    return RunRow(
        run_id=run_id,
        config_key=config_key,
        baseline_key=baseline_key,
        suite=suite,
        group=group,
        arm=arm,
        repeat=repeat,
        config=_json("config", config),
        env=_json("env", env),
        counts=RunCounts.from_dict(_json("counts", counts)),
        times=RunTimes.from_dict(_json("times", times)),
        tokens_per_s=tokens_per_s,
        acceptance_rate=acceptance_rate,
        rounds_trace=_json("rounds_trace", trace, list),
        audit_verdict=verdict,
        audit_reason=reason,
        created_at=created_at,
        prompts=_json("prompts", prompts, list),
        measure=_json("measure", measure),
        noisy=bool(noisy),
    )


# --- export (the file formats are `export`'s) -----------------------------------------------------


def export(db_path: str | Path, out_path: str | Path, fmt: str) -> int:
    """Write every stored run to a CSV or Parquet file; returns the number of runs written."""
    columns, records = export_records(stored_rows(db_path, out_path, fmt))
    write_records(Path(out_path), columns, records, fmt)
    return len(records)


def stored_rows(db_path: str | Path, out_path: str | Path, fmt: str) -> list[RunRow]:
    """The rows an export writes, after checking the format, the store and the output folder."""
    if fmt not in EXPORT_FORMATS:
        raise SpecmoeError(f"unknown export format '{fmt}'; available: {', '.join(EXPORT_FORMATS)}")
    if not Path(db_path).is_file():
        raise SpecmoeError(f"results store not found: {db_path}; run a suite first or pass the right path")
    if any(not c.isprintable() for c in str(out_path)):  # a newline pasted into the name, say
        raise SpecmoeError(
            f"--out {str(out_path)!a} holds a control character (a newline or tab); "
            "pass a file name without one"
        )
    if Path(out_path).is_dir():
        raise SpecmoeError(f"--out {out_path} is a directory; pass a file name inside it, such as runs.csv")
    folder = Path(out_path).parent
    if not folder.is_dir():
        raise SpecmoeError(f"{out_path}: folder {folder} does not exist; create it or pass another --out")
    with Store(db_path) as store:
        return store.rows()


__all__ = [  # the run's row types live in `run_row`; importers of the store find them here too
    "EXPORT_FORMATS",
    "LOCK_TIMEOUT_S",
    "STORE_SCHEMA_VERSION",
    "FailedAttempt",
    "RunRow",
    "Store",
    "check_store_path",
    "export",
    "stored_rows",
]
