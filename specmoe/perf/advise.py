"""Pick a draft and a draft length γ per batch size, or say plainly that SD will not pay.

For each batch size B every (draft, γ) with γ = 1..γ_max is scored by the predicted speedup
S(B, γ) (`specmoe.perf.predict`), each draft with its own acceptance α. The best wins; when even
the best is below 1× the advice is to decode without a draft at that batch size.
"""

from __future__ import annotations

from specmoe.errors import SpecmoeError
from specmoe.perf.files import parse_counts, parse_fractions
from specmoe.perf.fit import load_fit
from specmoe.perf.predict import draft_step_s, fit_times, load_draft
from specmoe.theory import sd_speedup, target_efficiency


def advise(target, drafts: list, alphas: list[float], batches: list[int], gamma_max: int = 8) -> dict:
    """Best (draft, γ) per batch size. `alphas[i]` is the acceptance of `drafts[i]`."""
    if len(alphas) != len(drafts):
        raise SpecmoeError(
            f"got {len(alphas)} --alpha values for {len(drafts)} drafts; pass one, or one per --draft"
        )
    if gamma_max < 1:
        raise SpecmoeError(f"--gamma-max must be >= 1, got {gamma_max}")
    rows = []
    for batch in parse_counts(batches, "--batch"):
        t1 = target.time(batch, 1)
        candidates = []
        for draft, alpha in zip(drafts, alphas, strict=True):
            for gamma in range(1, gamma_max + 1):
                verify = target.time(batch, gamma + 1)
                draft_s = draft_step_s(draft, batch, gamma)
                candidates.append(
                    {
                        "draft": draft.label,
                        "alpha": alpha,
                        "gamma": gamma,
                        "speedup": sd_speedup(alpha, gamma, t1, verify, draft_s),
                        "efficiency": target_efficiency(t1, verify),
                        "extrapolated": target.extrapolated(batch, gamma + 1) or draft.extrapolated(batch, 2),
                    }
                )
        best = max(candidates, key=lambda c: c["speedup"])
        rows.append({"batch": batch, "target_1_s": t1, "best": best, "pays": best["speedup"] >= 1.0})
    return {"target": target.label, "fitted": getattr(target, "fitted", True), "rows": rows}


def advise_from_args(args) -> dict:
    fit = load_fit(args.fit)
    target = fit_times(fit, str(args.fit))
    drafts = [load_draft(path) for path in args.draft]
    alphas = [a for text in args.alpha for a in parse_fractions(text, "--alpha")]
    if len(alphas) == 1:
        alphas *= len(drafts)
    return advise(target, drafts, alphas, args.batch or fit["grid"]["batch"], args.gamma_max)
