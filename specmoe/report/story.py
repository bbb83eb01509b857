"""A run told in plain sentences: for each SD configuration whether SD pays and why, how the speedup
moves with batch size, and the audit of a study's published rows in one line (`specmoe demo`).

Nothing here is written in advance. A verdict comes from the speedup's interval (`outcome`); its
reason from what the run measured: what a round cost in plain decode steps of the same target at
the same batch size (`metrics.RoundCost`) against the tokens a round emitted per sequence, the two
numbers whose ratio the speedup is (about: the units' mean tokens/s weigh rounds a little
differently). The break-even acceptance is the speedup model's at those measured costs
(`perf.breakeven.round_breakeven`); expert counts are MoESD's uniform-routing expectation
(`theory.expected_active_experts`), and say so. Where the verdict and the costs disagree, the
sentence says that instead of a reason.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from specmoe.audit.foreign import AuditRow, summarise
from specmoe.metrics import RoundCost, round_cost
from specmoe.perf.breakeven import Acceptance, round_breakeven
from specmoe.prompts import prompt_label
from specmoe.report.summary_table import speedup_text
from specmoe.results.compare import Comparison, cell_key, clean_pairs, compare_by, known_sum, paired_units
from specmoe.results.store import RunRow
from specmoe.stats import Estimate
from specmoe.theory import expected_active_experts


class Outcome(StrEnum):
    PAYS = "pays"
    LOSES = "loses"
    EVEN = "breaks about even"


def outcome(speedup: Estimate) -> Outcome:
    """PAYS when the whole interval (the range below 5 units, the point for one) lies above 1×,
    LOSES when it lies below, EVEN when it holds 1×."""
    low, high = (speedup.value, speedup.value) if speedup.n < 2 else (speedup.low, speedup.high)
    if low > 1.0:
        return Outcome.PAYS
    if high < 1.0:
        return Outcome.LOSES
    return Outcome.EVEN


@dataclass(frozen=True)
class CellAccount:
    """One SD configuration's speedup beside what explains it."""

    comparison: Comparison
    cost: RoundCost | None  # None: runs that time no rounds (server runs)
    emitted_per_round: float | None  # tokens a round emitted per sequence: emitted ÷ sequence-rounds
    breakeven: Acceptance | None  # the acceptance at which `cost` breaks even; None: none does

    @property
    def config(self) -> dict:
        return self.comparison.config


def accounts(rows: Iterable[RunRow], keep_noisy: bool = False) -> list[CellAccount]:
    """One CellAccount per SD configuration with a paired unit, in order of first appearance; one
    whose every pair has a noisy run has no number (`comparison.no_number`) and no costs, or with
    `keep_noisy` the numbers and costs of those pairs, marked (`comparison.busy`)."""
    found = []
    for _, pairs in paired_units(rows, cell_key):
        clean = clean_pairs(pairs) or (pairs if keep_noisy else [])
        runs = [run for pair in pairs for run in pair]
        if not clean:
            if pairs:  # every pair has a noisy run: listed, with why there is no number
                (unmeasured,) = compare_by(runs, cell_key, keep_unmeasured=True)
                found.append(CellAccount(unmeasured, None, None, None))
            continue
        (comparison,) = compare_by(runs, cell_key, keep_noisy=keep_noisy)
        cost = cell_cost(clean)
        emitted, rounds = (known_sum(getattr(s.counts, n) for s, _ in clean) for n in ("emitted", "rounds"))
        per_round = emitted / rounds if emitted is not None and rounds else None
        breakeven = None if cost is None else round_breakeven(cost.gamma, cost.total, cost.draft)
        found.append(CellAccount(comparison, cost, per_round, breakeven))
    return found


def cell_cost(pairs: list[tuple[RunRow, RunRow]]) -> RoundCost | None:
    """The RoundCost of a configuration's clean pairs, or None when a time or count is unknown."""
    gamma = pairs[0][0].config.get("gamma")
    sums = [
        known_sum(b.times.decode_s for _, b in pairs),
        known_sum(b.counts.target_forwards for _, b in pairs),
        known_sum(s.times.draft_s for s, _ in pairs),
        known_sum(s.times.verify_s for s, _ in pairs),
        known_sum(s.times.overhead_s for s, _ in pairs),
        known_sum(s.counts.target_forwards for s, _ in pairs),
    ]
    if not isinstance(gamma, int) or any(v is None for v in sums) or not (sums[0] and sums[1] and sums[5]):
        return None
    base_s, base_forwards, draft_s, verify_s, overhead_s, sd_forwards = sums
    state_s = sum(s.times.state_s or 0.0 for s, _ in pairs)
    parts = (draft_s, verify_s, overhead_s, state_s)
    return round_cost(gamma, base_s, base_forwards, parts, sd_forwards)  # type: ignore[arg-type]


# --- one sentence per configuration -------------------------------------------------------------


