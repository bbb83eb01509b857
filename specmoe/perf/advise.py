"""Pick a draft and a draft length γ per batch size, or say plainly that SD will not pay.

Two ways in. From a fit (`advise FIT --draft PROFILE --alpha A`): every measured draft and γ scored
at the given α. From configs (`advise --config --hardware --engine`, `advise_setup`): no timing at
all, and per batch size the acceptance SD needs to break even, in all three definitions
(`specmoe.perf.breakeven`), the best γ, the speedup at a stated acceptance with the engine
profile's band, and a verdict: GO, NO-GO or DEPENDS ON ACCEPTANCE.

For each batch size B every (draft, γ) with γ = 1..γ_max (or γ from a given list) is scored by
the predicted speedup S(B, γ), each draft with its own acceptance α. The score is
`specmoe.perf.compose.expected_speedup`, the composition `model predict` prints and the check
against measured runs uses (docs/perf-model.md). The best wins; when even the best is below 1× the
advice is to decode without a draft at that batch size.
"""

from __future__ import annotations

import math
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.perf.breakeven import AcceptanceKind, acceptance, breakeven_alpha, from_alpha, verdict
from specmoe.perf.compose import expected_speedup
from specmoe.perf.files import MAX_BATCH, MAX_GAMMA, parse_counts, parse_fractions
from specmoe.perf.fit import fit_error, load_fit
from specmoe.perf.predict import charged_draft, fit_times, load_draft
from specmoe.perf.setup import SDSetup, describe
from specmoe.theory import target_efficiency


def check_gamma_max(gamma_max: int) -> None:
    if not 1 <= gamma_max <= MAX_GAMMA:
        raise SpecmoeError(
            f"--gamma-max must be between 1 and {MAX_GAMMA} draft tokens, got {gamma_max}; "
            f"pass --gamma-max {MAX_GAMMA} or less"
        )


def advise(
    target,
    drafts: list,
    alphas: list[float],
    batches: list[int],
    gamma_max: int = 8,
    gammas: list[int] | None = None,
    host_s: float = 0.0,
    plain_host_s: float = 0.0,
) -> dict:
    """Best (draft, γ) per batch size. `alphas[i]` is the per-position acceptance of `drafts[i]`;
    a draft of None is free (n-gram lookup). `gammas` replaces 1..gamma_max; `host_s` and
    `plain_host_s` are the engine's host seconds per SD round and per plain step (0: unknown)."""
    if len(alphas) != len(drafts):
        raise SpecmoeError(
            f"got {len(alphas)} --alpha values for {len(drafts)} drafts; pass one, or one per --draft"
        )
    check_gamma_max(gamma_max)
    candidates_gamma = parse_counts(gammas or list(range(1, gamma_max + 1)), "--gamma", maximum=MAX_GAMMA)
    rows = []
    for batch in parse_counts(batches, "--batch", maximum=MAX_BATCH):
        t1 = target.time(batch, 1)
        candidates = []
        for draft, alpha in zip(drafts, alphas, strict=True):
            for gamma in candidates_gamma:
                verify = target.time(batch, gamma + 1)
                speedup = expected_speedup(
                    target, charged_draft(draft), alpha, gamma, batch, host_s, plain_host_s
                )
                candidates.append(
                    {
                        "draft": draft.label if draft is not None else "free (no draft model)",
                        "alpha": alpha,
                        "gamma": gamma,
                        "speedup": speedup,
                        "efficiency": target_efficiency(t1, verify),
                        "extrapolated": target.extrapolated(batch, gamma + 1)
                        or (draft is not None and draft.extrapolated(batch, 2)),
                    }
                )
        best = max(candidates, key=lambda c: c["speedup"])
        rows.append({"batch": batch, "target_1_s": t1, "best": best, "pays": best["speedup"] >= 1.0})
    return {"target": target.label, "fitted": getattr(target, "fitted", True), "rows": rows}


