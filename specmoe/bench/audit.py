"""Checks every measured run against invariants that physics and counting impose.

A run that fails is kept and marked, with the reason in plain words: hiding it would hide a bug.
"""

from __future__ import annotations

from dataclasses import dataclass

from specmoe.theory import speedup_bound_no_timing, speedup_bound_timed

# Two timings of the same work on a shared machine differ by a few percent; a speedup is only
# called impossible beyond that.
TIMING_TOLERANCE = 0.05


@dataclass(frozen=True)
class RunAudit:
    verdict: str  # "pass" or "fail"
    reason: str


def audit_counts(counts: dict, gamma: int) -> list[str]:
    problems = []
    if counts["emitted"] + counts["truncated"] != counts["accepted"] + counts["rounds"]:
        problems.append(
            f"emitted {counts['emitted']} + truncated {counts['truncated']} != "
            f"accepted {counts['accepted']} + rounds {counts['rounds']}"
        )
    if counts["accepted"] > counts["drafted"]:
        problems.append(f"accepted {counts['accepted']} > drafted {counts['drafted']}")
    if counts["drafted"] != gamma * counts["rounds"]:
        problems.append(f"drafted {counts['drafted']} != gamma {gamma} x rounds {counts['rounds']}")
    return problems


def audit_run(counts: dict, times: dict, gamma: int, tokens_per_s: float, baseline: dict | None) -> RunAudit:
    """Audit one arm. `baseline` (its counts, times and tokens_per_s) is given for SD arms."""
    problems = audit_counts(counts, gamma)
    if gamma and baseline is not None:
        speedup = tokens_per_s / baseline["tokens_per_s"]
        alpha = counts["accepted"] / counts["drafted"]
        bound = float(speedup_bound_no_timing(alpha, gamma))
        if speedup > bound * (1 + TIMING_TOLERANCE):
            problems.append(f"speedup {speedup:.3f} exceeds 1 + alpha*gamma = {bound:.3f}")
        forwards = counts["target_forwards"]
        timed = float(
            speedup_bound_timed(
                alpha,
                gamma,
                baseline["times"]["decode_s"] / baseline["counts"]["target_forwards"],
                times["verify_s"] / forwards,
                times["draft_s"] / (forwards * gamma),
            )
        )
        if speedup > timed * (1 + TIMING_TOLERANCE):
            problems.append(f"speedup {speedup:.3f} exceeds the bound from its own timings {timed:.3f}")
    if problems:
        return RunAudit("fail", "; ".join(problems))
    return RunAudit("pass", "counts consistent" + (", speedup within bounds" if gamma and baseline else ""))