def label(config: dict) -> str:
    """ "moe + draft-xs, γ=4, B=1, code prompts": what a sentence is about."""
    prompts = prompt_label(config.get("prompt_set"), config.get("prompt_length"))
    return (
        f"{config.get('target')} + {config.get('draft')}, γ={config.get('gamma')}, "
        f"B={config.get('batch_size')}, {prompts} prompts"
    )


def cost_text(cost: RoundCost) -> str:
    return (
        f"a round cost {cost.total:.2f} plain steps ({cost.gamma} draft steps at {cost.draft_step:.2f} "
        f"each, a verify of {cost.gamma + 1} tokens at {cost.verify:.2f}, bookkeeping {cost.overhead:.2f}"
        + (f", linear-attention state rollback {cost.state:.2f})" if cost.state > 0 else ")")
    )


def breakeven_text(account: CellAccount) -> str:
    if account.breakeven is None:
        tokens = account.cost.gamma + 1 if account.cost else "γ + 1"
        return f"no acceptance pays at these costs: even a fully accepted round emits only {tokens} tokens"
    return f"at these costs SD breaks even from {account.breakeven.rate:.0%} of proposals accepted"


def sentence(account: CellAccount) -> str:
    """Whether SD pays in this configuration, and why, in one sentence of the run's own numbers."""
    c = account.comparison
    head = label(c.config)
    if c.busy:
        head += f" (BUSY: {c.busy}, {c.noise_reason}; its numbers include that)"
    if c.no_number:
        return f"{head}: {c.no_number}, so nothing is said about it"
    if c.impossible:
        return f"{head}: no speedup shown, it breaks the physical bound ({c.impossible})"
    verdict = outcome(c.speedup)
    speed = speedup_text(c.speedup, c.prompts, c.copies)
    if account.cost is None or account.emitted_per_round is None:
        return f"{head}: SD {verdict} ({speed}); its runs time no rounds, so there is no cost account"
    accepted = (
        "" if c.acceptance_rate != c.acceptance_rate else f", {c.acceptance_rate:.0%} of proposals accepted"
    )
    emitted = f"emitted {account.emitted_per_round:.2f} tokens per sequence{accepted}"
    facts = f"{cost_text(account.cost)} and {emitted}; {breakeven_text(account)}"
    ahead = account.emitted_per_round >= account.cost.total
    if verdict is Outcome.EVEN:
        return f"{head}: SD breaks about even ({speed}, an interval holding 1×): {facts}."
    if (verdict is Outcome.PAYS) == ahead:
        return f"{head}: SD {verdict} ({speed}) because {facts}."
    return f"{head}: SD {verdict} ({speed}) although by its mean costs it should not: {facts}."


# --- the speedup against batch size -------------------------------------------------------------


def batch_sweeps(found: Sequence[CellAccount]) -> list[list[CellAccount]]:
    """Series of configurations that differ in batch size alone (two sizes or more), each by batch."""
    series: dict[tuple, list[CellAccount]] = defaultdict(list)
    for account in (a for a in found if not a.comparison.no_number):
        series[tuple(repr(account.config.get(k)) for k in _SERIES)].append(account)
    return [
        sorted(s, key=lambda a: a.config["batch_size"])
        for s in series.values()
        if len(Counter(a.config.get("batch_size") for a in s)) > 1
    ]


# What a series holds fixed: every setting that decides the measured work except the batch size.
# Not the group: a suite may measure one batch size in a group of its own, with its own repeats.
_SERIES = (
    "target",
    "draft",
    "gamma",
    "oracle_cost",
    "prompt_set",
    "prompt_length",
    "temperature",
    "max_new_tokens",
    "moe_top_k",
    "dtype",
    "device",
    "compile",
    "chat",
)


def sweep_sentence(sweep: Sequence[CellAccount], experts: Mapping[str, tuple[int, int]]) -> str:
    """How SD's speedup moves with batch size in one series, with the pass costs that move it and,
    for an MoE target of known shape (`experts`: model name -> (E, K)), how many more experts a
    verify wakes than a step under uniform routing."""
    first = sweep[0].config
    gamma = first.get("gamma")
    sizes = [a.config["batch_size"] for a in sweep]
    head = f"{first.get('target')} + {first.get('draft')}, γ={gamma}, B = {', '.join(map(str, sizes))}"
    speeds = ", ".join(f"{a.comparison.speedup.value:.2f}×" for a in sweep)
    lines = [f"{head}: speedup {speeds}."]
    costed = [a for a in sweep if a.cost is not None]
    if len(costed) == len(sweep):
        verify = ", ".join(f"{a.cost.verify:.2f}" for a in costed)  # type: ignore[union-attr]
        draft = ", ".join(f"{a.cost.draft_step:.2f}" for a in costed)  # type: ignore[union-attr]
        lines.append(
            f"A verify of {gamma} + 1 tokens cost {verify} plain steps and a draft step {draft}, in the "
            "same order."
        )
    pays = [a.config["batch_size"] for a in sweep if outcome(a.comparison.speedup) is Outcome.PAYS]
    peak = max(sweep, key=lambda a: a.comparison.speedup.value)
    if pays:
        lines.append(
            f"SD pays at B = {', '.join(map(str, pays))} (whole interval above 1×) and peaks at "
            f"B={peak.config['batch_size']}."
        )
    else:
        lines.append(
            f"SD pays at none of them beyond its interval; the best is B={peak.config['batch_size']}."
        )
    shape = experts.get(str(first.get("target")))
    if shape is not None and isinstance(gamma, int):
        lines.append(_experts_text(shape, first.get("moe_top_k"), gamma, sizes))
        if len(costed) == len(sweep):
            lines.append(_verify_trend(costed))
    return " ".join(lines)


