"""SD runs compared with their baselines: one Comparison per configuration (cell) or group of them.

A cell is one configuration over all its prompt batches and repeats (`RunSpec.cell_key`). Its
speedup pairs each SD run with the baseline run of the same prompt batch and repeat (measured back
to back, `specmoe.bench.plan`); each pair is one unit. Runs the noise guard flagged are left out of
every number and counted beside them; a cell whose repeats of one batch disagree is marked unstable.
The table made of these is `specmoe.report.summary_table`.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace

from specmoe.metrics import acceptance_rate, speedup, target_efficiency_measured
from specmoe.prompts import original_id
from specmoe.results.run_audit import impossible_speedup
from specmoe.results.run_config import RunConfig
from specmoe.results.store import RunRow
from specmoe.stats import Estimate, coefficient_of_variation

REPEAT_CV_LIMIT = 0.10  # coefficient of variation across repeats of one batch (see repeat_instability)


@dataclass(frozen=True)
class Comparison:
    """One SD cell against its baseline, over paired units (prompt batch × repeat)."""

    config: dict
    settings: RunConfig  # `config` typed (`RunRow.settings` of the same row)
    category: str | None  # the prompts' category when broken down by it (`compare(by_category=True)`)
    units: int  # paired units behind the numbers (noisy ones left out)
    prompts: int  # distinct prompts those units decoded (a numbered copy counts as its original)
    noisy: int  # runs of the cell (either arm) the noise guard flagged, left out
    baseline_tokens_per_s: float
    sd_tokens_per_s: float
    speedup: Estimate
    acceptance_rate: float  # nan: no proposals, or a server that reports no draft counts
    target_efficiency: float  # nan for server runs, which report no verify times
    audit_failures: int
    unstable: str  # why repeats of one batch disagree beyond REPEAT_CV_LIMIT; "" when they agree
    # Why the speedup cannot be a measurement (`audit.impossible_speedup` of a unit); "" when it can.
    # Such a speedup is never shown as a number.
    impossible: str = ""
    # Why the cell has no number at all ("all 6 runs flagged noisy: no number"); "" when it has one.
    # Only `compare_by(..., keep_unmeasured=True)` makes such rows, so a summary still lists the cell.
    no_number: str = ""
    # Selected prompts beyond the set that were numbered copies of its prompts (`prompts = 25` on a
    # 10-prompt set: 15), 0 when the selection fits the set; see `selection_copies`.
    copies: int = 0
    # The noise guard's reason for the cell's first flagged run ("other processes used 1.02 cores
    # while it ran"); "" when none was flagged.
    noise_reason: str = ""
    # Why the numbers include runs the noise guard flagged ("all 6 runs flagged noisy"): only
    # `compare_by(..., keep_noisy=True)` makes such rows, for a cell with no clean pair; "" otherwise.
    busy: str = ""


def cell_key(row: RunRow) -> str:
    """The row's configuration across prompt batches (rows stored before batches existed: its key)."""
    cell = row.settings.cell_key
    return row.config_key if cell is None else cell


def batch_category(row: RunRow) -> str:
    """The category of a run's prompts: theirs when they share one, else "mixed"."""
    found = {p["category"] for p in row.prompts}
    return found.pop() if len(found) == 1 else "mixed"


def compare(rows: list[RunRow], by_category: bool = False) -> list[Comparison]:
    """One Comparison per SD cell, or per (cell, prompt category) with `by_category` (a unit counts
    under its batch's category; batches mixing categories under "mixed")."""
    if by_category:
        return compare_by(rows, lambda r: (cell_key(r), batch_category(r)), with_category=True)
    return compare_by(rows, cell_key)


def compare_by(
    rows: list[RunRow],
    key: Callable[[RunRow], Hashable],
    with_category: bool = False,
    keep_unmeasured: bool = False,
    keep_noisy: bool = False,
) -> list[Comparison]:
    """One Comparison per value of `key` over the SD rows, in order of first appearance: each SD run
    of the group is a unit, paired with the baseline run of its prompt batch and repeat. A key
    coarser than the cell pools cells: the speedup is then the ratio of mean rates over every unit
    of the group. `with_category`: the groups share a prompt category (the key holds it).
    `keep_unmeasured`: a group whose every pair has a noisy run is kept as a Comparison without
    numbers (`no_number` says why) instead of being left out, so a table can show it.
    `keep_noisy`: such a group gets its numbers from the flagged pairs instead, marked `busy` (a demo
    on a busy machine still says what it measured, flagged; a study's numbers never do this)."""
    comparisons = []
    for sd_rows, pairs in paired_units(rows, key):
        clean = clean_pairs(pairs)
        category = batch_category(sd_rows[0]) if with_category else None
        if clean:
            comparisons.append(_comparison(pairs, clean, category))
        elif pairs and keep_noisy:
            comparisons.append(replace(_comparison(pairs, pairs, category), busy=_flagged_text(pairs)))
        elif pairs and keep_unmeasured:
            comparisons.append(_unmeasured(pairs, category))
    return comparisons


