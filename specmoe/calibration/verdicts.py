"""Verdicts from an asymmetric held-out band, beside the shipped rule: the test of change B of
docs/results/calibration/anchor-verdict-rules.md.

The band of a row is [p · q10, p · q90], q the 10th and 90th percentiles of measured ÷ predicted
over its engine's held-out rows from the *other* sources (at least `MIN_BAND_ROWS`; else the prior
1.5 both ways), p the row's predicted speedup; the verdict commits whenever the band does not
straddle 1× (`specmoe.perf.breakeven.band_verdict`). `verdict_check` reports how often each verdict
is given, by measured outcome, under the shipped rule and the candidate, and the held-out median
error, each for all, strict and design-time rows (`specmoe.calibration.split`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace

import numpy as np

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.heldout import (
    MIN_BAND_ROWS,
    PRIOR_BAND,
    Scored,
    contradictions,
    leave_one_source_out,
)
from specmoe.calibration.split import SPLITS, split_of
from specmoe.perf.breakeven import Verdict, band_verdict
from specmoe.perf.constants import Constant
from specmoe.perf.engines import EngineProfile

LOW, HIGH = 10, 90  # percentiles of measured ÷ predicted: an 80% central band
OUTCOMES = ("paid (≥ 1.10×)", "about even", "did not (< 0.95×)")


def ratio_band(held: list[Scored]) -> tuple[float, float]:
    """(q10, q90) of measured ÷ predicted over these estimates; the prior ×/÷ 1.5 when too few."""
    ratios = [s.row.speedup / s.predicted for s in held if s.predicted is not None]
    if len(ratios) < MIN_BAND_ROWS:
        return 1 / PRIOR_BAND, PRIOR_BAND
    return float(np.percentile(ratios, LOW)), float(np.percentile(ratios, HIGH))


def ratio_verdicts(held: list[Scored]) -> list[Scored]:
    """Each held-out estimate's verdict from the ratio band of its engine's other sources."""
    out = []
    for s in held:
        if s.predicted is None:
            out.append(s)
            continue
        others = [
            o
            for o in held
            if o.predicted is not None and o.row.engine == s.row.engine and o.row.source != s.row.source
        ]
        low, high = ratio_band(others)
        out.append(replace(s, verdict=band_verdict(s.priced.at_full, s.predicted, low, high)))
    return out


def outcome(measured: float) -> str:
    return OUTCOMES[0] if measured >= 1.10 else OUTCOMES[2] if measured < 0.95 else OUTCOMES[1]


def _groups(results: list[Scored]) -> list[tuple[str, list[Scored]]]:
    have = [s for s in results if s.predicted is not None]
    return [("all scored rows", have)] + [
        (name, [s for s in have if split_of(s.row) == name]) for name in SPLITS
    ]


def counts_table(by_rule: dict[str, list[Scored]]) -> list[str]:
    """Per rule and row group: how often each verdict is given, by measured outcome."""
    lines = [
        "| rule | rows | n | verdict | " + " | ".join(OUTCOMES) + " | all |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rule, results in by_rule.items():
        for label, group in _groups(results):
            counts = Counter((s.verdict, outcome(s.row.speedup)) for s in group)
            for v in Verdict:
                cells = [str(counts[(v, o)]) for o in OUTCOMES]
                total = sum(counts[(v, o)] for o in OUTCOMES)
                lines.append(
                    f"| {rule} | {label} | {len(group)} | {v.value} | " + " | ".join(cells) + f" | {total} |"
                )
    return lines


def summary_table(by_rule: dict[str, list[Scored]]) -> list[str]:
    """Per rule and row group: median error, committed verdicts and contradictions."""
    lines = [
        "| rule | rows | n | median error factor | GO | NO-GO | DEPENDS | committed | contradicting |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for rule, results in by_rule.items():
        for label, group in _groups(results):
            counts = Counter(s.verdict for s in group)
            committed = counts[Verdict.GO] + counts[Verdict.NO_GO]
            wrong = len(contradictions(group))
            median = statistics.median(s.error_factor for s in group) if group else float("nan")
            lines.append(
                f"| {rule} | {label} | {len(group)} | {median:.2f} | {counts[Verdict.GO]} | "
                f"{counts[Verdict.NO_GO]} | {counts[Verdict.DEPENDS]} | {committed} | {wrong} |"
            )
    return lines


def verdict_check(
    catalog: Catalog, engines: dict[str, EngineProfile], priors: dict[str, dict[str, Constant]]
) -> list[str]:
    """The test of change B: the shipped rule and the ratio band, held out, side by side."""
    shipped = leave_one_source_out(catalog, engines, priors)
    by_rule = {
        "shipped (×/÷ band, worst-shortfall NO-GO)": shipped,
        "ratio band (q10, q90)": ratio_verdicts(shipped),
    }
    lines = [*summary_table(by_rule), "", *counts_table(by_rule)]
    for rule, results in by_rule.items():
        misses = contradictions(results)
        lines += ["", f"Contradicting verdicts, {rule}: {len(misses)}"]
        lines += [
            f"- {s.row.id} ({split_of(s.row)}): {s.verdict.value}, predicted {s.predicted:.2f}×, "
            f"measured {s.row.speedup:.2f}×"
            for s in misses
        ]
    return lines
