"""A finished run as the store holds it (`RunRow`), and an attempt that produced none
(`FailedAttempt`). `store` writes and reads them; `export` flattens them; the harness builds a row in
one place (`specmoe.bench.spec_row.run_row`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from specmoe.metrics import RunCounts, RunTimes
from specmoe.results.run_config import RunConfig

ARMS = ("baseline", "sd")  # a run measures its configuration without a draft, or with one


@dataclass(frozen=True)
class RunRow:
    """One finished run as stored. Counts are tokens or forward passes summed over the run; times are
    seconds of wall clock. `created_at` is an ISO-8601 string chosen by the caller."""

    run_id: str
    config_key: str
    baseline_key: str  # the baseline arm's config_key (a baseline row's own config_key)
    suite: str
    group: str
    arm: str  # "baseline" | "sd"
    repeat: int
    config: dict[str, Any]
    env: dict[str, Any]
    counts: RunCounts  # None in a field: a server run's count the server hides
    times: RunTimes  # None as for counts
    tokens_per_s: float
    acceptance_rate: float | None  # `metrics.run_acceptance`: None for the baseline arm, no proposals
    rounds_trace: list[dict[str, Any]]
    audit_verdict: str
    audit_reason: str
    created_at: str
    # One record per prompt of the batch, in batch order: prompt_id, category and that sequence's
    # counts (rounds, drafted, accepted, emitted, truncated, accepted_by_position). Empty for runs
    # stored before schema version 2 and for server runs.
    prompts: list[dict[str, Any]] = field(default_factory=list)
    # How the run was measured: started_at / finished_at (ISO-8601, ms), block and position in it,
    # threads, the machine's load (other_cpu, steal, load_avg), step_spread, attempts, noise reason.
    measure: dict[str, Any] = field(default_factory=dict)
    noisy: bool = False  # the noise guard could not get an undisturbed measurement (measure["noise"])
    # `config` as one typed value, parsed once here; `config` stays the stored (and exported) dict.
    # Parsed at construction: a changed config is a new row (`dataclasses.replace`), never an edit.
    settings: RunConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A malformed row is a bug in the caller: refuse it before it reaches the file.
        if self.arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {self.arm!r}")
        if not isinstance(self.counts, RunCounts) or not isinstance(self.times, RunTimes):
            raise TypeError(f"counts and times must be RunCounts and RunTimes, got {self.counts!r}")
        if not (math.isfinite(self.tokens_per_s) and self.tokens_per_s > 0):  # a run emits >= 1 token
            raise ValueError(f"tokens_per_s must be a finite number > 0, got {self.tokens_per_s}")
        object.__setattr__(self, "settings", RunConfig.from_dict(self.config))  # frozen: set once


@dataclass(frozen=True)
class FailedAttempt:
    """An attempt at a run that produced no row: its task raised, or the process running it died."""

    run_id: str
    attempt: int  # 1-based
    error: str  # one line
    final: bool  # no attempt left: the run stays missing until the suite runs again