def paired_units(
    rows: Iterable[RunRow], key: Callable[[RunRow], Hashable]
) -> list[tuple[list[RunRow], list[tuple[RunRow, RunRow]]]]:
    """Per value of `key` over the SD rows, in order of first appearance: the group's SD rows and
    each of them paired with the baseline run of its prompt batch and repeat (noisy ones included;
    an SD run whose baseline is missing has no pair)."""
    rows = list(rows)
    baselines = {(r.config_key, r.repeat): r for r in rows if r.arm == "baseline"}
    groups: dict[Hashable, list[RunRow]] = defaultdict(list)
    for row in rows:
        if row.arm == "sd":
            groups[key(row)].append(row)
    return [
        (
            sd_rows,
            [
                (r, baselines[(r.baseline_key, r.repeat)])
                for r in sd_rows
                if (r.baseline_key, r.repeat) in baselines
            ],
        )
        for sd_rows in groups.values()
    ]


def clean_pairs(pairs: list[tuple[RunRow, RunRow]]) -> list[tuple[RunRow, RunRow]]:
    """The pairs neither of whose runs the noise guard flagged: the units behind every number."""
    return [(s, b) for s, b in pairs if not (s.noisy or b.noisy)]


def _flagged_text(pairs: list[tuple[RunRow, RunRow]]) -> str:
    """ "all 6 runs flagged noisy", or "4 of 6 runs, one in every pair, flagged noisy"."""
    runs = {r.run_id for pair in pairs for r in pair}
    noisy = {r.run_id for pair in pairs for r in pair if r.noisy}
    which = (
        f"all {len(runs)} runs"
        if len(noisy) == len(runs)
        else f"{len(noisy)} of {len(runs)} runs, one in every pair,"
    )
    return f"{which} flagged noisy"


def _unmeasured(pairs: list[tuple[RunRow, RunRow]], category: str | None) -> Comparison:
    """A cell every pair of which has a noisy run: listed, with no number (nan) and why."""
    noisy = {r.run_id for pair in pairs for r in pair if r.noisy}
    nan = math.nan
    return Comparison(
        config=pairs[0][0].config,
        settings=pairs[0][0].settings,
        category=category,
        units=0,
        prompts=0,
        noisy=len(noisy),
        baseline_tokens_per_s=nan,
        sd_tokens_per_s=nan,
        speedup=Estimate(nan, nan, nan, 0),
        acceptance_rate=nan,
        target_efficiency=nan,
        audit_failures=sum(1 for s, b in pairs for r in (s, b) if r.audit_verdict != "pass"),
        unstable="",
        no_number=f"{_flagged_text(pairs)}: no number",
        noise_reason=noise_reason(r for pair in pairs for r in pair),
    )


def noise_reason(rows: Iterable[RunRow]) -> str:
    """Why the noise guard flagged the first flagged run of these, or "" when it flagged none."""
    for row in rows:
        if row.noisy:
            return str(row.measure.get("noise") or "no reason recorded")
    return ""


def _comparison(
    pairs: list[tuple[RunRow, RunRow]], clean: list[tuple[RunRow, RunRow]], category: str | None
) -> Comparison:
    sd_tps = [s.tokens_per_s for s, _ in clean]
    base_tps = [b.tokens_per_s for _, b in clean]
    drafted = known_sum(s.counts.drafted for s, _ in clean)
    accepted = known_sum(s.counts.accepted for s, _ in clean)
    timings = (
        known_sum(b.times.verify_s for _, b in clean),
        known_sum(b.counts.target_forwards for _, b in clean),
        known_sum(s.times.verify_s for s, _ in clean),
        known_sum(s.counts.target_forwards for s, _ in clean),
    )
    # Server runs report neither verify times nor forwards: their efficiency is unknown (nan).
    efficiency = target_efficiency_measured(*timings) if all(timings) else math.nan
    rate = acceptance_rate(accepted, drafted)
    acceptance = math.nan if rate is None else rate  # no proposals, or counts a server hides
    noisy_runs = {r.run_id for pair in pairs for r in pair if r.noisy}
    prompts = {original_id(p["prompt_id"]) for s, _ in clean for p in s.prompts}
    return Comparison(
        config=clean[0][0].config,
        settings=clean[0][0].settings,
        category=category,
        units=len(clean),
        prompts=len(prompts),
        noisy=len(noisy_runs),
        baseline_tokens_per_s=sum(base_tps) / len(base_tps),
        sd_tokens_per_s=sum(sd_tps) / len(sd_tps),
        speedup=speedup(sd_tps, base_tps),
        acceptance_rate=acceptance,
        target_efficiency=efficiency,
        audit_failures=sum(1 for s, b in pairs for r in (s, b) if r.audit_verdict != "pass"),
        unstable=repeat_instability(clean),
        impossible=impossible_units(clean),
        copies=selection_copies(pairs),
        noise_reason=noise_reason(r for pair in pairs for r in pair),
    )


