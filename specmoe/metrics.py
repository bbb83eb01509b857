"""Every metric specmoe reports, defined once. docs/metrics.md says the same in words.

Counts are summed over sequences: a *sequence-round* is one sequence taking part in one verify round
(or one autoregressive step). With B live sequences a batch round adds B sequence-rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from specmoe.decoding.records import DecodeResult
from specmoe.stats import Estimate, ratio_of_means


@dataclass(frozen=True)
class RunCounts:
    """A run's counts summed over its sequences: what the results store keeps as `counts`.

    A local run knows every count. A run against a server stores None for a count the server does
    not report (never a guess): `target_forwards`, `truncated`, and per engine `rounds`, `drafted`,
    `accepted`. Invariant (`count_violations`): emitted + truncated = accepted + rounds.
    """

    rounds: int | None  # sequence-rounds
    target_forwards: int | None  # batch rounds: forward passes of the target
    drafted: int | None
    accepted: int | None
    emitted: int
    truncated: int | None

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunCounts:
        """From the store's JSON object, which holds exactly these keys."""
        return cls(**_exact_keys("counts", values, COUNT_KEYS))


@dataclass(frozen=True)
class RunTimes:
    """A run's wall-clock seconds: what the results store keeps as `times`.

    decode_s = draft_s + verify_s + overhead_s + state_s for a local run
    (`decoding.records.RoundRecord`); wall_s = prefill_s + decode_s (plus compile time the decode loop
    adds). A server run stores None for the per-round parts only the server could time.

    state_s, rolling back hybrid models' linear-attention state, is 0 for every other model; the
    store keeps it only where it is not (`to_dict`), so a run of a model without such state, and a
    store written before it existed, hold exactly the other six keys.
    """

    prefill_s: float
    decode_s: float
    draft_s: float | None
    verify_s: float | None
    overhead_s: float | None
    wall_s: float
    state_s: float | None = 0.0

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunTimes:
        """From the store's JSON object: the TIME_KEYS, and state_s where it was spent (absent: 0,
        or None for a server run)."""
        state = values.get("state_s", None if values.get("overhead_s") is None else 0.0)
        required = {k: v for k, v in values.items() if k != "state_s"}
        return cls(**_exact_keys("times", required, TIME_KEYS), state_s=state)

    def to_dict(self) -> dict[str, Any]:
        """The store's JSON object: state_s only where the run spent any."""
        values = asdict(self)
        if not values["state_s"]:
            del values["state_s"]
        return values


COUNT_KEYS = tuple(f.name for f in fields(RunCounts))  # the store's order (CSV columns)
TIME_KEYS = tuple(f.name for f in fields(RunTimes) if f.name != "state_s")  # what every stored run holds
EXPORT_TIME_KEYS = (*TIME_KEYS, "state_s")  # an export's columns: state_s too, 0 where none was spent


def _exact_keys(name: str, values: dict[str, Any], expected: tuple[str, ...]) -> dict[str, Any]:
    if set(values) != set(expected):
        raise ValueError(
            f"{name} needs exactly the keys {', '.join(expected)}; "
            f"missing {sorted(set(expected) - set(values))}, extra {sorted(set(values) - set(expected))}"
        )
    return values


def totals(result: DecodeResult) -> RunCounts:
    """The counts of a local run, every one known."""
    return RunCounts(
        rounds=sum(len(r.rows) for r in result.rounds),
        target_forwards=len(result.rounds),
        drafted=sum(sum(r.drafted) for r in result.rounds),
        accepted=sum(sum(r.accepted) for r in result.rounds),
        emitted=sum(sum(r.emitted) for r in result.rounds),
        truncated=sum(o.truncated for o in result.outputs),
    )


@dataclass(frozen=True)
class SequenceCounts:
    """One sequence's (one prompt's) counts over a run; they obey the same invariant as RunCounts."""

    rounds: int  # sequence-rounds this sequence took part in
    drafted: int
    accepted: int
    emitted: int
    truncated: int
    accepted_by_position: tuple[int, ...]  # [γ]: rounds whose j-th proposal was accepted, j = 1..γ


