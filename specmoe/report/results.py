"""A results store reduced to what the report shows: one record per measured configuration.

Speedup, acceptance and target efficiency come from `specmoe.results.compare.compare`, the same
numbers `specmoe bench run` prints; this module adds what the views need beside them: tokens/s
intervals per arm, parameter counts, the accepted-length histogram from the round traces, the
mean pass times that the analytic speedup curve takes, the shares of decode time spent drafting,
verifying and in overhead, and the acceptance at each draft position.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from specmoe.metrics import mean_accepted_length, position_acceptance, time_shares_of
from specmoe.report.intervals import Interval, mean_interval
from specmoe.report.sizes import ModelSize, is_moe_target, target_size
from specmoe.results.compare import Comparison, cell_key, compare_by, known_sum, noise_reason
from specmoe.results.run_config import RunConfig
from specmoe.results.store import RunRow


@dataclass(frozen=True)
class StepTimes:
    """Mean seconds per pass, the times `specmoe.theory.sd_speedup` takes (the audit's convention).

    target_step_s is the baseline's decode seconds per target forward, T_T(B, 1); verify_s the SD
    arm's verify seconds per target forward, T_T(B, γ + 1); draft_step_s its draft seconds per draft
    step, T_D(B, 1). Per-round host overhead of the SD arm is in none of them.
    """

    target_step_s: float
    verify_s: float
    draft_step_s: float


@dataclass(frozen=True)
class BaselineResult:
    config: dict[str, Any]
    settings: RunConfig  # `config` typed
    config_key: str  # the cell key: the configuration over all its prompt batches
    repeats: int  # runs (prompt batches × repeats) behind the numbers, noisy ones left out
    tokens_per_s: Interval  # decode tokens/s
    size: ModelSize | None
    moe: bool
    noisy: int = 0  # runs of the cell the noise guard flagged, left out of the numbers


@dataclass(frozen=True)
class Unmeasured:
    """A cell every run (or every pair) of which the noise guard flagged: listed, with no number."""

    config: dict[str, Any]
    settings: RunConfig  # `config` typed
    arm: str  # "baseline" or "sd"
    noisy: int  # flagged runs of the cell (for an SD cell, of either arm)
    why: str  # "all 6 runs flagged noisy: no number"
    reason: str  # the guard's reason for the first of them


@dataclass(frozen=True)
class SdResult:
    config: dict[str, Any]
    settings: RunConfig  # `config` typed
    baseline_key: str  # the baseline's cell key
    repeats: int  # paired units (prompt batch × repeat) behind the numbers, noisy ones left out
    baseline_tokens_per_s: Interval
    sd_tokens_per_s: Interval
    speedup: Interval  # × over the baseline over paired units (specmoe.metrics.speedup)
    acceptance_rate: float  # accepted ÷ drafted over all repeats
    mean_accepted_length: float | None  # tokens per sequence-round, bonus/correction token included
    target_efficiency: float  # T(B, 1) ÷ T(B, γ + 1)
    audit_failures: int
    size: ModelSize | None
    moe: bool
    accepted_counts: tuple[int, ...]  # sequence-rounds that accepted 0, 1, ..., γ proposals
    step_times: StepTimes | None  # None when a count it divides by is zero
    # Shares of decode time (`metrics.time_shares_of`) over every run: "draft", "verify", "overhead";
    # None for server runs, whose per-round times only the server could measure.
    time_shares: dict[str, float] | None = None
    # [γ]: share of sequence-rounds whose j-th proposal was accepted (`metrics.position_acceptance`);
    # empty when the runs kept no per-position counts.
    position_acceptance: tuple[float, ...] = ()
    # Why the speedup breaks the physical bound (`Comparison.impossible`); "" when it does not. The
    # report shows such a speedup as impossible and plots it nowhere.
    impossible: str = ""
    noisy: int = 0  # runs of the cell's pairs (either arm) the noise guard flagged, left out
    # Why the cell's repeats of one prompt batch disagree (`Comparison.unstable`, what `bench
    # summary` marks UNSTABLE); "" when they agree. Such a row never reads as a plain pass.
    unstable: str = ""
    # Selected prompts beyond the set, measured as numbered copies (`Comparison.copies`), and the
    # distinct prompts behind the units: the units' n is no count of prompts when copies > 0.
    prompts: int = 0
    copies: int = 0

    @property
    def oracle_p(self) -> float | None:
        """The per-position acceptance an "oracle:P" draft was set to; None for model drafts."""
        return self.settings.oracle_p


@dataclass(frozen=True)
class Results:
    rows: tuple[RunRow, ...]
    baselines: tuple[BaselineResult, ...]  # one per baseline configuration, in store order
    sd: tuple[SdResult, ...]  # one per SD configuration that has a baseline, in store order
    profiles: tuple[dict, ...] = ()  # `specmoe profile` outputs given beside the store (expert counts)
    fits: tuple[tuple[str, str, Any], ...] = ()  # (model name, dtype, times with .time(B, t)) from fits
    unmeasured: tuple[Unmeasured, ...] = ()  # cells the noise guard left without a number

    @property
    def noisy(self) -> int:
        return sum(1 for row in self.rows if row.noisy)


def collect(rows: list[RunRow]) -> Results:
    by_key: dict[str, list[RunRow]] = defaultdict(list)
    flagged: dict[str, list[RunRow]] = defaultdict(list)
    for row in rows:
        # The noise guard's flagged runs are in no number; they are counted beside it.
        (flagged if row.noisy else by_key)[cell_key(row)].append(row)
    baselines = tuple(
        _baseline_result(group, len(flagged.get(key, ())))
        for key, group in by_key.items()
        if group[0].arm == "baseline"
    )
    cells = compare_by(rows, cell_key, keep_unmeasured=True)
    sd = tuple(_sd_result(c, by_key) for c in cells if not c.no_number)
    unmeasured = tuple(
        Unmeasured(
            group[0].config,
            group[0].settings,
            "baseline",
            len(group),
            f"all {len(group)} runs flagged noisy: no number",
            noise_reason(group),
        )
        for key, group in flagged.items()
        if group[0].arm == "baseline" and key not in by_key
    ) + tuple(
        Unmeasured(c.config, c.settings, "sd", c.noisy, c.no_number, c.noise_reason)
        for c in cells
        if c.no_number
    )
    return Results(rows=tuple(rows), baselines=baselines, sd=sd, unmeasured=unmeasured)


def _baseline_key(row: RunRow) -> str:
    cell = row.settings.baseline_cell_key
    return row.baseline_key if cell is None else cell


def _baseline_result(rows: list[RunRow], noisy: int) -> BaselineResult:
    config, settings = rows[0].config, rows[0].settings
    return BaselineResult(
        config=config,
        settings=settings,
        config_key=cell_key(rows[0]),
        repeats=len(rows),
        tokens_per_s=mean_interval([r.tokens_per_s for r in rows]),
        size=target_size(settings),
        moe=is_moe_target(settings),
        noisy=noisy,
    )


def _sd_result(comparison: Comparison, by_key: dict[str, list[RunRow]]) -> SdResult:
    sd_rows = by_key[_config_key(comparison, by_key)]
    base_rows = by_key[_baseline_key(sd_rows[0])]
    accepted = known_sum(r.counts.accepted for r in sd_rows)
    rounds = known_sum(r.counts.rounds for r in sd_rows)
    config, settings = comparison.config, comparison.settings
    gamma = settings.gamma  # None: the row does not say
    return SdResult(
        config=config,
        settings=settings,
        baseline_key=_baseline_key(sd_rows[0]),
        repeats=comparison.units,
        baseline_tokens_per_s=mean_interval([r.tokens_per_s for r in base_rows]),
        sd_tokens_per_s=mean_interval([r.tokens_per_s for r in sd_rows]),
        speedup=comparison.speedup,
        acceptance_rate=comparison.acceptance_rate,
        mean_accepted_length=None if accepted is None else mean_accepted_length(accepted, rounds or 0),
        target_efficiency=comparison.target_efficiency,
        audit_failures=comparison.audit_failures,
        size=target_size(settings),
        moe=is_moe_target(settings),
        accepted_counts=accepted_histogram(sd_rows, gamma),
        step_times=step_times(base_rows, sd_rows, gamma),
        time_shares=decode_time_shares(sd_rows),
        position_acceptance=tuple(position_acceptance(*position_counts(sd_rows))),
        impossible=comparison.impossible,
        noisy=comparison.noisy,
        unstable=comparison.unstable,
        prompts=comparison.prompts,
        copies=comparison.copies,
    )


def _config_key(comparison: Comparison, by_key: dict[str, list[RunRow]]) -> str:
    key = comparison.settings.cell
    if key in by_key:
        return key
    # Rows from outside the runner may lack the derived keys in their config; compare() hands back
    # the config object of one of the rows it paired, which names the group.
    return next(k for k, group in by_key.items() if any(r.config is comparison.config for r in group))


def accepted_histogram(rows: list[RunRow], gamma: int | None) -> tuple[int, ...]:
    """Sequence-rounds by accepted proposals (index = accepted count), over every round traced;
    without a known gamma the histogram is as long as the largest count traced."""
    counts = [0] * (1 if gamma is None else gamma + 1)
    for row in rows:
        for record in row.rounds_trace:
            for accepted in record.get("accepted", ()):
                if accepted >= len(counts):
                    counts.extend([0] * (accepted + 1 - len(counts)))
                counts[accepted] += 1
    return tuple(counts) if any(counts) else ()


def step_times(base_rows: list[RunRow], sd_rows: list[RunRow], gamma: int | None) -> StepTimes | None:
    base_forwards = known_sum(r.counts.target_forwards for r in base_rows)
    sd_forwards = known_sum(r.counts.target_forwards for r in sd_rows)
    if not base_forwards or not sd_forwards or gamma is None:  # forwards unknown (None) for server runs
        return None
    target_step = sum(r.times.decode_s for r in base_rows) / base_forwards
    verify = sum(r.times.verify_s for r in sd_rows) / sd_forwards
    if target_step <= 0 or verify <= 0:
        return None
    draft_step = sum(r.times.draft_s for r in sd_rows) / (sd_forwards * gamma)
    return StepTimes(target_step_s=target_step, verify_s=verify, draft_step_s=draft_step)


def decode_time_shares(rows: list[RunRow]) -> dict[str, float] | None:
    """Draft / verify / overhead (/ state) shares of the rows' summed decode time; None when any is
    unknown."""
    draft, verify, overhead = (
        known_sum(getattr(r.times, key) for r in rows) for key in ("draft_s", "verify_s", "overhead_s")
    )
    if draft is None or verify is None or overhead is None or draft + verify + overhead <= 0:
        return None
    return time_shares_of(draft, verify, overhead, sum(r.times.state_s or 0.0 for r in rows))


def position_counts(rows: list[RunRow]) -> tuple[list[int], int]:
    """(sequence-rounds that accepted their j-th proposal, for j = 1..γ; all sequence-rounds).

    From the per-prompt records when every row kept them (schema 2), else from the round traces
    (a sequence-round that accepted k proposals accepted positions 1..k), else from the counters a
    server reports (vLLM's accepted tokens per position and drafts). ([], 0) when none has them.
    """
    if rows and all(r.prompts for r in rows):
        records = [p for r in rows for p in r.prompts]
        return _summed([p["accepted_by_position"] for p in records]), sum(p["rounds"] for p in records)
    histogram = accepted_histogram(rows, rows[0].settings.gamma if rows else None)
    if histogram:
        tail = [sum(histogram[j:]) for j in range(1, len(histogram))]
        return tail, sum(histogram)
    counters = [t["counters"] for r in rows for t in r.rounds_trace if t.get("kind") == "server"]
    if counters and all(c.get("accepted_by_position") and c.get("rounds") for c in counters):
        return _summed([c["accepted_by_position"] for c in counters]), sum(c["rounds"] for c in counters)
    return [], 0


def _summed(lists: list[list[int]]) -> list[int]:
    """Element-wise sum of count lists of possibly different lengths."""
    total = [0] * max((len(x) for x in lists), default=0)
    for counts in lists:
        for j, c in enumerate(counts):
            total[j] += c
    return total
