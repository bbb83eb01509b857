"""Runs of a block that a model refuses, and what the runner measures of the block instead.

Two refusals of a backend reach a suite (`Backend.rollback_refused`, `Backend.batch_refused`):

- A target that cannot drop rejected draft tokens decodes plainly: its baseline is measured and its
  SD arms are left out, the reason stored with the baseline's row (`env.sd_refused`).
- A model that cannot decode a left-padded batch exactly refuses B > 1: a block at B > 1 on such a
  target has nothing it can measure (its baseline is a B > 1 decode too), and an SD arm drafting
  with such a model is left out beside its baseline and the other arms. These runs are not stored:
  each is a `SkippedRun`, and every later run of the suite skips it again, since a refusal never
  turns into a measurement on retry (so it is no `FailedAttempt`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specmoe.results.store import RunRow
from specmoe.suite.types import RunSpec


@dataclass(frozen=True)
class SkippedRun:
    """A run not measured because a model it decodes with refuses a batch of its size."""

    run_id: str
    group: str
    model: str  # the suite's name of the model that refuses
    reason: str  # the model's one-line refusal


@dataclass(frozen=True)
class Runnable:
    """What the runner measures of a block: its runs less those a model refuses."""

    specs: tuple[RunSpec, ...]
    sd_refused: str = ""  # the target's rollback refusal, stored with the baseline's row; "": none
    skipped: tuple[SkippedRun, ...] = ()  # runs refused a batch, never stored


@dataclass(frozen=True)
class BlockRows:
    """A measured block: its rows (baseline first, possibly none) and the runs it skipped."""

    rows: list[RunRow]
    skipped: tuple[SkippedRun, ...] = ()


def skip(spec: RunSpec, model: str, reason: str) -> SkippedRun:
    return SkippedRun(spec.run_id, spec.group, model, reason)


def skipped_summary(skipped: Sequence[SkippedRun], todo: int) -> str:
    """One line for the end of a suite: how many runs were not measured, on which models, the fix,
    and the first model's own reason."""
    by_model: dict[str, list[SkippedRun]] = {}
    for run in skipped:
        by_model.setdefault(run.model, []).append(run)
    counted = ", ".join(f"'{model}' ({_runs(len(runs))})" for model, runs in by_model.items())
    fixes = "; ".join(
        f"'{model}' in group(s) {', '.join(sorted({run.group for run in runs}))}"
        for model, runs in by_model.items()
    )
    return (
        f"{len(skipped)} of {todo} runs were not measured and are not stored: a batch of prompts "
        f"(B > 1) is refused on {counted}, and every run of the suite skips them again; drop batch "
        f"sizes above 1 for {fixes} from the suite. {skipped[0].reason}"
    )


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"