def run_times(result: DecodeResult) -> RunTimes:
    """The seconds of a local run, every one measured."""
    return RunTimes(
        prefill_s=result.prefill_s,
        decode_s=result.decode_s,
        draft_s=sum(r.draft_s for r in result.rounds),
        verify_s=sum(r.verify_s for r in result.rounds),
        overhead_s=sum(r.overhead_s for r in result.rounds),
        wall_s=result.wall_s,
        state_s=sum(r.state_s for r in result.rounds),
    )


def per_sequence(result: DecodeResult) -> list[SequenceCounts]:
    """Counts per sequence of the batch, in prompt order: the per-prompt records of a run."""
    n = len(result.outputs)
    rounds, drafted, accepted, emitted = ([0] * n for _ in range(4))
    by_position = [[0] * result.gamma for _ in range(n)]
    for record in result.rounds:
        for row, d, a, e in zip(record.rows, record.drafted, record.accepted, record.emitted, strict=True):
            rounds[row] += 1
            drafted[row] += d
            accepted[row] += a
            emitted[row] += e
            for j in range(a):
                by_position[row][j] += 1
    return [
        SequenceCounts(
            rounds=rounds[i],
            drafted=drafted[i],
            accepted=accepted[i],
            emitted=emitted[i],
            truncated=result.outputs[i].truncated,
            accepted_by_position=tuple(by_position[i]),
        )
        for i in range(n)
    ]


def acceptance_rate(accepted: int | None, drafted: int | None) -> float | None:
    """Accepted proposals / drafted proposals. None when nothing was drafted (autoregressive, or a
    draft that proposed nothing) or a count is unknown (a server that hides it): the one convention
    for "no proposals", never 0.0."""
    if accepted is None or not drafted:
        return None
    return accepted / drafted


def run_acceptance(arm: str, counts: RunCounts) -> float | None:
    """A stored run's acceptance rate: `acceptance_rate` of its counts for an SD arm, None for the
    baseline arm (a server may count drafts there that no request used)."""
    return acceptance_rate(counts.accepted, counts.drafted) if arm == "sd" else None


def mean_accepted_length(accepted: int, rounds: int) -> float | None:
    """Tokens the target commits per sequence-round: accepted proposals + 1.

    The +1 counts the correction or bonus token each verify pass adds, as vLLM's "mean acceptance
    length" does; it is measured before EOS / length truncation. Autoregressive decoding gives 1.
    """
    return 1.0 + accepted / rounds if rounds else None


def decode_tokens_per_s(emitted: int, decode_s: float) -> float:
    """Emitted tokens / decode wall seconds (prefill excluded). Both arms count the same way."""
    return emitted / decode_s if decode_s > 0 else float("nan")


def acceptance_by_position(result: DecodeResult) -> list[float]:
    """Fraction of sequence-rounds whose j-th proposal (1-based j = index + 1) was accepted."""
    counts = [0] * result.gamma
    rounds = 0
    for record in result.rounds:
        rounds += len(record.rows)
        for accepted in record.accepted:
            for j in range(accepted):
                counts[j] += 1
    return position_acceptance(counts, rounds)


def position_acceptance(accepted_by_position: Sequence[int], rounds: int) -> list[float]:
    """Share of sequence-rounds whose j-th proposal was accepted, from the raw counts.

    `accepted_by_position[j - 1]` counts the sequence-rounds that accepted their j-th proposal (a
    round stops at its first rejection, so the shares never rise with j); `rounds` counts every
    sequence-round. Empty when no round was run.
    """
    return [c / rounds for c in accepted_by_position] if rounds else []


def time_shares(result: DecodeResult) -> dict[str, float]:
    """Shares of decode wall time spent drafting, verifying, rolling back state, and in host overhead."""
    return time_shares_of(
        sum(r.draft_s for r in result.rounds),
        sum(r.verify_s for r in result.rounds),
        sum(r.overhead_s for r in result.rounds),
        sum(r.state_s for r in result.rounds),
    )


