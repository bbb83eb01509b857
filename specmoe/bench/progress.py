"""What a suite run shows while it measures: one line per finished block and, on a terminal, a bar.

Each finished block (a baseline and its SD arms on one prompt batch, `specmoe.bench.plan`) is one
info line on stderr: its arms' tokens/s and each SD arm's speedup over the block's baseline as it
lands, the time spent and an estimate of the time left. When stderr is a terminal a rich progress
bar counts the runs under those lines; in a file or a pipe the lines alone are written, so a log
reads top to bottom. `-q` (warnings only) shows neither.

Time left (`eta_seconds`). Arms differ in cost: an SD run drafts and verifies, and a draft of
another size or γ costs another amount, so runs-left × mean-seconds-per-run is too optimistic while
the cheap baselines are being counted. Each run still to measure is expected to take the mean
seconds of the finished runs of its own arm (its target, draft and γ), or of all finished runs
while its arm has none. A run's seconds are its share of its block's wall time, split in proportion
to the runs' own decode times, so warm-ups, model loading and checks count too; with Ray, where
blocks run side by side, they are the decode times, and the sum is divided by how many seconds of
runs finished per second of wall clock so far.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from specmoe.bench.plan import Block
from specmoe.bench.refusals import SkippedRun
from specmoe.console import info_enabled, is_terminal, stderr_console
from specmoe.drafts import draft_spelling, gamma_of_stored
from specmoe.prompts import prompt_label
from specmoe.results.store import RunRow
from specmoe.suite.types import RunSpec

log = logging.getLogger(__name__)


def arm_of(target: str, draft: str | None, gamma: int | None) -> str:
    """The arm a run belongs to for timing: its target, and its draft and γ when it has one."""
    return target if draft is None else f"{target} + {draft} g={gamma}"


def spec_arm(spec: RunSpec) -> str:
    return arm_of(spec.target, draft_spelling(spec.draft), spec.gamma)


def row_arm(row: RunRow) -> str:
    return arm_of(row.config["target"], row.config.get("draft"), gamma_of_stored(row.config.get("gamma")))


def eta_seconds(
    finished: Mapping[str, Sequence[float]], remaining: Mapping[str, int], elapsed: float
) -> float | None:
    """Seconds of wall clock until the remaining runs are measured; None before any run finished.

    finished: seconds of each finished run, by arm; remaining: runs still to measure, by arm;
    elapsed: wall seconds since the first run started. A remaining run costs its arm's mean, or the
    mean of every finished run while its arm has none. The sum is scaled by elapsed / finished
    seconds: 1 when runs follow one another, below 1 when workers measure side by side.
    """
    done = [s for seconds in finished.values() for s in seconds]
    if not done:
        return None
    overall = statistics.fmean(done)
    work = sum(
        count * (statistics.fmean(finished[arm]) if finished.get(arm) else overall)
        for arm, count in remaining.items()
    )
    measured = sum(done)
    return work * elapsed / measured if elapsed > 0 and measured > 0 else work


def apportion(total_s: float, parts_s: Sequence[float | None]) -> list[float]:
    """`total_s` split in proportion to `parts_s`; evenly when a part is unknown or all are zero."""
    if not parts_s:
        return []
    known = [p for p in parts_s if p is not None and p > 0]
    if len(known) != len(parts_s):
        return [total_s / len(parts_s)] * len(parts_s)
    whole = sum(known)
    return [total_s * p / whole for p in known]


def duration(seconds: float | None) -> str:
    """ "42 s", "3 min 05 s", "2 h 10 min"; "?" when unknown."""
    if seconds is None:
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


MAX_LINE = 180  # characters of a block's line: past this it wraps in a terminal and hides its end
MIN_WHERE = 40  # characters of the block's name kept when a line must be cut


@dataclass(frozen=True)
class ArmResult:
    """One SD arm of a finished block: its decode rate and its speedup over the block's baseline."""

    label: str  # draft and γ
    tokens_per_s: float
    speedup: float | None  # None when the block's baseline row is not at hand (it failed)