def selection_copies(pairs: list[tuple[RunRow, RunRow]]) -> int:
    """How many of the cell's selected prompts (`prompts = N`) were numbered copies: N beyond the
    distinct prompts its runs decoded, or 0.

    A count above the set's size reads the set again, as numbered copies (`specmoe.prompts`): a
    copy decodes a slightly different sequence, but it is the same prompt, not a new draw from the
    prompt kind, so its units make the interval look surer than the prompts allow. The number is
    kept and labelled rather than refused, since a shipped study tops a 9-prompt set up to 10 this
    way, and a user may want every batch full; the summary shows it beside n.
    """
    by_cell: dict[str, list[RunRow]] = defaultdict(list)  # a coarser --by pools cells: each its own
    for sd, _ in pairs:
        by_cell[cell_key(sd)].append(sd)
    copies = 0
    for rows in by_cell.values():
        selected = rows[0].settings.prompts
        distinct = {original_id(p["prompt_id"]) for row in rows for p in row.prompts}
        if isinstance(selected, int) and distinct:
            copies += max(0, selected - len(distinct))
    return copies


def impossible_units(pairs: list[tuple[RunRow, RunRow]]) -> str:
    """Why some unit's speedup breaks the physical bound (the first such unit), or "".

    Checked per unit, each against its own γ and draft counts: a pooled speedup is a weighted mean
    of its units' speedups, so it is within bounds whenever each unit is, and one impossible unit
    taints the mean. The stored audit may have passed a row (old stores, counts a server hid), so
    the bound is applied again here rather than trusting the verdict.
    """
    for sd, base in pairs:
        rate = sd.tokens_per_s / base.tokens_per_s if base.tokens_per_s else math.inf
        gamma = sd.settings.gamma
        why = impossible_speedup(
            rate,
            gamma if isinstance(gamma, int) and gamma >= 1 else None,
            sd.counts.accepted,
            sd.counts.drafted,
        )
        if why:
            return f"{why} (run {sd.run_id[:12]})"
    return ""


def repeat_instability(pairs: list[tuple[RunRow, RunRow]]) -> str:
    """Why the cell's repeats disagree, or "".

    The quantity is the unit's paired step ratio, the baseline's seconds per target forward over
    the SD arm's verify seconds per forward: the same work in every repeat of a prompt batch whatever
    an oracle or a sampler accepts, and measured seconds apart, so drift cancels. Its coefficient of
    variation across the repeats of each batch, median over batches, above REPEAT_CV_LIMIT (pyperf
    warns from 10% too) says the machine did not time the same work the same way.
    """
    by_batch: dict[str, list[float]] = defaultdict(list)
    for sd, base in pairs:
        forwards = (base.counts.target_forwards, sd.counts.target_forwards)
        timed = (base.times.decode_s, sd.times.verify_s)
        if not all(forwards) or not all(timed):  # server runs: no forwards or verify times
            continue
        by_batch[sd.config_key].append((timed[0] / forwards[0]) / (timed[1] / forwards[1]))
    spreads = [coefficient_of_variation(v) for v in by_batch.values() if len(v) > 1]
    if spreads and (spread := statistics.median(spreads)) > REPEAT_CV_LIMIT:
        return f"the paired step ratio of one batch varies {spread:.0%} (CV) across repeats"
    return ""


def known_sum(values: Iterable[float | int | None]) -> float | int | None:
    """The sum, or None when any value is unknown (a count or time a server does not report)."""
    items = list(values)
    return None if any(v is None for v in items) else sum(items)  # type: ignore[arg-type]