def time_shares_of(
    draft_s: float, verify_s: float, overhead_s: float, state_s: float = 0.0
) -> dict[str, float]:
    """Shares of draft, verify, host-overhead (and state-rollback) seconds in their sum (all zero when
    it is zero); the "state" share is there only when some state time was spent.

    The decode time of an SD run is exactly these parts (`decoding.records.RoundRecord`), so the
    shares of stored `times` (summed over runs) are the shares of decode time.
    """
    seconds = {"draft": draft_s, "verify": verify_s, "overhead": overhead_s}
    if state_s > 0:
        seconds[STATE_PART] = state_s
    total = sum(seconds.values())
    return {part: (s / total if total > 0 else 0.0) for part, s in seconds.items()}


DECODE_PARTS = ("draft", "verify", "overhead")  # the parts of decode_s, in stacking order
# Rolling back hybrid models' linear-attention state (state_s): a part of its own, shown only where a
# run spent any, since every other model spends none.
STATE_PART = "state"


def decode_parts(with_state: bool) -> tuple[str, ...]:
    """The parts of decode time in stacking order, the state rollback among them when it was spent."""
    return ("draft", "verify", STATE_PART, "overhead") if with_state else DECODE_PARTS


def ms_per_output_token(seconds: Sequence[float], emitted: Sequence[int]) -> Estimate:
    """Milliseconds per output token over runs: 1000 × Σ seconds ÷ Σ emitted tokens.

    Run i's seconds and tokens belong together; each run is one prompt batch in one repeat, the
    sampling unit, so the interval is the ratio estimator's over runs (`stats.ratio_of_means`: a
    t-interval from MIN_UNITS runs on, the per-run range below). Emitted tokens count as in decode
    tokens/s, so the decode total is the reciprocal of the arm's pooled decode tokens/s.
    """
    return ratio_of_means(seconds, emitted).scaled(1000.0)


def decode_split_per_token(times: Sequence[RunTimes], emitted: Sequence[int]) -> dict[str, Estimate] | None:
    """The decode milliseconds per output token of one configuration's runs, split into its parts.

    Keys: "draft", "verify", "overhead" (`DECODE_PARTS`, from each run's draft_s, verify_s and
    overhead_s), "state" where some run spent state_s (`decode_parts`), and "decode" (decode_s,
    their sum). A baseline's draft part is zero: it has no drafter. None when a part is unknown
    (server runs) or no run emitted a token.
    """
    if not times or sum(emitted) <= 0:
        return None
    split = {}
    for part in decode_parts(any((t.state_s or 0.0) > 0 for t in times)):
        seconds = [getattr(t, f"{part}_s") for t in times]
        if any(s is None for s in seconds):
            return None
        split[part] = ms_per_output_token(seconds, emitted)
    split["decode"] = ms_per_output_token([t.decode_s for t in times], emitted)
    return split


def local_time_to_first_token(prefill_s: float, first_round_s: float) -> float:
    """Seconds from a local batch's start to its first output token: prefill_s + the first round.

    The prompt phase caches every prompt token but the last (`decoding.decode`); the first round feeds
    that token (and, for SD, γ proposals) and commits every sequence's first output token. The first
    round's seconds are its draft_s + verify_s + overhead_s. This is `time_to_first_token` of a server
    request without the network and queue: a batch's sequences all get their first token then.
    """
    return prefill_s + first_round_s


def invariant_violations(result: DecodeResult) -> list[str]:
    """Per sequence: emitted + truncated = accepted + rounds, and accepted <= drafted per round."""
    problems = []
    per_seq: dict[int, list[int]] = {}
    for index, record in enumerate(result.rounds):
        for row, drafted, accepted, emitted in zip(
            record.rows, record.drafted, record.accepted, record.emitted, strict=True
        ):
            if accepted > drafted:
                problems.append(f"round {index} sequence {row}: {_overaccepted(accepted, drafted)}")
            counts = per_seq.setdefault(row, [0, 0, 0])
            counts[0] += 1
            counts[1] += accepted
            counts[2] += emitted
    for row, (rounds, accepted, emitted) in sorted(per_seq.items()):
        output = result.outputs[row]
        if emitted != len(output.token_ids):
            problems.append(
                f"sequence {row}: emitted {emitted} but output holds {len(output.token_ids)} tokens"
            )
        unbalanced = _unbalanced(emitted, output.truncated, accepted, rounds)
        if unbalanced:
            problems.append(f"sequence {row}: {unbalanced}")
    return problems


