"""A whole suite: measure every run the store lacks, block by block, through an executor.

The layer above the runner (`specmoe.bench.runner` measures one block) and the executors (which
decide where blocks run): both sit below this module, so neither imports it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

from specmoe.bench.executors import Executor, LocalExecutor, Work
from specmoe.bench.plan import blocks, plan
from specmoe.bench.preflight import check_extras, preflight
from specmoe.bench.refusals import SkippedRun, skipped_summary
from specmoe.bench.weights_check import warn_changed_weights
from specmoe.errors import SpecmoeError
from specmoe.results.store import FailedAttempt, RunRow, Store
from specmoe.suite.legacy_keys import keep_stored_keys, warn_path_keys
from specmoe.suite.size import check_size, warn_copies
from specmoe.suite.types import RunSpec, Suite

log = logging.getLogger(__name__)


def run_suite(
    suite: Suite,
    db: Path,
    zoo_dir: Path | None,
    progress: bool = True,
    executor: Executor | None = None,
    threads: int | None = None,
) -> list[RunRow]:
    """Run every arm of the suite not yet in the store; return all of the suite's rows.

    The executor measures the runs block by block (`specmoe.bench.plan`), in this process by default
    or as Ray tasks; this process is the only writer of the store, adding each row, and each failed
    attempt, as it arrives. Runs that failed every attempt are named in one error after the others
    are stored. Runs a model refuses (a batch, `specmoe.bench.refusals`) are logged, left unstored
    and summarised in one warning at the end. `threads`: forward threads for local runs; None lets
    the noise guard choose.
    """
    if threads is not None and threads < 1:  # before the store exists: nothing is left behind
        raise SpecmoeError(
            f"threads must be >= 1, got {threads}, for the suite {suite.name}; pass --threads 1 or more"
        )
    check_suite_extras(suite, executor)  # before the store exists and preflight lists the runs
    preflight(suite, db, zoo_dir, local=is_local(executor))
    warn_copies(suite)
    specs = plan_specs(suite)
    with Store(db) as store:
        done = store.finished_ids()
        if done:
            warn_changed_weights(suite, zoo_dir, store.rows(suite.name))
        kept = keep_stored_keys(specs, done)
        warn_path_keys(specs, kept)
        specs = kept
        todo = [s for s in specs if s.run_id not in done]
        baselines = {(r.config_key, r.repeat): r for r in store.rows() if r.arm == "baseline"}
        work = Work(suite, zoo_dir, tuple(blocks(todo)), baselines, len(specs) - len(todo), progress, threads)
        lost: list[FailedAttempt] = []
        skipped: list[SkippedRun] = []
        for outcome in (executor or LocalExecutor()).run(work):
            if isinstance(outcome, SkippedRun):
                log.warning("run %s skipped, not stored: %s", outcome.run_id, outcome.reason)
                skipped.append(outcome)
            elif isinstance(outcome, FailedAttempt):
                store.add_failure(outcome, datetime.now(UTC).isoformat(timespec="seconds"))
                again = "no attempt left" if outcome.final else "trying again"
                log.warning(
                    "run %s attempt %d failed: %s; %s", outcome.run_id, outcome.attempt, outcome.error, again
                )
                lost += [outcome] if outcome.final else []
            else:
                store.add(outcome)
                log.debug("stored %s (%s, %.1f tok/s)", outcome.run_id, outcome.arm, outcome.tokens_per_s)
        if skipped:
            log.warning("%s", skipped_summary(skipped, len(todo)))
        if lost:
            raise SpecmoeError(
                f"{len(lost)} of {len(todo)} runs failed every attempt (first: {lost[0].run_id}: "
                f"{lost[0].error}); the rest are stored in {db}; run the suite again to retry them"
            )
        ids = {s.run_id for s in specs}
        return [r for r in store.rows() if r.run_id in ids]


def is_local(executor: Executor | None) -> bool:
    return executor is None or isinstance(executor, LocalExecutor)


def check_suite_extras(suite: Suite, executor: Executor | None = None) -> None:
    """The optional extras the suite's runs and its executor need are installed (`check_extras`):
    checked again by `run_suite`, and first by `bench run` before it builds the zoo. The suite's
    size is checked first: listing the runs of an absurd grid (repeats = 10**9) would never end."""
    check_size(suite)
    check_extras(suite, is_local(executor), getattr(executor, "extra", None))


def plan_specs(suite: Suite) -> list[RunSpec]:
    """The suite's specs in measurement order (blocks flattened)."""
    return [spec for block in plan(suite) for spec in block.specs]
