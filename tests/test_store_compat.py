"""A store written before run records were typed still reads, resumes and re-stores byte for byte.

tests/data/pre_typed_rows.db was written by `run_suite` on tests/data/pre_typed_rows.toml (the tiny
zoo) by the code before `RunCounts`/`RunTimes`, plus one hand-made server-style row whose hidden
counts are null. Its run keys and JSON columns are the on-disk format that must not change.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from specmoe.bench.executors import LocalExecutor, Work
from specmoe.bench.suite_run import run_suite
from specmoe.drafts import OracleDraft
from specmoe.metrics import acceptance_rate
from specmoe.results.store import RunRow, Store
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite

DATA = Path(__file__).parent / "data"
SUITE = DATA / "pre_typed_rows.toml"
STORE = DATA / "pre_typed_rows.db"


def _columns(db: Path) -> dict[str, tuple]:
    with sqlite3.connect(db) as conn:
        return {
            r[0]: r[1:]
            for r in conn.execute("SELECT run_id, config, counts, times, acceptance_rate FROM runs")
        }


def _oracle(spec) -> bool:
    return isinstance(spec.draft, OracleDraft)


class _OnlyOracleToRun(LocalExecutor):
    """Fails the test if the resumed suite hands it any block to measure but its oracle run: oracle
    runs stored before each paired unit drew its own accept/reject coins keep their older keys, so
    they are measured again under the per-unit draws; every other run resumes."""

    def run(self, work: Work) -> Iterator[RunRow]:
        again = [s for b in work.blocks for s in b.specs if not _oracle(s)]
        assert not again, f"resuming re-ran {len(again)} stored runs"
        return iter(())


def test_the_old_store_resumes_without_running_anything_but_its_oracle_run(tiny_zoo, tmp_path):
    db = tmp_path / "old.db"
    shutil.copy(STORE, db)
    suite = load_suite(SUITE)
    rows = run_suite(suite, db, tiny_zoo, progress=False, executor=_OnlyOracleToRun())
    assert sorted(r.run_id for r in rows) == sorted(s.run_id for s in expand(suite) if not _oracle(s))
    assert _columns(db) == _columns(STORE)


def test_old_rows_read_back_and_store_again_as_the_same_bytes(tmp_path):
    with Store(STORE) as store:
        rows = store.rows()
    assert len(rows) == 5
    db = tmp_path / "again.db"
    with Store(db) as store:
        for row in rows:
            assert store.add(row)
    assert _columns(db) == _columns(STORE)


def test_acceptance_is_derived_from_the_stored_counts_with_one_convention():
    with Store(STORE) as store:
        rows = {r.run_id: r for r in store.rows()}
    for row in rows.values():
        derived = None if row.arm == "baseline" else acceptance_rate(row.counts.accepted, row.counts.drafted)
        assert row.acceptance_rate == derived, row.run_id
    served = rows["served0000000000-0"]
    assert served.counts.rounds is None and served.times.verify_s is None  # hidden by the server
