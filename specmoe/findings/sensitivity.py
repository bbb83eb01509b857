"""Every verdict under the reasonable variants of its rule: a verdict that moves is printed as
depending on the named choice.

Variants, each changing one choice of the rule and nothing else:

    interval level   90% or 99% instead of 95%: each cell's t-interval rescaled by the ratio of the
                     t quantiles (the ratio estimator's interval is symmetric about its value);
                     cells below five units keep their range and still decide nothing
    unstable cells   counted: cells whose repeats disagree beyond the CV limit decide like others
    regime gate      no gate at all ((b)'s dense-amortisation gate and (d)'s MoE gates dropped), or
                     (d) with the bandwidth gate alone (`regime.GATES`)
    medium batch     (e) with "medium" as B ∈ {16, 64} or B ∈ {4, 16, 64} instead of the interior
                     {4, 16} of the sweep's {1, 4, 16, 64}
    (b)'s evidence   judged as rules v1 did, on speedup pairs that the draft's relative cost decides
                     (`claims.b_by_speedup`), instead of on the verify amortisation it names
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from scipy import stats

from specmoe.findings.batch_claims import claim_e, claim_f, interior
from specmoe.findings.cells import Cell
from specmoe.findings.claims import (
    B_EVIDENCE,
    B_EVIDENCES,
    CLAIM_KEYS,
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


def _verdicts(
    inputs: Inputs,
    cells: Callable[[Cell], Cell] = lambda c: c,
    gates: str = RULE_GATES,
    medium_of=interior,
    b_evidence: str = B_EVIDENCE,
) -> dict[str, str]:
    study = [cells(c) for c in inputs.study]
    family = [cells(c) for c in inputs.family]
    moesd = [cells(c) for c in inputs.moesd]
    regime = inputs.regimes[gates]
    amortisation = regime if gates == GATES[0] else inputs.amortisation  # "no gate" drops (b)'s too
    return {
        "a": claim_a(study).verdict,
        "b": claim_b(study, inputs.sizes, amortisation, regime, b_evidence).verdict,
        "c": claim_c(study, family).verdict,
        "d": claim_d(study, family, regime).verdict,
        "e": claim_e(moesd, inputs.predict, medium_of).verdict,
        "f": claim_f(moesd, inputs.predict).verdict,
    }


VARIANTS: dict[str, dict] = {
    "90% intervals": {"cells": lambda c: at_level(c, 0.90)},
    "99% intervals": {"cells": lambda c: at_level(c, 0.99)},
    "unstable cells counted": {"cells": counted},
    **{gate: {"gates": gate} for gate in GATES if gate != RULE_GATES},
    "medium B ∈ {16, 64}": {"medium_of": lambda batches: [b for b in batches if b >= 16]},
    "medium B ∈ {4, 16, 64}": {"medium_of": lambda batches: batches[1:]},
    "(b) on speedup pairs (rules v1)": {"b_evidence": B_EVIDENCES[1]},
}


def sensitivity_table(inputs: Inputs) -> tuple[str, dict[str, list[str]]]:
    """The markdown table (one row per claim, the rule first, then each variant) and, per claim,
    the variants under which its verdict moves."""
    rule = _verdicts(inputs)
    by_variant = {name: _verdicts(inputs, **kwargs) for name, kwargs in VARIANTS.items()}
    lines = [
        "| claim | the rule | " + " | ".join(VARIANTS) + " | depends on |",
        "|---" * (len(VARIANTS) + 3) + "|",
    ]
    moved: dict[str, list[str]] = {}
    for key in CLAIM_KEYS:
        moved[key] = [name for name, found in by_variant.items() if found[key] != rule[key]]
        shown = [found[key] if found[key] != rule[key] else "=" for found in by_variant.values()]
        depends = ", ".join(moved[key]) or "nothing: stable"
        lines.append(f"| {CLAIM_TITLES[key]} | {rule[key]} | " + " | ".join(shown) + f" | {depends} |")
    return "\n".join(lines), moved
