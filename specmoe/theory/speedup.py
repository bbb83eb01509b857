"""Speculative-decoding speedup algebra (Leviathan et al. 2023; MoESD, arXiv 2505.19645, §3).

Glossary, one verify round of one sequence:
    gamma (γ)  draft length: tokens the draft proposes per round (the maximum; some tools draft fewer)
    accepted   draft tokens the target agrees with, 0..γ
    emitted    tokens the round appends to the output: accepted + 1, the +1 being the target's own
               token at the first mismatch (the "correction") or after a fully accepted draft
               (the "bonus"). A round therefore always emits at least one token.
    alpha (α)  acceptance. Two quantities share the name and this module says which one it takes:
               - the per-position acceptance probability of the i.i.d. model (expected_tokens_per_round,
                 sd_speedup), and
               - the measured acceptance rate accepted ÷ drafted that tools print (the bounds).

Times T are for one forward pass at batch size B, in any one unit (seconds or milliseconds) used
for every argument of a call; speedups are ratios and carry no unit:
    T_T(B, n)  target forward over n tokens per sequence (n = 1: a plain decode step;
               n = γ + 1: a verify pass over the last accepted token and the γ drafts)
    T_D(B, 1)  one draft decode step
MoESD writes the verify cost as T_T(B, γ); this module takes the verify pass the tool actually runs,
which for llama.cpp and Hugging Face carries γ + 1 tokens.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from specmoe.errors import SpecmoeError

ArrayLike = float | np.ndarray


def _alpha(alpha: ArrayLike) -> np.ndarray:
    arr = np.asarray(alpha, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise SpecmoeError(
            f"acceptance alpha must be a fraction in [0, 1], got {alpha!r}; a 2.6% rate is 0.026"
        )
    return arr


def _gamma(gamma: int) -> int:
    if isinstance(gamma, bool) or not isinstance(gamma, Integral) or gamma < 1:
        raise SpecmoeError(f"draft length gamma must be an integer >= 1, got {gamma!r}")
    return int(gamma)


def _time(name: str, value: ArrayLike, *, allow_zero: bool = False) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    too_small = np.any(arr < 0) if allow_zero else np.any(arr <= 0)
    if not np.all(np.isfinite(arr)) or too_small:
        bound = ">= 0" if allow_zero else "> 0"
        raise SpecmoeError(f"{name} must be a finite time {bound}, got {value!r}")
    return arr


def _out(value: np.ndarray, *inputs: ArrayLike) -> ArrayLike:
    """A Python float when every input is a scalar, an array otherwise."""
    return float(value) if all(np.ndim(x) == 0 for x in inputs) else value


def expected_tokens_per_round(alpha: ArrayLike, gamma: int) -> ArrayLike:
    """Expected tokens emitted by one verify round under i.i.d. acceptance.

        E[emitted] = (1 − α^{γ+1}) / (1 − α) = 1 + α + α² + … + α^γ      [tokens per round]

    α is the per-position acceptance probability, each draft token accepted independently with
    probability α given its predecessors were. The count includes the correction/bonus token, so
    α = 0 gives 1 (every round still emits the target's own token) and α = 1 gives γ + 1.
    Evaluated as the finite sum, which is exact at α = 1 and stable near it.

    Since α^i ≤ α for i ≥ 1, E[emitted] ≤ 1 + α·γ: this i.i.d. value never exceeds the timing-free
    bound `speedup_bound_no_timing`.
    """
    a = _alpha(alpha)
    g = _gamma(gamma)
    powers = a[..., np.newaxis] ** np.arange(g + 1)  # [..., γ + 1]: α^0 … α^γ
    return _out(powers.sum(axis=-1), alpha)


def per_token_alpha(acceptance_rate: float, gamma: int) -> float:
    """The per-position α whose i.i.d. acceptance gives this acceptance rate (accepted / drafted).

        rate(α) = E[accepted] / γ = (α + α² + … + α^γ) / γ

    A round stops at its first rejection, so the measured rate sits below α (α = 0.9, γ = 4 gives
    0.77); the speedup formula wants α itself. rate(α) rises monotonically from 0 to 1, so
    bisection finds it.
    """
    g = _gamma(gamma)
    rate = float(_alpha(acceptance_rate))
    low, high = 0.0, 1.0
    for _ in range(60):  # 2^-60: far below any measured rate's precision
        mid = (low + high) / 2
        if float(expected_tokens_per_round(mid, g)) - 1 < rate * g:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def target_efficiency(t_target_1: ArrayLike, t_target_gamma: ArrayLike) -> ArrayLike:
    """MoESD's target efficiency: how cheaply the target processes γ tokens per sequence.

        η = T_T(B, 1) / T_T(B, γ)         [dimensionless, in (0, 1] for a well-behaved target]

    η ≈ 1 when the pass is memory-bound (γ tokens cost the same as one, the SD-friendly regime);
    η ≈ 1/γ when compute-bound (cost grows linearly and SD cannot win).
    """
    t1 = _time("t_target_1", t_target_1)
    tg = _time("t_target_gamma", t_target_gamma)
    return _out(t1 / tg, t_target_1, t_target_gamma)


def speedup_from_emitted(
    mean_emitted_per_round: ArrayLike,
    gamma: int,
    t_target_1: ArrayLike,
    t_target_verify: ArrayLike,
    t_draft_1: ArrayLike,
) -> ArrayLike:
    """SD speedup over plain decoding given the measured tokens emitted per round.

        S = emitted_per_round · T_T(B, 1) / (γ · T_D(B, 1) + T_T(B, γ + 1))    [×]

    The numerator is the time plain decoding needs for the round's output, the denominator the
    round's cost: γ draft steps plus one verify pass. Use this form with measured data (mean
    emitted per round = emitted tokens ÷ rounds), which needs no model of how acceptance happens.
    Sampling, KV bookkeeping and other per-round overhead are not in the denominator, so with
    measured times this is an upper estimate of the end-to-end speedup.

    Args:
        mean_emitted_per_round: tokens per round, ≥ 1 (each round emits at least one).
        gamma: draft steps per round, integer ≥ 1.
        t_target_1: T_T(B, 1), plain decode step, > 0.
        t_target_verify: T_T(B, γ + 1), verify pass, > 0.
        t_draft_1: T_D(B, 1), draft step, ≥ 0 (0 for a free drafter such as n-gram lookup).
    """
    emitted = np.asarray(mean_emitted_per_round, dtype=float)
    g = _gamma(gamma)
    if not np.all(np.isfinite(emitted)) or np.any(emitted < 1) or np.any(emitted > g + 1):
        raise SpecmoeError(
            f"mean_emitted_per_round must be in [1, gamma + 1 = {g + 1}], got {mean_emitted_per_round!r}"
        )
    t1 = _time("t_target_1", t_target_1)
    tv = _time("t_target_verify", t_target_verify)
    td = _time("t_draft_1", t_draft_1, allow_zero=True)
    speedup = emitted * t1 / (g * td + tv)
    return _out(speedup, mean_emitted_per_round, t_target_1, t_target_verify, t_draft_1)


def sd_speedup(
    alpha: ArrayLike,
    gamma: int,
    t_target_1: ArrayLike,
    t_target_verify: ArrayLike,
    t_draft_1: ArrayLike,
) -> ArrayLike:
    """Predicted SD speedup under i.i.d. acceptance (MoESD eq. 1, with a γ + 1 token verify pass).

        S = [(1 − α^{γ+1}) / (1 − α)] · T_T(B, 1) / (γ · T_D(B, 1) + T_T(B, γ + 1))    [×]

    α is the per-position acceptance probability; see `expected_tokens_per_round`.
    Times as in `speedup_from_emitted`.
    """
    emitted = expected_tokens_per_round(alpha, gamma)
    speedup = speedup_from_emitted(emitted, gamma, t_target_1, t_target_verify, t_draft_1)
    return _out(np.asarray(speedup), alpha, t_target_1, t_target_verify, t_draft_1)


def speedup_bound_no_timing(alpha: ArrayLike, gamma: int) -> ArrayLike:
    """Upper bound on any end-to-end SD speedup, from acceptance alone: 1 + α·γ.   [×]

    α here is the measured acceptance rate, accepted ÷ drafted, as tools print it (a fraction;
    2.6% is 0.026). The argument needs no model of acceptance and no timings:

    1. A round drafts at most γ tokens and emits 1 + accepted tokens.
    2. Its verify pass runs the target over at least one token, so it costs at least one plain
       decode step T_T(B, 1); drafting costs ≥ 0. So a round costs ≥ T_T(B, 1).
    3. Plain decoding emits one token per T_T(B, 1). Hence
           speedup ≤ E[emitted per round] = 1 + accepted/rounds = 1 + α · drafted/rounds ≤ 1 + α·γ.

    Assumption: both arms run the target under the same conditions (same tool, settings, context
    length and clock), so that a step of the baseline costs what a 1-token target pass costs inside
    the SD loop. A measured "speedup" above the bound therefore means the two arms were not
    measured the same way; it cannot come from SD.

    Where the bounds are used: `specmoe.audit.foreign` checks claims against this value.
    `expected_tokens_per_round` (≤ 1 + α·γ) is the i.i.d. prediction, not a bound on measured data,
    because the tools' α (accepted ÷ drafted) is not the per-position probability it expects.
    When a log gives the exact counts, `mean_emitted_per_round` is the tighter bound.
    """
    a = _alpha(alpha)
    g = _gamma(gamma)
    return _out(1.0 + a * g, alpha)


def mean_emitted_per_round(n_emitted: int, n_accepted: int) -> float:
    """Mean tokens emitted per verify round from run totals: n_emitted / (n_emitted − n_accepted).

    Every round emits its accepted drafts plus exactly one target token, so rounds =
    emitted − accepted. By steps 2–3 of `speedup_bound_no_timing` this is also a timing-free upper
    bound on the speedup, and never larger than 1 + α·γ (α = accepted ÷ drafted, drafted ≤ γ·rounds).
    It is the sharper bound when a tool drafts fewer than γ tokens in some rounds.

    Args:
        n_emitted: tokens the SD run produced (llama.cpp prints it as n_predict), ≥ 1.
        n_accepted: draft tokens accepted over the run (n_accept), 0 ≤ n_accepted < n_emitted.
    """
    for name, value in (("n_emitted", n_emitted), ("n_accepted", n_accepted)):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
            raise SpecmoeError(f"{name} must be an integer count >= 0, got {value!r}")
    if n_accepted >= n_emitted:
        raise SpecmoeError(
            f"n_accepted ({n_accepted}) must be below n_emitted ({n_emitted}): every round emits one token "
            "that is not an accepted draft"
        )
    return n_emitted / (n_emitted - n_accepted)


def speedup_bound_timed(
    alpha: ArrayLike,
    gamma: int,
    t_target_1: ArrayLike,
    t_target_verify: ArrayLike,
    t_draft_1: ArrayLike,
) -> ArrayLike:
    """Best speedup a run can reach given its measured acceptance rate and measured pass costs.

        S_max = (1 + α·γ) · T_T(B, 1) / (γ · T_D(B, 1) + T_T(B, γ + 1))     [×]

    α is the measured rate accepted ÷ drafted, so 1 + α·γ is the mean emitted per round when
    every round drafts γ tokens (and an upper bound on it otherwise). This is `speedup_from_emitted`
    at that emitted count: the analytic speedup for the observed acceptance, before sampling and
    bookkeeping overhead. It is `speedup_bound_no_timing` times T_T(B, 1) / (γ · T_D + T_T(B, γ + 1)),
    a factor ≤ 1 whenever the verify pass costs at least a plain step, so it is the tighter bound.
    """
    a = _alpha(alpha)
    g = _gamma(gamma)
    speedup = speedup_from_emitted(1.0 + a * g, g, t_target_1, t_target_verify, t_draft_1)
    return _out(np.asarray(speedup), alpha, t_target_1, t_target_verify, t_draft_1)