def advise_from_args(args) -> dict:
    if args.fit is None:
        raise SpecmoeError(
            "advise needs a target FIT (with --draft PROFILE --alpha A), or --config, --hardware and "
            "--engine for an answer from configs alone"
        )
    if not args.draft or not args.alpha:
        raise SpecmoeError("advise from a fit needs --draft PROFILE and --alpha A (per-position acceptance)")
    fit = load_fit(args.fit)
    target = fit_times(fit, str(args.fit))
    drafts = [load_draft(Path(path)) for path in args.draft]
    alphas = [a for text in args.alpha for a in parse_fractions(text, "--alpha")]
    if len(alphas) == 1:
        alphas *= len(drafts)
    advice = advise(target, drafts, alphas, args.batch or fit["grid"]["batch"], args.gamma_max)
    return with_fit_error(advice, fit_error(fit))


FIT_WARNING = 0.10  # a fit missing its own held-out points by more than this is said to


def with_fit_error(advice: dict, error: float) -> dict:
    """Each best choice's speedup with the band the fit's error allows, S ×/÷ (1 + 2·error): a
    speedup is a ratio of two composed times, each off by about the fit's error (twice it is the
    tolerance `specmoe model check` uses too). A row whose band holds 1× is `within_error`."""
    factor = 1.0 + 2.0 * error
    rows = []
    for row in advice["rows"]:
        best = row["best"]
        low, high = best["speedup"] / factor, best["speedup"] * factor
        rows.append(row | {"band": [low, high], "within_error": low < 1.0 <= high})
    return advice | {"fit_error": error, "rows": rows}


def stated_alpha(
    value: float | None, kind: AcceptanceKind, at_gamma: int | None, gammas: list[int]
) -> float | None:
    """The per-position α of a stated acceptance; a rate or τ is read at the γ it was measured at."""
    if value is None:
        return None
    if kind is AcceptanceKind.ALPHA:
        return acceptance(value, kind, 1).alpha
    if at_gamma is None:
        if len(gammas) != 1:
            raise SpecmoeError(
                f"an acceptance {kind.value} belongs to the γ it was measured at: add --acceptance-gamma G "
                "(or give it as --acceptance-kind alpha)"
            )
        at_gamma = gammas[0]
    return acceptance(value, kind, at_gamma).alpha


def _candidate(setup: SDSetup, batch: int, gamma: int, alpha: float | None) -> dict:
    def speedup(a: float) -> float:
        return setup.speedup(a, gamma, batch)

    t1 = setup.target.time(batch, 1)
    breakeven = breakeven_alpha(speedup)
    factor = setup.engine.uncertainty
    entry = {
        "gamma": gamma,
        "efficiency": target_efficiency(t1, setup.target.time(batch, setup.shape.verify(gamma))),
        "speedup_at_full_acceptance": speedup(1.0),
        "breakeven": None if breakeven is None else from_alpha(breakeven, gamma).to_json(),
    }
    if alpha is not None:
        value = speedup(alpha)
        entry |= {"acceptance": from_alpha(alpha, gamma).to_json(), "speedup": value}
        entry["band"] = [value / factor, value * factor]
    return entry


def advise_setup(setup: SDSetup, batches: list[int], gammas: list[int], alpha: float | None) -> dict:
    """Per batch size: every γ's break-even acceptance (three definitions), the best γ, the speedup
    at the stated acceptance with its band, and the verdict (`specmoe.perf.breakeven.verdict`).
    Best γ: the highest speedup at the stated acceptance; without one, the γ that pays at the
    lowest per-position acceptance (ties to the smaller γ)."""
    rows = []
    for batch in parse_counts(batches, "--batch", maximum=MAX_BATCH):
        candidates = [
            _candidate(setup, batch, gamma, alpha)
            for gamma in parse_counts(gammas, "--gamma", maximum=MAX_GAMMA)
        ]
        if alpha is not None:
            best = max(candidates, key=lambda c: (c["speedup"], -c["gamma"]))
        else:
            best = min(candidates, key=lambda c: (_breakeven_alpha(c), c["gamma"]))
        at_full = max(c["speedup_at_full_acceptance"] for c in candidates)
        engine = setup.engine
        call = verdict(at_full, best.get("speedup"), engine.uncertainty, engine.shortfall)
        rows.append(
            {
                "batch": batch,
                "target_1_s": setup.target.time(batch, 1),
                "best": best,
                "candidates": candidates,
                "verdict": call.value,
            }
        )
    return {**describe(setup), "stated_alpha": alpha, "rows": rows}


def _breakeven_alpha(candidate: dict) -> float:
    return candidate["breakeven"]["alpha"] if candidate["breakeven"] else math.inf
