"""Does a fit still describe this machine? A few of its points timed again, against what it says.

A fit is a snapshot: the same CPU stepped 20–35% faster two days after its llama.cpp models were
profiled (docs/perf-model.md), and a prediction from the older fit then missed one cell by 60%
while its speedups elsewhere, being ratios, hid the drift. Nothing in a fit says it has gone stale,
so `specmoe model check` times a handful of the fit's own grid points now (the profiler's timing,
one pass) and compares: measured ÷ fitted per point, their median, and a verdict.

The tolerance is the fit's own held-out error doubled, and never under `MIN_TOLERANCE`: a point
that the fit already missed by 5% when it was made is no sign of drift at 7%.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import UTC, datetime

from specmoe.errors import SpecmoeError
from specmoe.perf.fit import fit_error, fitted_model
from specmoe.perf.model import forward_time

MIN_TOLERANCE = 0.10  # |measured ÷ fitted − 1| below this is within a fit's own error
MODEL_FIELDS = ("is_moe", "num_experts", "top_k", "dtype", "bytes_dense", "bytes_experts")


@dataclass(frozen=True)
class PointCheck:
    batch: int
    tokens: int
    measured_s: float  # median of the timed passes now
    fitted_s: float  # the fit's T(B, t)

    @property
    def ratio(self) -> float:
        return self.measured_s / self.fitted_s


@dataclass(frozen=True)
class DriftCheck:
    points: tuple[PointCheck, ...]
    tolerance: float  # largest |ratio − 1| still called current
    profiled: str | None  # ISO time the fit's profile was measured, when known
    checked: str  # ISO time of this check

    @property
    def median_ratio(self) -> float:
        return statistics.median(p.ratio for p in self.points)

    @property
    def worst(self) -> PointCheck:
        return max(self.points, key=lambda p: abs(p.ratio - 1))

    @property
    def current(self) -> bool:
        return all(abs(p.ratio - 1) <= self.tolerance for p in self.points)

    @property
    def age_days(self) -> float | None:
        if not self.profiled:
            return None
        return (_when(self.checked) - _when(self.profiled)).total_seconds() / 86400


def _when(iso: str) -> datetime:
    when = datetime.fromisoformat(iso)
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def tolerance_of(fit: dict) -> float:
    """Twice the fit's median held-out error (its fitted points' where none was held out)."""
    return max(MIN_TOLERANCE, 2 * fit_error(fit))


def check_points(grid: dict) -> tuple[list[int], list[int]]:
    """The points to time again: the fit's smallest batch and the one nearest 4, at one token and
    at its largest token count up to 5 (a short draft's verify) — seconds, not a profile."""
    batches, tokens = sorted(grid["batch"]), sorted(grid["tokens"])
    near_four = min(batches, key=lambda b: (abs(b - 4), b))
    verify = max((t for t in tokens if t <= 5), default=tokens[0])
    return sorted({batches[0], near_four}), sorted({tokens[0], verify})


def same_model(fit_model: dict, profiled_model: dict) -> None:
    """Refuse to compare a fit with another model's times: name the field that differs."""
    for field in MODEL_FIELDS:
        if field in fit_model and field in profiled_model and fit_model[field] != profiled_model[field]:
            raise SpecmoeError(
                f"the fit is of another model: its {field} is {fit_model[field]!r}, this model's "
                f"{profiled_model[field]!r}; pass the model the fit was made from (and its --dtype)"
            )


def compare(fit: dict, profile: dict) -> DriftCheck:
    """Each profiled point against the fit's T(B, t) at the fit's context."""
    same_model(fit.get("model", {}), profile.get("model", {}))
    constants, shape = fitted_model(fit)
    context = float(fit.get("context", 0))
    points = tuple(
        PointCheck(
            int(p["batch"]),
            int(p["tokens"]),
            float(p["median_s"]),
            float(forward_time(constants, shape, p["batch"], p["tokens"], context)),
        )
        for p in sorted(profile["points"], key=lambda p: (p["batch"], p["tokens"]))
    )
    if not points:
        raise SpecmoeError("no point was timed; pass --batch and --tokens")
    return DriftCheck(
        points, tolerance_of(fit), fit.get("profiled") or fit.get("created"), profile["created"]
    )


def format_check(check: DriftCheck, fit_path: str) -> str:
    age = (
        "" if check.age_days is None else f", profiled {check.age_days:.1f} days ago ({check.profiled[:10]})"
    )
    lines = [f"{fit_path}{age}", "", "   B    t   measured     fitted   measured ÷ fitted"]
    for p in check.points:
        times = f"{p.measured_s * 1e3:8.2f} ms {p.fitted_s * 1e3:8.2f} ms"
        lines.append(f"{p.batch:4d} {p.tokens:4d} {times}   {p.ratio:.2f}")
    worst = check.worst
    if check.current:
        verdict = (
            f"CURRENT: every point within ±{check.tolerance:.0%} of the fit (median ratio "
            f"{check.median_ratio:.2f})"
        )
    else:
        direction = "faster" if check.median_ratio < 1 else "slower"
        verdict = (
            f"DRIFTED: this machine steps {abs(1 - check.median_ratio):.0%} {direction} than the fit says "
            f"(median ratio {check.median_ratio:.2f}; B={worst.batch}, t={worst.tokens} at "
            f"{worst.ratio:.2f}, tolerance ±{check.tolerance:.0%}); predictions from it carry that error: "
            "profile the model again (`specmoe profile`, then `specmoe model fit`)"
        )
    return "\n".join([*lines, "", verdict])
