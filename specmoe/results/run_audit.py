"""Checks every measured run against invariants that physics and counting impose.

A run that fails is kept and marked, with the reason in plain words: hiding it would hide a bug.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specmoe.metrics import RunCounts, RunTimes, acceptance_rate, count_violations
from specmoe.theory import speedup_bound_no_timing, speedup_bound_timed

if TYPE_CHECKING:
    from specmoe.results.store import RunRow

# Two timings of the same work on a shared machine differ by a few percent; a speedup is only
# called impossible beyond that.
TIMING_TOLERANCE = 0.05
# Where no γ is known, no speedup above this is a measurement: 1 + αγ <= 1 + γ, and no SD setup
# drafts hundreds of tokens a round. The same ceiling as the audit of other tools' results
# (`specmoe.audit.foreign`).
SPEEDUP_CEILING = 1000.0


@dataclass(frozen=True)
class RunAudit:
    verdict: str  # "pass" or "fail"
    reason: str


def audit_run(
    counts: RunCounts, times: RunTimes, gamma: int | None, tokens_per_s: float, baseline: RunRow | None
) -> RunAudit:
    """Audit one local arm: `gamma` is None for a baseline arm; `baseline` (the row of its baseline
    arm) is given for SD arms."""
    problems = count_violations(counts, gamma)
    unusable = _unusable_inputs(counts, times, gamma, tokens_per_s, baseline)
    if unusable:
        return RunAudit("fail", "; ".join(problems + unusable))
    if gamma is not None and baseline is not None:
        speedup = tokens_per_s / baseline.tokens_per_s
        alpha = acceptance_rate(counts.accepted, counts.drafted)
        bound = float(speedup_bound_no_timing(alpha, gamma))
        if speedup > bound * (1 + TIMING_TOLERANCE):
            problems.append(f"speedup {speedup:.3f} exceeds 1 + alpha*gamma = {bound:.3f}")
        forwards = counts.target_forwards
        timed = float(
            speedup_bound_timed(
                alpha,
                gamma,
                baseline.times.decode_s / baseline.counts.target_forwards,
                times.verify_s / forwards,
                times.draft_s / (forwards * gamma),
            )
        )
        if speedup > timed * (1 + TIMING_TOLERANCE):
            problems.append(f"speedup {speedup:.3f} exceeds the bound from its own timings {timed:.3f}")
    if problems:
        return RunAudit("fail", "; ".join(problems))
    bounded = gamma is not None and baseline is not None
    return RunAudit("pass", "counts consistent" + (", speedup within bounds" if bounded else ""))


def impossible_speedup(
    speedup: float, gamma: int | None, accepted: int | None = None, drafted: int | None = None
) -> str:
    """Why an SD speedup cannot have been measured, in words; "" when it can.

    The physical bound, one definition for the stored runs' audit, the summary and the report: with
    both draft counts, speedup <= 1 + αγ (α = accepted / drafted, `speedup_bound_no_timing`); with
    γ alone, speedup <= 1 + γ (α <= 1); with neither, SPEEDUP_CEILING. TIMING_TOLERANCE above each.
    A value that is not a finite number > 0 is impossible too.
    """
    if not (isinstance(speedup, int | float) and math.isfinite(speedup) and speedup > 0):
        return f"speedup {speedup} is not a finite number > 0"
    alpha = acceptance_rate(accepted, drafted)
    if gamma is not None and alpha is not None and 0 <= alpha <= 1:
        bound, what = float(speedup_bound_no_timing(alpha, gamma)), "1 + alpha*gamma"
    elif gamma is not None:
        bound, what = 1.0 + gamma, "1 + gamma"
    else:
        bound, what = SPEEDUP_CEILING, "the sanity ceiling"
    if speedup > bound * (1 + TIMING_TOLERANCE):
        return f"speedup {speedup:.3g} exceeds {what} = {bound:.3g}"
    return ""


def _unusable_inputs(
    counts: RunCounts, times: RunTimes, gamma: int | None, tokens_per_s: float, baseline: RunRow | None
) -> list[str]:
    """Values no measurement produces, which would make the speedup checks divide by zero or judge
    nonsense: a rate that is not finite and > 0, or an SD arm that drafted or forwarded nothing."""
    problems = []
    rates = {"tokens/s": tokens_per_s}
    if gamma is not None and baseline is not None:
        rates["baseline tokens/s"] = baseline.tokens_per_s
        if not counts.drafted or not counts.target_forwards or not baseline.counts.target_forwards:
            problems.append("invalid input: an SD arm or its baseline with no drafts or no target forwards")
    for name, rate in rates.items():
        if not (isinstance(rate, int | float) and math.isfinite(rate) and rate > 0):
            problems.append(f"invalid input: {name} {rate} is not a finite number > 0")
    return problems


def audit_served_run(
    counts: RunCounts,
    gamma: int | None,
    tokens_per_s: float,
    baseline_tokens_per_s: float | None,
    cut_off: int = 0,
    aborted: int = 0,
    stopped_early: int = 0,
) -> RunAudit:
    """Audit a run measured against a server (`gamma` None: a baseline arm), as far as the server's
    counters allow.

    Server counters leave out each request's first token (made by its prefill) and decode steps that
    drafted nothing, and they count every request the server handled, so emitted = accepted +
    rounds cannot hold; a count the server does not report is None. What cannot be checked is named
    as unverifiable in the reason, never failed. What can: a baseline server drafts nothing;
    accepted <= drafted <= gamma x rounds; speedup <= 1 + accepted/rounds (see
    `speedup_bound_no_timing`: a verify step costs at least a plain step). `cut_off` counts the
    responses that ended without a finish reason: the server stopped them midway, so the run did
    not measure the work it names; so do `aborted` (finish_reason "abort" or "error") and
    `stopped_early` (an end before max_tokens although the request asked to ignore EOS), counted by
    `specmoe.serving.load.unfinished`.
    """
    rounds, drafted, accepted = counts.rounds, counts.drafted, counts.accepted
    problems: list[str] = []
    if cut_off:
        problems.append(
            f"responses ended without a finish reason ({cut_off}), cut off by the server (llama-cpp-python's "
            "server does so under concurrency unless started with --interrupt_requests False)"
        )
    if aborted:
        problems.append(
            f"responses aborted by the server ({aborted}, finish_reason abort or error): they did not "
            "decode the tokens the run names; check the server's log (out of memory, preemption, a timeout)"
        )
    if stopped_early:
        problems.append(
            f"responses stopped before max_tokens although ignore_eos was sent ({stopped_early}): a stop "
            "string or an engine that ignores ignore_eos ended them, so the arms decoded different "
            "lengths; remove stop strings or check that the server honours ignore_eos"
        )
    checked: list[str] = []
    unverifiable = ["emitted = accepted + rounds (server counters)"]
    if gamma is None:
        if drafted:
            problems.append(
                f"the baseline server drafted {drafted} tokens, so it runs speculative decoding; "
                "point the baseline model at a server without it"
            )
        elif drafted == 0:
            checked.append("no drafts")
    elif drafted is None or accepted is None:
        unverifiable.append("acceptance (the server reports no draft counts)")
    else:
        if accepted > drafted:
            problems.append(f"accepted {accepted} > drafted {drafted}")
        if rounds is None:
            unverifiable.append("speedup bound (the server reports no rounds)")
        elif drafted > gamma * rounds:
            problems.append(
                f"drafted {drafted} > gamma {gamma} x rounds {rounds}; set gamma to the server's draft length"
            )
        elif rounds and baseline_tokens_per_s:
            speedup = tokens_per_s / baseline_tokens_per_s
            bound = 1 + accepted / rounds
            if speedup > bound * (1 + TIMING_TOLERANCE):
                problems.append(f"speedup {speedup:.3f} exceeds 1 + accepted/rounds = {bound:.3f}")
            checked.append("speedup within 1 + accepted/rounds")
        if not problems:
            checked.insert(0, "accepted <= drafted <= gamma x rounds" if rounds else "accepted <= drafted")
        if drafted == 0:
            unverifiable.append("acceptance (the server drafted nothing: is speculative decoding on?)")
    # Whatever the server reports, the speedup stays within 1 + αγ (or 1 + γ without draft counts):
    # a server that over-counts its tokens is caught here even when its counters are missing.
    if gamma is not None and baseline_tokens_per_s:
        beyond = impossible_speedup(tokens_per_s / baseline_tokens_per_s, gamma, accepted, drafted)
        if beyond:
            problems.append(beyond)
    if problems:
        return RunAudit("fail", "; ".join(problems))
    done = f"checked {', '.join(checked)}; " if checked else ""
    return RunAudit("pass", f"{done}unverifiable: {', '.join(unverifiable)}")
