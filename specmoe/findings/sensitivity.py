"""Every verdict under the reasonable variants of its rule: a verdict that moves is printed as
depending on the named choice.

Variants, each changing one choice of the rule and nothing else:

    interval level   90% or 99% instead of 95%: each cell's t-interval rescaled by the ratio of the
                     t quantiles (the ratio estimator's interval is symmetric about its value);
                     cells below five units keep their range and still decide nothing
    unstable cells   counted: cells whose repeats disagree beyond the CV limit decide like others
    regime gate      no gate at all ((b)'s dense-amortisation gate and (d)'s MoE gates dropped), or
                     (d) with the bandwidth gate alone (`regime.GATES`)
    medium batch     (e) with "medium" as B ≥ 16, or every B but the smallest, instead of the
                     interior of the sweep's batch sizes ({4, 16} of the bench sweep's {1, 4, 16, 64},
                     2-32 of the moesd-wide sweep's 1-64)
    (b)'s evidence   judged as rules v1 did, on speedup pairs that the draft's relative cost decides
                     (`claims.b_by_speedup`), instead of on the verify amortisation it names
    (e)'s U          each pass's (e) under the other pass's rule for an inverted U: the bench pass's
                     "neighbours" (the peak clears its neighbours and both ends) or the moesd-wide
                     pass's "rise and fall" (`specmoe.findings.wide`)
    (e)'s dense      the moesd-wide pass's (e) against the dense model of total size instead of the
                     one of active size
    (f)'s range      the moesd-wide pass's (f) by the largest paying batch size instead of the count

The moesd-wide pass's gates map onto the columns as "no gate" and "bandwidth gate" (its batch-1
steps within the bench pass's bound of the probe's floor) against its own read-share gate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from scipy import stats

from specmoe.findings import wide as wide_rules
from specmoe.findings.batch_claims import claim_e, claim_f, interior, u_shape
from specmoe.findings.cells import Cell
from specmoe.findings.claims import (
    B_EVIDENCE,
    B_EVIDENCES,
    CLAIM_TITLES,
    claim_a,
    claim_b,
    claim_c,
    claim_d,
)
from specmoe.findings.regime import GATES, RULE_GATES, Regime


def at_level(cell: Cell, level: float) -> Cell:
    """The cell with its interval at another level (unchanged without one)."""
    if cell.level is None:
        return cell
    dof = cell.repeats - 1
    scale = stats.t.ppf(0.5 + level / 2, dof) / stats.t.ppf(0.5 + cell.level / 2, dof)
    half = (cell.high - cell.low) / 2 * scale
    middle = (cell.high + cell.low) / 2
    return replace(cell, low=middle - half, high=middle + half, level=level)


def counted(cell: Cell) -> Cell:
    return replace(cell, unstable=False)


@dataclass(frozen=True)
class Inputs:
    study: Sequence[Cell]
    family: Sequence[Cell]
    moesd: Sequence[Cell]
    sizes: dict[str, tuple[int, int]]
    regimes: dict[str, Regime]  # gate name -> the transformers engine's MoE regime under it
    amortisation: Regime  # (b)'s gate: whether the engine amortises a dense model's verify
    predict: Callable


@dataclass(frozen=True)
class WideInputs:
    """The moesd-wide pass's cells and its regime under each of its gates (`wide.GATES`)."""

    cells: Sequence[Cell]
    regimes: dict[str, Regime]


# The bench pass's gate columns, as the moesd-wide pass reads them.
_WIDE_GATE = {"no gate": "no gate", "bandwidth gate": "bandwidth gate"}


def _verdicts(
    inputs: Inputs,
    wide: WideInputs | None,
    cells: Callable[[Cell], Cell] = lambda c: c,
    gates: str = RULE_GATES,
    medium_of=interior,
    b_evidence: str = B_EVIDENCE,
    other_u: bool = False,
    wide_dense: str = wide_rules.DENSE,
    wide_f: str = wide_rules.WIDE["f_rule"],
) -> dict[str, str]:
    study = [cells(c) for c in inputs.study]
    family = [cells(c) for c in inputs.family]
    moesd = [cells(c) for c in inputs.moesd]
    regime = inputs.regimes[gates]
    amortisation = regime if gates == GATES[0] else inputs.amortisation  # "no gate" drops (b)'s too
    found = {
        "a": claim_a(study).verdict,
        "b": claim_b(study, inputs.sizes, amortisation, regime, b_evidence).verdict,
        "c": claim_c(study, family).verdict,
        "d": claim_d(study, family, regime).verdict,
        "e": claim_e(
            moesd, inputs.predict, medium_of, wide_rules.rise_and_fall if other_u else u_shape
        ).verdict,
        "f": claim_f(moesd, inputs.predict).verdict,
    }
    if wide is not None:
        items = [cells(c) for c in wide.cells]
        wide_regime = wide.regimes[_WIDE_GATE.get(gates, wide_rules.WIDE["gate"])]
        u_rule = wide_rules.WIDE["u_rule"]
        if other_u:
            u_rule = next(r for r in wide_rules.U_RULES if r != u_rule)
        found["wide_e"] = wide_rules.claim_e_wide(items, wide_regime, u_rule, wide_dense, medium_of).verdict
        found["wide_f"] = wide_rules.claim_f_wide(items, wide_regime, wide_f).verdict
    return found


VARIANTS: dict[str, dict] = {
    "90% intervals": {"cells": lambda c: at_level(c, 0.90)},
    "99% intervals": {"cells": lambda c: at_level(c, 0.99)},
    "unstable cells counted": {"cells": counted},
    **{gate: {"gates": gate} for gate in GATES if gate != RULE_GATES},
    "medium B ≥ 16": {"medium_of": lambda batches: [b for b in batches if b >= 16]},
    "medium: every B but the smallest": {"medium_of": lambda batches: batches[1:]},
    "(b) on speedup pairs (rules v1)": {"b_evidence": B_EVIDENCES[1]},
    "(e)'s other U rule": {"other_u": True},
    "(e) against the dense model of total size": {"wide_dense": wide_rules.TOTAL},
    "(f) by the largest paying B": {"wide_f": "upper end"},
}
WIDE_TITLES = {
    "wide_e": "(e) on the wide-sparsity zoo (moesd-wide)",
    "wide_f": "(f) on the wide-sparsity zoo (moesd-wide)",
}


def sensitivity_table(inputs: Inputs, wide: WideInputs | None = None) -> tuple[str, dict[str, list[str]]]:
    """The markdown table (one row per claim and pass, the rule first, then each variant) and, per
    row, the variants under which its verdict moves."""
    rule = _verdicts(inputs, wide)
    by_variant = {name: _verdicts(inputs, wide, **kwargs) for name, kwargs in VARIANTS.items()}
    lines = [
        "| claim | the rule | " + " | ".join(VARIANTS) + " | depends on |",
        "|---" * (len(VARIANTS) + 3) + "|",
    ]
    moved: dict[str, list[str]] = {}
    titles = {**CLAIM_TITLES, **(WIDE_TITLES if wide is not None else {})}
    for key, title in titles.items():
        moved[key] = [name for name, found in by_variant.items() if found[key] != rule[key]]
        shown = [found[key] if found[key] != rule[key] else "=" for found in by_variant.values()]
        depends = ", ".join(moved[key]) or "nothing: stable"
        lines.append(f"| {title} | {rule[key]} | " + " | ".join(shown) + f" | {depends} |")
    return "\n".join(lines), moved