def count_violations(counts: RunCounts, gamma: int | None) -> list[str]:
    """A local run's summed counts against the invariants: emitted + truncated = accepted + rounds,
    accepted <= drafted, and drafted = γ × rounds (every round drafts γ for every live sequence);
    a run without a draft (`gamma` None) drafts nothing."""
    c = counts
    if c.rounds is None or c.drafted is None or c.accepted is None or c.truncated is None:
        raise ValueError(f"count_violations needs a local run's counts, every one known; got {c}")
    problems = []
    unbalanced = _unbalanced(c.emitted, c.truncated, c.accepted, c.rounds)
    if unbalanced:
        problems.append(unbalanced)
    if c.accepted > c.drafted:
        problems.append(_overaccepted(c.accepted, c.drafted))
    if gamma is None and c.drafted:
        problems.append(f"drafted {c.drafted} without a draft")
    elif gamma is not None and c.drafted != gamma * c.rounds:
        problems.append(f"drafted {c.drafted} != gamma {gamma} x rounds {c.rounds}")
    return problems


def _unbalanced(emitted: int, truncated: int, accepted: int, rounds: int) -> str | None:
    """The invariant of every decode: each sequence-round commits its accepted proposals plus one
    corrected or bonus token; what EOS or the length limit cut off is counted as truncated."""
    if emitted + truncated == accepted + rounds:
        return None
    return f"emitted {emitted} + truncated {truncated} != accepted {accepted} + rounds {rounds}"


def _overaccepted(accepted: int, drafted: int) -> str:
    return f"accepted {accepted} > drafted {drafted}"


def summary(result: DecodeResult) -> dict[str, float | int | None]:
    """The stats object `specmoe generate --json` prints: whole-batch counts and seconds."""
    t, s = totals(result), run_times(result)
    return {
        "rounds": t.rounds,
        "target_forwards": t.target_forwards,
        "drafted": t.drafted,
        "accepted": t.accepted,
        "emitted": t.emitted,
        "truncated": t.truncated,
        "prefill_s": s.prefill_s,
        "decode_s": s.decode_s,
        "compile_s": result.compile_s,
        "draft_s": s.draft_s,
        "verify_s": s.verify_s,
        "overhead_s": s.overhead_s,
        "state_s": s.state_s,
        "wall_s": s.wall_s,
        "decode_tokens_per_s": decode_tokens_per_s(t.emitted, result.decode_s),
        "acceptance_rate": acceptance_rate(t.accepted, t.drafted),
        "mean_accepted_length": mean_accepted_length(t.accepted, t.rounds),
    }


def speedup(sd_tokens_per_s: Sequence[float], baseline_tokens_per_s: Sequence[float]) -> Estimate:
    """Speedup = mean SD tokens/s ÷ mean baseline tokens/s over paired units, with its interval.

    A paired unit is one prompt batch in one repeat, measured by both arms back to back; unit i of
    each list belongs together. The interval is the ratio estimator's t-interval at 95% from
    MIN_UNITS units on, the range of the per-unit ratios below that (`specmoe.stats`).
    """
    return ratio_of_means(sd_tokens_per_s, baseline_tokens_per_s)


def error_factor(predicted: float, measured: float) -> float:
    """How far a predicted speedup is from the measured one, either way: max(p ÷ m, m ÷ p) ≥ 1."""
    return max(predicted / measured, measured / predicted)


def target_efficiency_measured(
    baseline_verify_s: float, baseline_forwards: int, sd_verify_s: float, sd_forwards: int
) -> float:
    """T(B, 1) / T(B, G + 1): the target's mean 1-token step over its mean verify pass, both measured."""
    return (baseline_verify_s / baseline_forwards) / (sd_verify_s / sd_forwards)