def block_where(block: Block) -> str:
    """Which block: its groups, target, size (B or c), prompts, batch and repeat."""
    spec = block.specs[0]
    groups = ",".join(dict.fromkeys(s.group for s in block.specs))  # groups can share a baseline
    size = f"c={spec.concurrency}" if spec.concurrency is not None else f"B={spec.batch_size}"
    prompts = prompt_label(spec.prompt_set, spec.prompt_length)
    return f"{groups}: {spec.target} {size} {prompts} batch {spec.prompt_batch} repeat {spec.repeat}"


def block_results(rows: Iterable[RunRow], baseline: RunRow | None) -> tuple[float | None, list[ArmResult]]:
    """The block's baseline tokens/s and each SD arm's rate and speedup over it (single runs: a speedup
    here is one prompt batch's, the summary's intervals come at the end)."""
    base = baseline.tokens_per_s if baseline is not None else None
    arms = [
        ArmResult(
            f"{r.config.get('draft')} g={r.config.get('gamma')}",
            r.tokens_per_s,
            r.tokens_per_s / base if base else None,
        )
        for r in rows
        if r.arm == "sd"
    ]
    return base, arms


def block_line(
    done: int,
    total: int,
    where: str,
    base: float | None,
    arms: Sequence[ArmResult],
    elapsed: float,
    eta: float | None,
    skipped: int = 0,
) -> str:
    """The line written when a block finishes: position, block, rates and speedups, runs a model
    refused, time; at most MAX_LINE characters (many arms are summarised, a long block name is cut
    in its middle)."""
    base_part = [] if base is None else [f"baseline {base:.1f} tok/s"]
    arm_parts = [f"{arm.label} {arm.tokens_per_s:.1f} tok/s{_ratio(arm.speedup)}" for arm in arms]
    skip_part = [f"{skipped} run(s) skipped"] if skipped else []
    tail = f"{duration(elapsed)} elapsed, about {duration(eta)} left"

    def joined(name: str) -> str:
        return " | ".join([f"[{done}/{total}] {name}", *base_part, *arm_parts, *skip_part, tail])

    if len(joined(where)) > MAX_LINE and len(arms) > 1:
        arm_parts = [arms_summary(arms)]
    line = joined(where)
    if len(line) > MAX_LINE:
        line = joined(middle_cut(where, max(MIN_WHERE, len(where) - (len(line) - MAX_LINE))))
    return line


def _ratio(speedup: float | None) -> str:
    return f" {speedup:.2f}×" if speedup is not None else ""


def arms_summary(arms: Sequence[ArmResult]) -> str:
    """Many SD arms in one part: their count, range of rates and speedups, and the fastest."""
    rates = [a.tokens_per_s for a in arms]
    text = f"{len(arms)} SD arms {min(rates):.1f}-{max(rates):.1f} tok/s"
    speedups = [a for a in arms if a.speedup is not None]
    if speedups:
        best = max(speedups, key=lambda a: a.speedup or 0.0)
        low = min(a.speedup or 0.0 for a in speedups)
        text += f" {low:.2f}-{best.speedup:.2f}× (best {best.label})"
    return text


def middle_cut(text: str, width: int) -> str:
    """`text` in at most `width` characters, its middle replaced by "…" (paths differ at both ends)."""
    if len(text) <= width:
        return text
    keep = max(width - 1, 2)
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2 :]


class _TimeLeft(ProgressColumn):
    """The estimate of `eta_seconds`, counted down between blocks."""

    def render(self, task) -> Text:
        deadline = task.fields.get("deadline")
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return Text(f"about {duration(left)} left", style="progress.remaining")


