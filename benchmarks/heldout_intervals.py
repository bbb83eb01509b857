"""How sure the held-out accuracy is: 95% intervals that resample sources, not rows.

Reads the leave-one-source-out predictions in docs/results/calibration/calibration.json (nothing is
refitted: each row keeps the prediction its fold gave) and, for all scored rows, MoE rows and dense
rows, gives the median error factor of the held-out model, the bare roofline and the trivial rule
(c·τ where τ is reported, the anchor where it is not), and the model's median over each baseline's
on the same rows, each with a BCa bootstrap interval that resamples whole sources (9,999
resamples, seed 0; specmoe.stats.cluster_bootstrap). A source's rows share its authors' machine,
software and prompts, so they are one unit. Below 5 sources an interval is the range over single
sources and claims no level.

Fixed before it was run on the table: the issue's goals read against these intervals as "met"
or "missed" at the point estimate, and "cannot tell" wherever the interval holds the goal's
threshold (1.20 for all rows, 1.30 for MoE rows, a ratio of 0.90 to the best baseline). The
intervals leave out the refits' own variation and, with 12 sources, undercover: they are a
lower bound on the uncertainty.

    python benchmarks/heldout_intervals.py   # markdown to stdout
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.metrics import error_factor  # noqa: E402
from specmoe.stats import Estimate, cluster_bootstrap  # noqa: E402

DATA = ROOT / "docs" / "results" / "calibration" / "calibration.json"
RULES = ("held out", "roofline", "trivial")  # columns of the per-row table, in this order
GOALS = {"all scored rows": 1.20, "MoE targets": 1.30}
RATIO_GOAL = 0.90  # the model at least 10% below the best trivial baseline


def error_factors(row: dict) -> list[float]:
    """[model, roofline, trivial] error factors of one row."""
    return [error_factor(row[k], row["measured"]) for k in RULES]


def by_source(rows: list[dict]) -> list[np.ndarray]:
    """Each source's rows as a [rows, 3] array of error factors."""
    sources: dict[str, list[list[float]]] = {}
    for row in rows:
        sources.setdefault(row["source"], []).append(error_factors(row))
    return [np.asarray(v) for v in sources.values()]


def median_of(column: int) -> Callable[[np.ndarray], float]:
    return lambda a: float(np.median(a[:, column]))


def ratio_of(column: int) -> Callable[[np.ndarray], float]:
    return lambda a: float(np.median(a[:, 0]) / np.median(a[:, column]))


def reading(est: Estimate, goal: float) -> str:
    point = "met" if est.value <= goal else "missed"
    if est.level is None or est.low <= goal <= est.high:
        return f"{point} at the point; cannot tell (the interval holds {goal:.2f})"
    return f"{point}, and the interval excludes {goal:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    rows = [r for r in json.loads(args.data.read_text())["rows"] if r["held out"] is not None]
    groups = {
        "all scored rows": rows,
        "MoE targets": [r for r in rows if r["moe"]],
        "dense targets": [r for r in rows if not r["moe"]],
    }
    lines = [
        "| rows | n rows | n sources | model, held out | roofline | trivial "
        "| model ÷ roofline | model ÷ trivial |",
        "|---|---|---|---|---|---|---|---|",
    ]
    readings = []
    for label, group in groups.items():
        clusters = by_source(group)
        medians = [cluster_bootstrap(clusters, median_of(c)) for c in range(3)]
        ratios = [cluster_bootstrap(clusters, ratio_of(c)) for c in (1, 2)]
        cells = [e.format() for e in medians + ratios]
        lines.append(f"| {label} | {len(group)} | {len(clusters)} | " + " | ".join(cells) + " |")
        if label in GOALS:
            readings.append(f"- {label}, median ≤ {GOALS[label]:.2f}: {reading(medians[0], GOALS[label])}.")
            best = min((1, 2), key=lambda c: medians[c].value)
            name = RULES[best]
            readings.append(
                f"- {label}, ≥ 10% below the best baseline ({name}): {reading(ratios[best - 1], RATIO_GOAL)}."
            )
    print("\n".join([*lines, "", *readings]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
