"""Where a suite's runs are measured: in this process (`local`) or as tasks on a Ray cluster (`ray`).

Either way the driver, the process that called `run_suite`, is the only writer of the store: an
executor yields each finished row, each failed attempt and each run a model refused
(`specmoe.bench.refusals`), and the driver stores or logs it as it arrives,
so the store's guarantees (one transaction per run, resume, no duplicates) hold for both. Both
measure a block (`specmoe.bench.plan`: a baseline and its SD arms on one prompt batch) back to back
in one process.

Ray is an optional dependency (`pip install -e '.[ray]'`), imported only when the ray executor runs.
Retries are the driver's, not Ray's (tasks run with `max_retries=0`): the driver sees every failed
attempt, records it, and submits the run again, so a task that raised or a worker that died is
retried and recorded, never silently dropped.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

from specmoe.bench.noise import choose_threads
from specmoe.bench.plan import Block
from specmoe.bench.progress import SuiteProgress
from specmoe.bench.refusals import BlockRows, SkippedRun
from specmoe.bench.runner import ModelPool, Runner
from specmoe.errors import RunFailed, SpecmoeError
from specmoe.results.store import FailedAttempt, RunRow
from specmoe.suite.types import RunSpec, Suite

EXECUTORS = ("local", "ray")
DEFAULT_MAX_RETRIES = 2


@dataclass(frozen=True)
class Work:
    """What `run_suite` hands an executor."""

    suite: Suite
    zoo_dir: Path | None
    blocks: tuple[Block, ...]  # runs not yet stored, in measurement order (specmoe.bench.plan)
    baselines: Mapping[tuple[str, int], RunRow]  # stored baseline rows by (config_key, repeat)
    skipped: int  # runs of the suite already stored
    progress: bool  # show progress on stderr (`specmoe.bench.progress`)
    threads: int | None = None  # forward threads for local runs; None: the noise guard chooses

    @property
    def specs(self) -> tuple[RunSpec, ...]:
        return tuple(spec for block in self.blocks for spec in block.specs)

    def progress_view(self) -> SuiteProgress:
        return SuiteProgress(self.specs, self.skipped, self.baselines, shown=self.progress)


Outcome = RunRow | FailedAttempt | SkippedRun  # what an executor yields, one run each


class Executor(Protocol):
    def run(self, work: Work) -> Iterator[Outcome]:
        """Measure every spec of `work`; yield each row, failed attempt or skipped run as it happens."""
        ...


def baseline_key(spec: RunSpec) -> tuple[str, int]:
    """The (config_key, repeat) under which a spec's baseline row is found."""
    return spec.baseline_key, spec.repeat


class LocalExecutor:
    """One block after another in this process, in the suite's measurement order (the default)."""

    def run(self, work: Work) -> Iterator[Outcome]:
        if not work.blocks:
            return
        choose_threads(work.threads)
        runner = Runner(ModelPool(work.suite, work.zoo_dir))
        baselines = dict(work.baselines)
        with work.progress_view() as progress:
            for block in work.blocks:
                progress.started(block)
                try:
                    done = runner.block(block, baselines.get(baseline_key(block.specs[0])))
                except RunFailed as err:
                    # Nothing of the block is stored (its rows are made together); the error is
                    # recorded per run and the suite goes on; running the suite again retries it.
                    yield from (FailedAttempt(s.run_id, 1, str(err), True) for s in block.specs)
                    continue
                progress.finished(block, done.rows, done.skipped)
                for row in done.rows:
                    if row.arm == "baseline":
                        baselines[(row.config_key, row.repeat)] = row
                    yield row
                yield from done.skipped


@dataclass(frozen=True)
class RayExecutor:
    """Each run is a Ray task asking for the CPUs and GPUs its group sets (`cpus`, `gpus`).

    address: a running cluster ("auto", "ray://head:10001", "head:6379"); None starts a local Ray
    instance for the duration of the suite, with `num_cpus` logical CPUs (all when None). When Ray
    is already initialised in this process, that instance is used and left running.
    fault_dir: fault injection for tests; the first task to start kills its own worker process
    (`os._exit`, as when a node is lost) after leaving a marker file here, so later tasks, its retry
    included, run normally.
    """

    extra: ClassVar[str] = "ray"  # the pyproject extra it imports, checked before a suite starts
    address: str | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    num_cpus: int | None = None
    fault_dir: Path | None = None

    def run(self, work: Work) -> Iterator[Outcome]:
        ray = import_ray()
        started_here = not ray.is_initialized()
        if started_here:
            _init(ray, self.address, self.num_cpus)
        try:
            yield from _Driver(ray, work, self).drive()
        finally:
            if started_here:
                ray.shutdown()


def make_executor(
    kind: str = "local", address: str | None = None, max_retries: int = DEFAULT_MAX_RETRIES
) -> Executor:
    """The executor named `kind` (one of EXECUTORS). `address` and `max_retries` are Ray's: an
    address given for a local run is refused rather than ignored; a negative retry count is none."""
    if kind == "ray":
        return RayExecutor(address=address, max_retries=max(max_retries, 0))
    if kind != "local":
        raise SpecmoeError(f"unknown executor '{kind}'; available: {', '.join(EXECUTORS)}")
    if address is not None:
        raise SpecmoeError("--address is the Ray cluster's; add --executor ray")
    return LocalExecutor()


