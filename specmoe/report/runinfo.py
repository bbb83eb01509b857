"""The report's prose sections: which runs failed their audit, and where the runs were measured."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from specmoe.report.slices import AXES, SD_ONLY_AXES, axis_value, format_axis, label
from specmoe.results.export import flatten
from specmoe.results.noisy import NOISE_FIX
from specmoe.results.store import RunRow

# Environment keys in reading order (specmoe.bench.env); any others follow, sorted.
ENV_ORDER = (
    "cpu",
    "gpu",
    "device",
    "cores",
    "memory_gib",
    "torch_threads",
    "python",
    "torch",
    "transformers",
    "specmoe",
    "git_sha",
)


@dataclass(frozen=True)
class FailedRun:
    run_id: str
    sentence: str  # the failure in plain words, for the audit section


def failed_runs(rows: tuple[RunRow, ...] | list[RunRow]) -> list[FailedRun]:
    """Every run whose audit verdict is not "pass", in store order."""
    return [FailedRun(row.run_id, _failure_sentence(row)) for row in rows if row.audit_verdict != "pass"]


def _failure_sentence(row: RunRow) -> str:
    arm = "SD arm" if row.arm == "sd" else "baseline arm"
    axes = [a for a in AXES if row.arm == "sd" or a not in SD_ONLY_AXES]
    what = label(row.config, [a for a in axes if axis_value(row.config, a) is not None])
    reason = row.audit_reason.strip() or "no reason recorded"
    verdict = "" if row.audit_verdict == "fail" else f" (verdict '{row.audit_verdict}')"
    return (
        f"Run {row.run_id} (suite {row.suite}, group {row.group}, {arm}, repeat {row.repeat}: {what}) "
        f"failed its audit{verdict}: {reason}."
    )


@dataclass(frozen=True)
class Environment:
    values: tuple[tuple[str, str], ...]  # (key, value) in ENV_ORDER, then the rest sorted
    runs: int  # runs measured in this environment


def environments(rows: tuple[RunRow, ...] | list[RunRow]) -> list[Environment]:
    """Distinct environments, most runs first; nested env values are flattened to dotted keys."""
    counts = Counter(_env_items(row.env) for row in rows)
    return [Environment(values, runs) for values, runs in counts.most_common()]


def _env_items(env: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    flat = {key.removeprefix("env."): value for key, value in flatten("env", env).items()}
    order = [k for k in ENV_ORDER if k in flat] + sorted(k for k in flat if k not in ENV_ORDER)
    return tuple((k, "unknown" if flat[k] is None else str(flat[k])) for k in order)


def shared_settings(rows: tuple[RunRow, ...] | list[RunRow]) -> str:
    """The axis values every run shares, e.g. "temperature 0.0, 64 new tokens, float32, cpu"."""
    parts = []
    for axis in AXES:
        if axis in SD_ONLY_AXES or axis == "target":
            continue
        values = {str(axis_value(row.config, axis)) for row in rows}
        if len(values) == 1:
            parts.append(format_axis(axis, axis_value(rows[0].config, axis)))
    return ", ".join(p for p in parts if p)


def suites(rows: tuple[RunRow, ...] | list[RunRow]) -> list[str]:
    return sorted({row.suite for row in rows})


def audit_counts(rows: tuple[RunRow, ...] | list[RunRow]) -> tuple[int, int]:
    """(failed, total) runs."""
    return sum(1 for row in rows if row.audit_verdict != "pass"), len(rows)


@dataclass(frozen=True)
class NoiseState:
    """How quiet the machine was while the runs were measured, and what the noise guard made of it."""

    runs: int
    flagged: int  # runs the guard flagged noisy, in no number
    guard: str  # "on", "off", "on for N runs, off for M" or "not recorded" (runs from before it was)
    load_avg: str  # "median 1.9, max 3.9" over the runs' 1-minute load averages; "not recorded"
    other_cpu: str  # other processes' CPU use on the runs' cores, in cores: "median 0.02, max 1.10"
    fix: str  # what to do about flagged runs; "" when none was flagged

    def items(self) -> tuple[tuple[str, str], ...]:
        """The rows of the page's noise table."""
        return (
            ("noise guard", self.guard),
            ("runs flagged noisy", f"{self.flagged} of {self.runs}"),
            ("load average (1 min) at each run's end", self.load_avg),
            ("other processes' CPU during each run (cores)", self.other_cpu),
        )


def noise_state(rows: tuple[RunRow, ...] | list[RunRow]) -> NoiseState:
    flagged = sum(1 for row in rows if row.noisy)
    states = Counter(row.measure.get("noise_guard") for row in rows)
    return NoiseState(
        runs=len(rows),
        flagged=flagged,
        guard=_guard_text(states),
        load_avg=_spread([row.measure.get("load_avg") for row in rows]),
        other_cpu=_spread([row.measure.get("other_cpu") for row in rows]),
        fix=NOISE_FIX if flagged else "",
    )


def _guard_text(states: Counter) -> str:
    """The guard's state over the runs; runs stored before it was recorded count as unknown."""
    known = {True: "on", False: "off"}
    parts = [f"{known[s]} for {n} runs" for s, n in states.items() if s in known]
    unknown = sum(n for s, n in states.items() if s not in known)
    if not parts:
        return "not recorded"
    if len(parts) == 1 and not unknown:
        return parts[0].split(" for ")[0]
    return ", ".join(parts + ([f"not recorded for {unknown}"] if unknown else []))


def _spread(values: list[Any]) -> str:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    if not numbers:
        return "not recorded"
    return f"median {statistics.median(numbers):.2f}, max {max(numbers):.2f}"


def noisy_reason(reason: str, noise: NoiseState) -> str:
    """A view's reason for being left out, saying that flagged runs were set aside first: 'no
    baseline runs' is not true of a store whose baseline runs were all flagged noisy."""
    if not noise.flagged or not reason.startswith("no "):  # "needs a profile" is no count of runs
        return reason
    return f"{reason} among the runs the noise guard kept"