class SuiteProgress:
    """The progress of one suite run. Executors call `started` before a block (local runs) and
    `finished` with its rows and the runs it skipped; use as a context manager around the measuring.
    A skipped run (`specmoe.bench.refusals`) counts toward the position, not as measured."""

    def __init__(
        self,
        specs: Sequence[RunSpec],
        skipped: int,
        baselines: Mapping[tuple[str, int], RunRow],
        shown: bool = True,
        bar: bool | None = None,
    ) -> None:
        self.total = len(specs)
        self.skipped = skipped
        self.remaining: dict[str, int] = {}
        for spec in specs:
            self.remaining[spec_arm(spec)] = self.remaining.get(spec_arm(spec), 0) + 1
        self.seconds: dict[str, list[float]] = {}  # seconds of each finished run, by arm
        self.baselines = dict(baselines)
        self.done = 0
        self.not_measured = 0  # runs a model refused (`finished`'s skipped)
        self.shown = shown and info_enabled()
        use_bar = is_terminal(stderr_console().file) if bar is None else bar
        self.bar = self._bar() if self.shown and use_bar and self.total else None
        self.task = None
        self.started_at = time.perf_counter()
        self.current: tuple[Block, float] | None = None  # the block measured here now, since when

    def _bar(self) -> Progress:
        return Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            _TimeLeft(),
            console=stderr_console(),
            transient=True,
        )

    def __enter__(self) -> SuiteProgress:
        self.started_at = time.perf_counter()
        if self.shown and self.total:
            kept = f" ({self.skipped} already stored)" if self.skipped else ""
            log.info("%d runs to measure%s", self.total, kept)
        if self.bar is not None:
            self.bar.start()
            self.task = self.bar.add_task("starting", total=self.total, deadline=None)
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
        if self.shown and self.total:
            skipped = f", {self.not_measured} skipped" if self.not_measured else ""
            log.info("%d of %d runs measured%s in %s", self.done, self.total, skipped, duration(self.elapsed))

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started_at

    def started(self, block: Block) -> None:
        """A block starts measuring in this process: its wall time is split among its runs."""
        self.current = (block, time.perf_counter())
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, description=block_where(block))

    def finished(self, block: Block, rows: Sequence[RunRow], skipped: Sequence[SkippedRun] = ()) -> None:
        """Record a finished block: a block `started` here counts its wall time, split among its
        runs; one measured elsewhere (a Ray worker) counts its runs' own decode times. `rows` may be
        empty when a model refused every run of the block (`skipped`)."""
        wall_s = None
        if self.current is not None and self.current[0] is block:
            wall_s = time.perf_counter() - self.current[1]
            self.current = None
        self._account(rows, wall_s)
        self._skip(block, skipped)
        baseline = next((r for r in rows if r.arm == "baseline"), None) or self.baselines.get(
            (block.specs[0].baseline_key, block.specs[0].repeat)
        )
        if baseline is not None:
            self.baselines[(baseline.config_key, baseline.repeat)] = baseline
        if not self.shown:
            return
        eta = eta_seconds(self.seconds, self.remaining, self.elapsed)
        base, arms = block_results(rows, baseline)
        where = block_where(block)
        passed = self.done + self.not_measured
        line = block_line(passed, self.total, where, base, arms, self.elapsed, eta, len(skipped))
        log.info("%s", line)
        if self.bar is not None and self.task is not None:
            deadline = None if eta is None else time.monotonic() + eta
            self.bar.update(self.task, completed=passed, deadline=deadline)

    def _account(self, rows: Sequence[RunRow], wall_s: float | None) -> None:
        own = [r.times.wall_s for r in rows]
        seconds = apportion(wall_s, own) if wall_s is not None else [s or 0.0 for s in own]
        for row, spent in zip(rows, seconds, strict=True):
            arm = row_arm(row)
            self.seconds.setdefault(arm, []).append(spent)
            if self.remaining.get(arm):
                self.remaining[arm] -= 1
            self.done += 1

    def _skip(self, block: Block, skipped: Sequence[SkippedRun]) -> None:
        """Runs a model refused leave the runs to measure without any seconds spent."""
        if not skipped:
            return
        refused = {run.run_id for run in skipped}
        for spec in block.specs:
            if spec.run_id in refused and self.remaining.get(spec_arm(spec)):
                self.remaining[spec_arm(spec)] -= 1
        self.not_measured += len(skipped)