def import_ray():
    try:
        import ray
    except ImportError:
        raise SpecmoeError("--executor ray needs Ray: pip install -c constraints.txt -e '.[ray]'") from None
    return ray


def _init(ray, address: str | None, num_cpus: int | None) -> None:
    options: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING"}
    if address is None:
        options["num_cpus"] = num_cpus
    try:
        ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise SpecmoeError(
            f"cannot start or reach {where} ({_first_line(err)}); start one with `ray start --head` "
            "and pass its address, or leave out --address for a local instance"
        ) from None


class _Driver:
    """Submits each block as one task (its arms run back to back in one worker, as locally), collects
    the rows as blocks finish, and resubmits a failed block until `max_retries` retries are spent.

    Blocks against servers go one at a time: two at once would load the servers together (timings
    measure the overlap) and mix the servers' counters, which count every request.
    """

    def __init__(self, ray, work: Work, executor: RayExecutor) -> None:
        self.ray = ray
        self.work = work
        self.executor = executor
        self.task = ray.remote(_task)
        self.groups = {g.name: g for g in work.suite.groups}
        self.pending: dict[Any, tuple[Block, int]] = {}  # task ref -> (block, attempt)
        self.served_queue: list[tuple[Block, int]] = []  # server blocks waiting for their turn
        self.serving = False  # a server block is in flight

    def drive(self) -> Iterator[Outcome]:
        with self.work.progress_view() as progress:
            yield from self._collect(progress)

    def _collect(self, progress: SuiteProgress) -> Iterator[Outcome]:
        for block in self.work.blocks:
            self._submit(block, 1)
        while self.pending:
            ready, _ = self.ray.wait(list(self.pending), num_returns=1)
            block, attempt = self.pending.pop(ready[0])
            if block.specs[0].concurrency is not None:
                self.serving = False
                if self.served_queue:
                    self._submit(*self.served_queue.pop(0))
            try:
                done = self.ray.get(ready[0])
            except self.ray.exceptions.RayError as err:
                yield from self._failed(block, attempt, _task_error(err))
                continue
            progress.finished(block, done.rows, done.skipped)
            yield from done.rows
            yield from done.skipped

    def _failed(self, block: Block, attempt: int, error: str) -> Iterator[FailedAttempt]:
        final = attempt > self.executor.max_retries
        for spec in block.specs:
            yield FailedAttempt(spec.run_id, attempt, error, final)
        if not final:
            self._submit(block, attempt + 1)

    def _submit(self, block: Block, attempt: int) -> None:
        first = block.specs[0]
        if first.concurrency is not None:
            if self.serving:
                self.served_queue.append((block, attempt))
                return
            self.serving = True
        cpus, gpus = resources(self.work.suite, first, self.groups)
        baseline = self.work.baselines.get(baseline_key(first))
        ref = self.task.options(num_cpus=cpus, num_gpus=gpus, max_retries=0).remote(
            self.work.suite, self.work.zoo_dir, block, baseline, attempt, self.executor.fault_dir
        )
        self.pending[ref] = (block, attempt)


def resources(suite: Suite, spec: RunSpec, groups: Mapping[str, Any] | None = None) -> tuple[float, float]:
    """(CPUs, GPUs) one run asks of the cluster: its group's `cpus` and `gpus`; GPUs default to 1 on
    cuda devices and 0 elsewhere."""
    group = (groups if groups is not None else {g.name: g for g in suite.groups}).get(spec.group)
    cpus = group.cpus if group is not None else 1.0
    if group is not None and group.gpus is not None:
        return cpus, group.gpus
    return cpus, 1.0 if spec.concurrency is None and spec.device.startswith("cuda") else 0.0


# --- inside a Ray worker ------------------------------------------------------------------------

_RUNNERS: dict[tuple[str, str, str], Runner] = {}  # per worker process: models load once


def _task(
    suite: Suite,
    zoo_dir: Path | None,
    block: Block,
    baseline: RunRow | None,
    attempt: int,
    fault_dir: Path | None,
) -> BlockRows:
    if fault_dir is not None:
        _die_once(fault_dir, block.specs[0].run_id)
    key = (str(suite.path), suite.name, str(zoo_dir))
    if key not in _RUNNERS:
        _RUNNERS[key] = Runner(ModelPool(suite, zoo_dir))
    done = _RUNNERS[key].block(block, baseline)
    ray_env = {"executor": "ray", "attempts": attempt, "node": platform.node()}
    return replace(done, rows=[replace(row, env={**row.env, **ray_env}) for row in done.rows])


def _die_once(fault_dir: Path, run_id: str) -> None:
    try:
        with (fault_dir / "killed").open("x") as marker:  # exclusive: one task wins
            marker.write(run_id)
    except FileExistsError:
        return
    os._exit(1)


def _task_error(err: Exception) -> str:
    """One line for a failed attempt: the task's own error, or what happened to its worker."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, SpecmoeError):
        return _first_line(cause)
    if cause is not None:
        return f"{type(cause).__name__}: {_first_line(cause)}"
    return f"{type(err).__name__}: the process running the task died or was lost"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
