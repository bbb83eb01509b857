"""Does a change to the engine fit help? The tests of docs/results/calibration/*-rules.md.

Every scored row is predicted held out by source (`leave_one_source_out`) and in sample
(`fit_all`) twice: with the shipped fit (plain least squares on log errors) and with the variant
(`FitRule`). Verdicts held out use the shipped worst-case rule. The trivial rule (c·τ or the anchor)
is shown beside them. soft-L1 takes about 10 minutes on 2 cores, keep-priors about 30.
"""

from __future__ import annotations

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.fit import SHIPPED_FIT, FitRule, fit_all
from specmoe.calibration.heldout import (
    Scored,
    contradictions,
    in_sample,
    leave_one_source_out,
    summary,
    trivial,
)
from specmoe.perf.constants import Constant
from specmoe.perf.engines import EngineProfile

VARIANTS = {"soft-L1": FitRule(robust=True), "keep-priors": FitRule(keep_priors=True)}


def _errors(results: list[Scored]) -> str:
    s = summary(results)
    return f"{s['median_error_factor']:.2f} / {s['p80_error_factor']:.2f} / {s['worst_error_factor']:.2f}"


def _right(results: list[Scored]) -> str:
    s = summary(results)
    return f"{s['go_no_go_agree']} of {s['go_no_go_decided']}"


def kept_priors(held: dict[str, Scored], priors: dict) -> list[str]:
    """Per engine and held-out source, the fitted constants that sit exactly at their prior."""
    lines = ["| engine | source held out | constants at their prior |", "|---|---|---|"]
    seen = set()
    for s in held.values():
        if s.predicted is None or (s.row.engine, s.row.source) in seen:
            continue
        seen.add((s.row.engine, s.row.source))
        at_prior = [k for k, v in s.constants.items() if v == priors[s.row.engine][k].value]
        lines.append(f"| {s.row.engine} | {s.row.source} | {', '.join(at_prior) or '–'} |")
    return lines


def variant_check(
    catalog: Catalog,
    engines: dict[str, EngineProfile],
    priors: dict[str, dict[str, Constant]],
    variant: str,
) -> list[str]:
    """The shipped fit and `variant` (a key of `VARIANTS`) side by side, held out and in sample."""
    base = "squares" if variant == "soft-L1" else "all fitted"
    rules = {base: SHIPPED_FIT, variant: VARIANTS[variant]}
    held, fitted = {}, {}
    for name, rule in rules.items():
        held[name] = {s.row.id: s for s in leave_one_source_out(catalog, engines, priors, rule)}
        profiles = fit_all(catalog, engines, priors, rule)
        fitted[name] = {s.row.id: s for s in in_sample(catalog, profiles)}
    easy = {s.row.id: s for s in trivial(list(catalog.rows))}
    chosen = [r for r in catalog.scored if held[base][r.id].predicted is not None]

    lines = [
        f"| rows | n | held out, {base} (median / p80 / worst) | held out, {variant} | trivial "
        f"| in sample, {base} | in sample, {variant} | go/no-go right held out: {base} | {variant} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups = [
        ("all scored rows", chosen),
        ("  MoE targets", [r for r in chosen if catalog.is_moe(r)]),
        ("  dense targets", [r for r in chosen if not catalog.is_moe(r)]),
    ]
    groups += [(f"  {e}", [r for r in chosen if r.engine == e]) for e in sorted({r.engine for r in chosen})]
    groups += [
        (f"  source: {s}", [r for r in chosen if r.source == s]) for s in sorted({r.source for r in chosen})
    ]
    for label, group in groups:
        cells = [_errors([rule[r.id] for r in group]) for rule in (held[base], held[variant], easy)]
        cells += [_errors([fitted[n][r.id] for r in group]) for n in rules]
        cells += [_right([held[n][r.id] for r in group]) for n in rules]
        lines.append(f"| {label} | {len(group)} | " + " | ".join(cells) + " |")
    for name in rules:
        misses = contradictions([held[name][r.id] for r in chosen])
        lines += ["", f"Held-out verdicts that contradict the measurement, {name}: {len(misses)}"]
        lines += [
            f"- {s.row.id}: {s.verdict.value}, predicted {s.predicted:.2f}×, measured {s.row.speedup:.2f}×"
            for s in misses
        ]
    if VARIANTS[variant].keep_priors:
        lines += ["", f"Constants left at their prior, {variant}, in each fold:", ""]
        lines += kept_priors(held[variant], priors)
    lines += ["", f"| row | engine | B | measured | held out, {base} | held out, {variant} | trivial |"]
    lines.append("|---|---|---|---|---|---|---|")
    for r in chosen:
        a, b = held[base][r.id].predicted, held[variant][r.id].predicted
        t = easy[r.id].predicted
        lines.append(
            f"| {r.id} | {r.engine} | {r.batch} | {r.speedup:.2f} | {a:.2f} | {b:.2f} "
            f"| {'–' if t is None else f'{t:.2f}'} |"
        )
    return lines
