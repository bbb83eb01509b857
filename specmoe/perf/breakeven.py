"""Acceptance in the three definitions users meet, and the acceptance at which SD breaks even.

Definitions, for one draft length γ (chains; a tree's numbers are its chain equivalent):

    alpha  per-position acceptance: each proposal is accepted with probability α given that its
           predecessors were (the i.i.d. model of Leviathan et al.; what the speedup formula takes)
    rate   accepted ÷ drafted, what llama.cpp, vLLM and specmoe print as the acceptance rate
    tau    mean accepted length: tokens a round emits per sequence, the bonus/correction token
           included (the EAGLE papers' τ; SGLang's "accept length"), 1 ≤ τ ≤ γ + 1

    τ = (1 − α^{γ+1}) / (1 − α) = 1 + α + … + α^γ,     rate = (τ − 1) / γ

A rate or a τ therefore belongs to the γ it was measured at; α carries over to other γ under the
i.i.d. model, which is how a measurement at one γ is used to score others.

Break-even: the predicted speedup rises with α (more tokens per round, the same passes), so the α
at which it crosses 1× is found by bisection. None means even α = 1 (every proposal accepted) does
not pay; 0 means it pays whatever the acceptance (possible only with a free drafter and a verify
pass cheaper than a plain step, which no model here predicts, but the solver does not assume it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from specmoe.errors import SpecmoeError
from specmoe.theory import expected_tokens_per_round, per_token_alpha, sd_speedup


class AcceptanceKind(StrEnum):
    ALPHA = "alpha"
    RATE = "rate"
    TAU = "tau"


@dataclass(frozen=True)
class Acceptance:
    """One acceptance at draft length γ, in all three definitions."""

    gamma: int
    alpha: float
    rate: float
    tau: float

    def to_json(self) -> dict:
        return {"gamma": self.gamma, "alpha": self.alpha, "rate": self.rate, "tau": self.tau}


def from_alpha(alpha: float, gamma: int) -> Acceptance:
    tau = float(expected_tokens_per_round(alpha, gamma))
    return Acceptance(gamma, float(alpha), (tau - 1) / gamma, tau)


def acceptance(value: float, kind: AcceptanceKind, gamma: int, where: str = "--acceptance") -> Acceptance:
    """`value` read as `kind` at draft length γ, converted to the other two."""
    if kind is AcceptanceKind.TAU:
        if not 1.0 <= value <= gamma + 1:
            raise SpecmoeError(
                f"{where}: a mean accepted length τ at γ = {gamma} lies in [1, {gamma + 1}], got {value:g}; "
                "τ counts the bonus token (1 means nothing accepted)"
            )
        return from_alpha(per_token_alpha((value - 1) / gamma, gamma), gamma)
    if not 0.0 <= value <= 1.0:
        raise SpecmoeError(f"{where}: an acceptance {kind.value} is a fraction in [0, 1], got {value:g}")
    if kind is AcceptanceKind.RATE:
        return from_alpha(per_token_alpha(value, gamma), gamma)
    return from_alpha(value, gamma)


def breakeven_alpha(speedup: Callable[[float], float], tolerance: float = 1e-6) -> float | None:
    """The smallest α with speedup(α) ≥ 1, by bisection; None when speedup(1) < 1."""
    if speedup(1.0) < 1.0:
        return None
    if speedup(0.0) >= 1.0:
        return 0.0
    low, high = 0.0, 1.0
    while high - low > tolerance:
        mid = (low + high) / 2
        if speedup(mid) >= 1.0:
            high = mid
        else:
            low = mid
    return high


def round_breakeven(gamma: int, round_steps: float, draft_steps: float) -> Acceptance | None:
    """The acceptance at which rounds costing `round_steps` plain steps break even, or None when
    even full acceptance does not (a round dearer than the γ + 1 tokens it can emit).

    The measured form of the speedup model (`theory.sd_speedup` with T_T(B, 1) = 1): a round of γ
    draft steps of `draft_steps ÷ γ` each and a verify pass (with the round's bookkeeping) of
    `round_steps − draft_steps` emits (1 − α^{γ+1}) / (1 − α) tokens per sequence on average, where
    plain decoding emits one per step. Times are in plain steps, so the answer needs no clock."""
    verify = round_steps - draft_steps
    alpha = breakeven_alpha(lambda a: float(sd_speedup(a, gamma, 1.0, verify, draft_steps / gamma)))
    return None if alpha is None else from_alpha(alpha, gamma)


class Verdict(StrEnum):
    GO = "GO"
    NO_GO = "NO-GO"
    DEPENDS = "DEPENDS ON ACCEPTANCE"


def verdict(at_full: float, predicted: float | None, band: float, shortfall: float) -> Verdict:
    """advise's call from a predicted speedup (None: no acceptance stated) and the best one at
    full acceptance. GO when the band's pessimistic end, predicted ÷ band, reaches 1×. NO-GO only
    when the prediction (or, failing that, the one at full acceptance) stays below 1× even
    multiplied by `shortfall`, the most the profile has fallen short of a held-out measurement
    (never below the band): a NO-GO tells a user not to try, so it must survive the worst miss
    seen, not a percentile (docs/results/calibration/nogo-rules.md). Otherwise DEPENDS ON
    ACCEPTANCE."""
    reach = max(band, shortfall)
    if at_full * reach < 1.0:
        return Verdict.NO_GO
    if predicted is None:
        return Verdict.DEPENDS
    if predicted / band >= 1.0:
        return Verdict.GO
    if predicted * reach < 1.0:
        return Verdict.NO_GO
    return Verdict.DEPENDS


def band_verdict(at_full: float, predicted: float | None, low: float, high: float) -> Verdict:
    """advise's call from an asymmetric band [predicted · low, predicted · high], `low` and `high`
    the 10th and 90th percentiles of measured ÷ predicted over held-out rows: GO when the band's low
    end reaches 1×, NO-GO when its high end stays below 1× (or full acceptance does, times `high`),
    DEPENDS ON ACCEPTANCE only when the band straddles 1× (docs/results/calibration/
    anchor-verdict-rules.md). Without a stated acceptance, NO-GO or DEPENDS from full acceptance."""
    if at_full * high < 1.0:
        return Verdict.NO_GO
    if predicted is None:
        return Verdict.DEPENDS
    if predicted * low >= 1.0:
        return Verdict.GO
    if predicted * high < 1.0:
        return Verdict.NO_GO
    return Verdict.DEPENDS