def _verify_trend(sweep: Sequence[CellAccount]) -> str:
    """Whether the measured verify cost moved the way the expert count does (down with batch)."""
    first, last = sweep[0], sweep[-1]
    costs = f"{first.cost.verify:.2f} → {last.cost.verify:.2f} steps"  # type: ignore[union-attr]
    if last.cost.verify < first.cost.verify:  # type: ignore[union-attr]
        return f"The measured verify cost fell with batch as that count does ({costs})."
    return (
        f"The measured verify cost did not fall with batch ({costs}): the experts a pass wakes do not "
        "set this model's step cost here."
    )


def _experts_text(shape: tuple[int, int], top_k: int | None, gamma: int, sizes: Sequence[int]) -> str:
    num_experts, k = shape[0], top_k or shape[1]

    def woken(tokens: int) -> float:
        return float(expected_active_experts(tokens, num_experts, k))

    trail = ", ".join(f"{woken(b * (gamma + 1)) / woken(b):.1f}×" for b in sizes)
    return (
        f"Expected under uniform routing ({k} of {num_experts} experts per token, MoESD's account): a verify "
        f"wakes {trail} the experts a step wakes, in the same order (a step of B={sizes[-1]} already wakes "
        f"{woken(sizes[-1]):.1f} of {num_experts})."
    )


# --- the whole account ----------------------------------------------------------------------------

STORY_NOTE = (
    "Why, configuration by configuration, from this run's numbers: a round's cost in plain decode steps "
    "of its target at its batch size (the baseline's seconds per token) against the tokens it emitted "
    "per sequence, and the acceptance at which those costs break even (the speedup model)."
)


def _reading_order(account: CellAccount) -> tuple:
    config = account.config
    return (
        *(repr(config.get(k)) for k in ("target", "draft", "gamma", "prompt_set")),
        config.get("batch_size") or 0,
    )


def story_lines(
    rows: Iterable[RunRow],
    groups: Mapping[str, str],
    experts: Mapping[str, tuple[int, int]],
    keep_noisy: bool = False,
) -> list[str]:
    """The account of a run under its summary: a sentence per configuration under its group's
    description (`groups`: name -> description, in the suite's order), then one per batch sweep;
    `keep_noisy` as `accounts`."""
    found = accounts(rows, keep_noisy)
    lines = [STORY_NOTE]
    for name, description in groups.items():
        mine = sorted((a for a in found if a.config.get("group") == name), key=_reading_order)
        if mine:
            lines += ["", f"{name}: {description}", *(f"  - {sentence(a)}" for a in mine)]
    lines += ["", tally(found)]
    sweeps = sorted(batch_sweeps(found), key=lambda s: tuple(repr(s[0].config.get(k)) for k in _SERIES))
    if sweeps:
        lines += ["", "Speedup against batch size:", *(f"  - {sweep_sentence(s, experts)}" for s in sweeps)]
    return lines


def tally(found: Sequence[CellAccount]) -> str:
    """ "In this run SD paid in 1 of 9 configurations, lost in 7 and broke about even in 1." """
    measured = [a for a in found if not a.comparison.no_number and not a.comparison.impossible]
    counts = Counter(outcome(a.comparison.speedup) for a in measured)
    unsaid = len(found) - len(measured)
    busy = sum(1 for a in measured if a.comparison.busy)
    return (
        f"In this run SD paid in {counts[Outcome.PAYS]} of {len(found)} configurations, lost in "
        f"{counts[Outcome.LOSES]} and broke about even in {counts[Outcome.EVEN]}"
        + (f"; {unsaid} have no number" if unsaid else "")
        + (f"; {busy} of these verdicts come from runs on a busy machine (BUSY)" if busy else "")
        + "."
    )


# --- the audit of a study's rows ------------------------------------------------------------------


def audit_line(rows: Sequence[AuditRow], where: str) -> str:
    """The audit of a study's published rows in one line: counts per verdict and its worst claim."""
    counts = summarise(list(rows))
    impossible = [r for r in rows if r.verdict == "impossible" and r.claimed_speedup and r.bound]
    line = (
        f"{where}: {len(rows)} rows, {counts['impossible']} impossible, {counts['consistent']} consistent "
        f"(possible, not thereby right), {counts['unverifiable']} unverifiable, {counts['invalid']} invalid"
    )
    if impossible:
        worst = max(impossible, key=lambda r: r.claimed_speedup / r.bound)  # type: ignore[operator]
        line += f"; the furthest beyond the bound, {worst.id}, {worst.reason}"
    return line
