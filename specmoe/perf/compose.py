"""An SD decode's seconds composed from forward times, and the end-to-end speedup they imply.

Every SD speedup specmoe predicts goes through `composed_speedup`: `model predict` and `advise`
with an expected schedule from a per-position acceptance α (`expected_schedules`), and the check of
predictions against measured runs (`specmoe.findings.model_check`) with the schedule the runs
recorded. The forward times come from any `time(B, t)` source: a fit, a profile, first principles.

What a round of specmoe's loop costs at B live sequences (docs/decoding.md, `decoding/decode.py`):

    draft    γ draft forwards. The first feeds each row's pending tokens: one (the correction)
             after a round that rejected a proposal, two (the last proposal and the bonus token)
             after a fully accepted round; a batch step is as wide as its widest row. So a round
             costs T_D(B, w) + (γ − 1)·T_D(B, 1), w ∈ {1, 2}.
    verify   one target forward over γ + 1 tokens per row: T_T(B, γ + 1).
    host     acceptance, commit, cache rollback and bookkeeping: `host_s` per round, measured
             (not a forward pass; the fits know nothing of it). A drafter without a model (n-gram
             lookup) is host work too and is charged here, as `draft_host_s`.

Plain decoding costs T_T(B, 1) + host_s per step and emits one token per live row.

Other engines round differently (`RoundShape`): a tree drafter (EAGLE-2/3, SGLang's top-k) feeds
`draft_width` tokens per row at each of its γ steps and the target verifies `verify_tokens` per row
(the tree's size, not γ + 1); a head (EAGLE, MTP) is a draft forward like any other. Its acceptance
is then the chain-equivalent α whose (1 − α^{γ+1})/(1 − α) is the tree's mean accepted length.

    speedup = (emitted_SD ÷ seconds_SD) ÷ (emitted_plain ÷ seconds_plain)

which is how specmoe measures it: decode tokens/s of each arm, prefill excluded from both
(docs/metrics.md). With no host time, every round's first draft step one token wide and B fixed,
this is MoESD's S = E[emitted] · T_T(B, 1) / (γ·T_D + T_T(B, γ + 1)) (`specmoe.theory.sd_speedup`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy import stats

from specmoe.errors import SpecmoeError
from specmoe.theory import expected_tokens_per_round


class ForwardTimes(Protocol):
    def time(self, batch: float, tokens: float) -> float:
        """Seconds of one forward pass over `tokens` new tokens for each of `batch` sequences.
        A source that models routing (a fit) also takes `active=`, the experts per MoE layer the
        pass activates; only rounds that recorded it (`Rounds.active`) pass it."""
        ...


@dataclass(frozen=True)
class RoundShape:
    """How wide a round's passes are. The default is specmoe's own chain: every draft step one
    token wide except the two-token step after a fully accepted round, and γ + 1 verified tokens."""

    verify_tokens: int | None = None  # per row; None: γ + 1
    draft_width: int = 1  # tokens per row each draft step feeds (a tree's top-k)
    wide_after_full: bool = True  # the step after a fully accepted round feeds two tokens

    def verify(self, gamma: int) -> int:
        return gamma + 1 if self.verify_tokens is None else self.verify_tokens


CHAIN = RoundShape()


@dataclass(frozen=True)
class Rounds:
    """Rounds that ran at one batch size; `rounds` may be fractional (an expected schedule)."""

    batch: float  # live sequences in these rounds
    rounds: float  # how many such rounds
    wide_first: float  # share of them whose first draft step fed two tokens, in [0, 1]
    active: float | None = None  # experts per MoE layer a verify activated, traced; None: N(n)


@dataclass(frozen=True)
class SDSchedule:
    """What an SD arm did, in the counts a forward-time model needs."""

    gamma: int
    groups: tuple[Rounds, ...]
    emitted: float  # tokens appended to the outputs, summed over sequences
    host_s: float = 0.0  # engine host seconds per round
    draft_host_s: float = 0.0  # drafting seconds per round that are no model forward (n-gram)
    shape: RoundShape = CHAIN

    @property
    def rounds(self) -> float:
        return sum(g.rounds for g in self.groups)


@dataclass(frozen=True)
class PlainSchedule:
    """What a plain (autoregressive) arm did: `steps` target forwards at `batch` rows."""

    batch: float
    steps: float
    emitted: float
    host_s: float = 0.0  # engine host seconds per step


def draft_round_s(
    draft: ForwardTimes | None, batch: float, gamma: int, wide_first: float, width: int = 1
) -> float:
    """Seconds of one round's γ draft forwards (see the module docstring); 0 without a draft model.
    `width` > 1 is a tree drafter: every step feeds that many tokens per row."""
    if draft is None:
        return 0.0
    if not 0.0 <= wide_first <= 1.0:
        raise SpecmoeError(f"wide_first is a share in [0, 1], got {wide_first}")
    step = draft.time(batch, width)
    if width > 1:
        return gamma * step
    first = wide_first * draft.time(batch, 2) + (1.0 - wide_first) * step
    return first + (gamma - 1) * step


def round_s(
    target: ForwardTimes, draft: ForwardTimes | None, gamma: int, rounds: Rounds, shape: RoundShape = CHAIN
) -> float:
    """Seconds of one round's forwards: draft then verify (host time not included)."""
    tokens = shape.verify(gamma)
    if rounds.active is None:
        verify = target.time(rounds.batch, tokens)
    else:
        verify = target.time(rounds.batch, tokens, active=rounds.active)
    return draft_round_s(draft, rounds.batch, gamma, rounds.wide_first, shape.draft_width) + verify


