"""How tightly do the published rows pin each fitted engine constant? A profile over each one.

For every engine with scored rows in published.csv and every constant its priors mark for fitting,
the constant is held at each point of a grid over its fit range while the engine's other fitted
constants are refitted (`fit_engine`, from the priors, on all the engine's scored rows), and the sum
of squared log errors is recorded. The 95% profile interval is where n·ln(SS / SS_min) stays below
the χ²(1) 95% point, n the engine's row count: the likelihood-ratio interval under independent
Gaussian log errors. Rows of one sweep share a machine and a baseline, so the rows are not
independent and the intervals are too narrow; a constant whose interval spans its whole range is
not pinned by the rows at all.

    python benchmarks/constant_intervals.py      # markdown to stdout (about 15 minutes on 2 cores)
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import chi2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.perf.calibrate import Measurement, fit_engine, load_measurements, log_errors  # noqa: E402
from specmoe.perf.priors import Prior, fitted_keys, load_priors, value_of  # noqa: E402
from specmoe.perf.runtimes import EngineProfile, load_engines  # noqa: E402

DATA = ROOT / "docs" / "results" / "calibration" / "published.csv"
EXAMPLES = ROOT / "docs" / "perf-examples"
GRID = 9  # points over each fit range, besides the fitted value
LEVEL = 0.95


def sum_of_squares(profile: EngineProfile, rows: list[Measurement], by_id: dict[str, Measurement]) -> float:
    return sum(e * e for e in log_errors(profile, rows, by_id, EXAMPLES))


def interval(points: list[tuple[float, float]], limit: float) -> tuple[float, float, bool, bool]:
    """The range of grid values (sorted by value) whose SS is at most `limit`, widened by linear
    interpolation to where SS crosses it; and whether each end reaches the fit range's bound."""
    points = sorted(points)
    inside = [i for i, (_, ss) in enumerate(points) if ss <= limit]
    lo_i, hi_i = min(inside), max(inside)

    def cross(i: int, j: int) -> float:
        (x0, s0), (x1, s1) = points[i], points[j]
        return x0 + (x1 - x0) * (limit - s0) / (s1 - s0)

    low = points[0][0] if lo_i == 0 else cross(lo_i - 1, lo_i)
    high = points[-1][0] if hi_i == len(points) - 1 else cross(hi_i, hi_i + 1)
    return low, high, lo_i == 0, hi_i == len(points) - 1


def main() -> int:
    rows = load_measurements(DATA)
    by_id = {r.id: r for r in rows}
    engines, priors = load_engines(), load_priors()
    lines = [
        f"| engine | rows | constant | fitted | {LEVEL:.0%} profile interval | fit range | pinned |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in sorted({r.engine for r in rows if r.scored}):
        table = priors.get(name, {})
        keys = fitted_keys(table)
        mine = [r for r in rows if r.scored and r.engine == name]
        if not keys or not mine:
            continue
        best = fit_engine(engines[name], table, mine, by_id, EXAMPLES)
        ss_min = sum_of_squares(best, mine, by_id)
        limit = ss_min * math.exp(chi2.ppf(LEVEL, 1) / len(mine))
        for key in keys:
            span = table[key].fit
            points = [(value_of(best, key), ss_min)]
            for v in np.linspace(span.low, span.high, GRID):
                held: dict[str, Prior] = dict(table)
                held[key] = table[key].model_copy(update={"value": float(v), "fit": None})
                profile = fit_engine(engines[name], held, mine, by_id, EXAMPLES)
                points.append((float(v), sum_of_squares(profile, mine, by_id)))
            low, high, at_low, at_high = interval(points, limit)
            pinned = "no" if at_low and at_high else "one side only" if at_low or at_high else "yes"
            lines.append(
                f"| {name} | {len(mine)} | {key} | {value_of(best, key):.3g} | "
                f"{'≤' if at_low else ''}{low:.3g} – {'≥' if at_high else ''}{high:.3g} | "
                f"{span.low:g} – {span.high:g} | {pinned} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
