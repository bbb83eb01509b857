"""The audit's verdict on a run measured inside a test, its timing checks set aside.

The audit also compares a run's speedup with bounds from its acceptance and its own timings; on a
loaded machine one disturbed baseline can push an honest speedup past them. Tests assert no timing,
so they accept a run whose only problems are those speedup bounds, and nothing else.
"""

from __future__ import annotations

IDENTICAL = "output identical to plain greedy decoding"  # the lossless check's note, not a problem
NO_METRICS = "no /metrics at "  # a served run's note that the server exposes no counters


def counts_pass(row) -> bool:
    """True when the run passed, or failed only on a timing bound ("speedup ... exceeds ...")."""
    if row.audit_verdict == "pass":
        return True
    problems = [p for p in row.audit_reason.split("; ") if p != IDENTICAL and not p.startswith(NO_METRICS)]
    return all(problem.startswith("speedup ") for problem in problems)
