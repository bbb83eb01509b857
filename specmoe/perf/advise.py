"""Pick a draft and a draft length γ per batch size, or say plainly that SD will not pay.

For each batch size B every (draft, γ) with γ = 1..γ_max (or γ from a given list) is scored by
the predicted speedup S(B, γ), each draft with its own acceptance α. The score is
`specmoe.perf.compose.expected_speedup`, the composition `model predict` prints and the check
against measured runs uses (docs/perf-model.md). The best wins; when even the best is below 1× the
advice is to decode without a draft at that batch size.
"""

from __future__ import annotations

from specmoe.errors import SpecmoeError
from specmoe.perf.compose import expected_speedup
from specmoe.perf.files import parse_counts, parse_fractions
from specmoe.perf.fit import load_fit
from specmoe.perf.predict import charged_draft, fit_times, load_draft
from specmoe.theory import target_efficiency


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
    if gamma_max < 1:
        raise SpecmoeError(f"--gamma-max must be >= 1, got {gamma_max}")
    candidates_gamma = list(gammas) if gammas else list(range(1, gamma_max + 1))
    rows = []
    for batch in parse_counts(batches, "--batch"):
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
    fit = load_fit(args.fit)
    target = fit_times(fit, str(args.fit))
    drafts = [load_draft(path) for path in args.draft]
    alphas = [a for text in args.alpha for a in parse_fractions(text, "--alpha")]
    if len(alphas) == 1:
        alphas *= len(drafts)
    return advise(target, drafts, alphas, args.batch or fit["grid"]["batch"], args.gamma_max)