@dataclass(frozen=True)
class RoundCost:
    """What one SD round of a configuration costs, in plain decode steps of its baseline: the
    baseline's decode seconds per target forward (one token per sequence, its sampling included)
    at the same batch size. Every part is a mean over the rounds (target forwards) of the SD runs.

    A round emits 1 + accepted tokens per sequence and plain decoding one per step, so SD pays
    about when the mean accepted length exceeds `total` (`perf.breakeven.round_breakeven`)."""

    gamma: int
    draft: float  # the drafter's γ proposals (draft_s), in steps: γ × a draft step's cost
    verify: float  # the target's pass over γ + 1 tokens per sequence (verify_s): 1 ÷ target efficiency
    overhead: float  # acceptance, bookkeeping and KV cache rollback (overhead_s)
    state: float = 0.0  # rolling back a hybrid model's linear-attention state (state_s)

    @property
    def total(self) -> float:
        return self.draft + self.verify + self.overhead + self.state

    @property
    def draft_step(self) -> float:
        """One draft step (a proposal per sequence), in plain target steps."""
        return self.draft / self.gamma


def round_cost(
    gamma: int,
    baseline_decode_s: float,
    baseline_forwards: int,
    sd_times: tuple[float, ...],
    sd_forwards: int,
) -> RoundCost:
    """The RoundCost of summed measurements: the baseline's decode seconds and target forwards, the
    SD arm's (draft_s, verify_s, overhead_s[, state_s]) and target forwards (its rounds of the batch)."""
    step = baseline_decode_s / baseline_forwards
    return RoundCost(gamma, *(seconds / sd_forwards / step for seconds in sd_times))


# --- runs against a server (specmoe.serving) -------------------------------------------------------
# A server run sends N requests at concurrency c and times each streamed response on the client's
# `time.perf_counter`. The first token of a request comes out of its prefill, so it marks the end of
# the request's prompt phase; tokens after it are decode.


def time_to_first_token(sent_s: float, first_s: float | None) -> float | None:
    """Seconds from sending a request to its first token chunk (queueing, prefill and the first
    token; see specmoe.serving.sse); None when the response held no token."""
    return None if first_s is None else first_s - sent_s


def time_per_output_token(first_s: float | None, last_s: float | None, output_tokens: int) -> float | None:
    """Seconds per token after the first: (last − first) ÷ (output_tokens − 1); None below 2 tokens."""
    if first_s is None or last_s is None or output_tokens < 2:
        return None
    return (last_s - first_s) / (output_tokens - 1)


def request_tokens_per_s(output_tokens: int, sent_s: float, last_s: float | None) -> float | None:
    """End-to-end tokens/s of one request: output tokens ÷ seconds from sending to its last token."""
    if last_s is None or last_s <= sent_s:
        return None
    return output_tokens / (last_s - sent_s)


LATENCY_PERCENTILES = (50, 90, 99)  # what vLLM's and SGLang's serving benchmarks print


def latency_percentiles(
    values: Sequence[float], points: Sequence[float] = LATENCY_PERCENTILES
) -> dict[str, float]:
    """{"p50": ..., "p90": ..., "p99": ...} of per-request latencies (numpy's linear interpolation,
    as those benchmarks compute them); {} when there is no value."""
    if len(values) == 0:
        return {}
    found = np.percentile(np.asarray(values, dtype=float), list(points))  # [len(points)]
    return {f"p{p:g}": float(v) for p, v in zip(points, found, strict=True)}


def served_run_times(
    start_s: float, first_s: Sequence[float | None], last_s: Sequence[float | None]
) -> tuple[float, float]:
    """(prefill_s, decode_s) of a server run: from its start to the first token any request
    received, then from that token to the last token of any request. wall_s is their sum."""
    firsts = [t for t in first_s if t is not None]
    lasts = [t for t in last_s if t is not None]
    if not firsts:
        return (max(lasts, default=start_s) - start_s, 0.0)
    return min(firsts) - start_s, max(lasts) - min(firsts)


def served_decode_tokens_per_s(output_tokens: Sequence[int], decode_s: float) -> float:
    """Decode tokens/s of a server run: tokens after each request's first ÷ decode_s.

    Each request's first token is left out because it is produced by the request's prefill, inside
    its time to first token. At concurrency 1 this is 1 ÷ time per output token; both arms of a
    server comparison use it, so their ratio is the speedup as for local runs.
    """
    decoded = sum(max(n - 1, 0) for n in output_tokens)
    return decoded / decode_s if decode_s > 0 else float("nan")