def sd_seconds(target: ForwardTimes, draft: ForwardTimes | None, schedule: SDSchedule) -> float:
    """Decode seconds of an SD arm: every round's forwards plus its host time."""
    host = schedule.host_s + schedule.draft_host_s
    return sum(
        g.rounds * (round_s(target, draft, schedule.gamma, g, schedule.shape) + host) for g in schedule.groups
    )


def plain_seconds(target: ForwardTimes, plain: PlainSchedule) -> float:
    return plain.steps * (target.time(plain.batch, 1) + plain.host_s)


def composed_speedup(
    target: ForwardTimes, draft: ForwardTimes | None, sd: SDSchedule, plain: PlainSchedule
) -> float:
    """SD decode tokens/s over plain decode tokens/s, both from composed seconds. [×]"""
    sd_rate = sd.emitted / sd_seconds(target, draft, sd)
    plain_rate = plain.emitted / plain_seconds(target, plain)
    return sd_rate / plain_rate


def wide_share(alpha: float, gamma: int, batch: float) -> float:
    """Expected share of rounds whose first draft step feeds two tokens under i.i.d. acceptance α:
    some row's previous round accepted all γ proposals, 1 − (1 − α^γ)^B."""
    return 1.0 - (1.0 - alpha**gamma) ** batch


def live_share(alpha: float, gamma: int, new_tokens: int) -> tuple[float, ...]:
    """P(a row is still decoding at round r), r = 1, 2, …: the chance that its first r − 1 rounds
    emitted fewer than `new_tokens`, each round emitting 1 + (leading accepted proposals) tokens
    under i.i.d. per-position acceptance α. Its sum is a row's expected number of rounds, the last
    one cut short by the token budget."""
    if new_tokens < 1:
        raise SpecmoeError(f"new_tokens must be at least 1, got {new_tokens}")
    # P(a round emits j + 1 tokens), j = 0 … γ leading accepts  [γ + 1]
    emits = np.array([alpha**j * (1.0 - alpha) for j in range(gamma)] + [alpha**gamma])
    below = np.zeros(new_tokens)  # [N]: P(cumulative tokens = n) for n < N, rows still live
    below[0] = 1.0
    shares = []
    while (live := float(below.sum())) > 1e-9:
        shares.append(min(live, 1.0))
        after = np.zeros(new_tokens)
        for j, p in enumerate(emits[: new_tokens - 1]):  # a round of new_tokens or more ends every row
            after[j + 1 :] += p * below[: new_tokens - j - 1]
        below = after
    return tuple(shares)


def _ragged_rounds(alpha: float, gamma: int, batch: int, new_tokens: int, wide: bool) -> tuple[Rounds, ...]:
    """Expected rounds by live batch size when `batch` rows each decode `new_tokens` and leave the
    batch as they finish (`decoding/decode.py` drops finished rows): in round r the live count is
    Binomial(batch, live_share[r]); the loop runs while any row is live."""
    groups: dict[int, float] = {}
    for share in live_share(alpha, gamma, new_tokens):
        counts = np.arange(1, batch + 1)
        for live, weight in zip(counts, stats.binom.pmf(counts, batch, share), strict=True):
            if weight > 1e-9:
                groups[int(live)] = groups.get(int(live), 0.0) + float(weight)
    return tuple(
        Rounds(live, rounds, wide_share(alpha, gamma, live) if wide else 0.0)
        for live, rounds in sorted(groups.items())
    )


def expected_schedules(
    alpha: float,
    gamma: int,
    batch: int,
    host_s: float = 0.0,
    plain_host_s: float = 0.0,
    draft_host_s: float = 0.0,
    shape: RoundShape = CHAIN,
    new_tokens: int | None = None,
) -> tuple[SDSchedule, PlainSchedule]:
    """The expected rounds at per-position acceptance α and the plain steps that emit as much.

    With `new_tokens` None: one steady-state round with every row live (a long decode, where the
    ragged end is a few rounds of many). With `new_tokens` = N: a decode of N tokens per row, the
    last round of each row cut short and the batch shrinking as rows finish — at B = 16 and N = 32
    the loop runs a quarter more rounds than one row needs."""
    per_row = float(expected_tokens_per_round(alpha, gamma))  # tokens per row per round, bonus included
    wide = shape.wide_after_full and shape.draft_width == 1
    if new_tokens is None:
        groups = (Rounds(batch, 1.0, wide_share(alpha, gamma, batch) if wide else 0.0),)
        emitted = batch * per_row
    else:
        groups = _ragged_rounds(alpha, gamma, batch, new_tokens, wide)
        emitted = float(batch * new_tokens)
    sd = SDSchedule(gamma, groups, emitted=emitted, host_s=host_s, draft_host_s=draft_host_s, shape=shape)
    return sd, PlainSchedule(batch, emitted / batch, emitted, plain_host_s)


def expected_speedup(
    target: ForwardTimes,
    draft: ForwardTimes | None,
    alpha: float,
    gamma: int,
    batch: int,
    host_s: float = 0.0,
    plain_host_s: float = 0.0,
    draft_host_s: float = 0.0,
    shape: RoundShape = CHAIN,
    new_tokens: int | None = None,
) -> float:
    """`composed_speedup` of `expected_schedules`: what `model predict` and `advise` print."""
    sd, plain = expected_schedules(alpha, gamma, batch, host_s, plain_host_s, draft_host_s, shape, new_tokens)
    return composed_speedup(target, draft, sd, plain)
