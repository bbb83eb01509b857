"""The stored row of a finished run of a `RunSpec`, local or served, built in one place."""

from __future__ import annotations

from typing import Any

from specmoe.metrics import RunCounts, RunTimes, run_acceptance
from specmoe.results.run_row import RunRow
from specmoe.suite.types import RunSpec


def run_row(
    spec: RunSpec,
    *,
    env: dict[str, Any],
    counts: RunCounts,
    times: RunTimes,
    tokens_per_s: float,
    rounds_trace: list[dict[str, Any]],
    audit_verdict: str,
    audit_reason: str,
    created_at: str,
    prompts: list[dict[str, Any]] | None = None,
    measure: dict[str, Any] | None = None,
    noisy: bool = False,
) -> RunRow:
    """The row of a finished run of `spec`, local or served: its identity and config come from the
    spec, its acceptance rate from its counts (`metrics.run_acceptance`), so no caller derives them."""
    return RunRow(
        run_id=spec.run_id,
        config_key=spec.config_key,
        baseline_key=spec.baseline_key,
        suite=spec.suite,
        group=spec.group,
        arm=spec.arm,
        repeat=spec.repeat,
        config=spec.as_dict(),
        env=env,
        counts=counts,
        times=times,
        tokens_per_s=tokens_per_s,
        acceptance_rate=run_acceptance(spec.arm, counts),
        rounds_trace=rounds_trace,
        audit_verdict=audit_verdict,
        audit_reason=audit_reason,
        created_at=created_at,
        prompts=[] if prompts is None else prompts,
        measure={} if measure is None else measure,
        noisy=noisy,
    )
