"""Point estimates with honest intervals: every interval carries its level and its n.

The sampling unit is a *paired unit*: one prompt batch in one repeat, measured by both arms back to
back (see docs/suites.md). A result generalises over the prompts its units cover: a cell measured on
one prompt batch however often repeated speaks for that batch only, which is why suites measure every
prompt of their set by default.

Why a t-interval and not the bootstrap. A ratio of means from n paired units has the textbook
ratio-estimator variance (delta method): with R = mean(x) / mean(y) and residuals d_i = x_i − R y_i,
SE(R) = sd(d) / (√n · mean(y)). Taking Student's t with n − 1 degrees of freedom for the quantile keeps
coverage near nominal at the small n benchmarks have. Simulated with a known true speedup
(tests/test_stats.py; prompt-to-prompt spread 10% in baseline speed and 15% in speedup, 3% timing
noise), 95% intervals covered the truth in 94.3% of 1,000 trials at n = 10 and 93.7% at n = 5, where
scipy's paired BCa bootstrap covered 90.6% at n = 10 and the percentile bootstrap 90.8%: resampling
10 values cannot see the tails it has not drawn.

A statistic pooled over clusters of correlated values (the median error over the rows of a few
sources) has no such textbook interval; `cluster_bootstrap` resamples whole clusters for it.

Below MIN_UNITS units no level is claimed: the estimate shows the observed range of the per-unit
values and says so ("range, n=2"), never "95%".
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95
MIN_UNITS = 5  # fewer units than this: a range, never a confidence interval


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its interval. `level` is None when the interval is only the observed
    range of the units (fewer than MIN_UNITS of them), so nobody reads it as a confidence interval."""

    value: float
    low: float
    high: float
    n: int  # paired units (or values) behind the estimate
    level: float | None = None

    @property
    def has_width(self) -> bool:
        return self.high > self.low

    @property
    def label(self) -> str:
        """ "95% CI, n=12" or "range, n=2" (or "n=1")."""
        if self.level is not None:
            return f"{self.level:.0%} CI, n={self.n}"
        return f"range, n={self.n}" if self.n > 1 else f"n={self.n}"

    def scaled(self, factor: float) -> Estimate:
        """The same estimate in other units (seconds to milliseconds: 1000); level and n unchanged."""
        return Estimate(self.value * factor, self.low * factor, self.high * factor, self.n, self.level)

    def format(self, digits: int = 2, suffix: str = "") -> str:
        """ "1.23x [1.10, 1.35] (95% CI, n=12)"; a point alone with its n when the interval is empty."""
        point = f"{self.value:.{digits}f}{suffix}"
        if not self.has_width:
            return f"{point} ({self.label})"
        return f"{point} [{self.low:.{digits}f}, {self.high:.{digits}f}] ({self.label})"


def point(value: float, n: int = 1) -> Estimate:
    return Estimate(value, value, value, n, None)


def ratio_of_means(
    numerator: Sequence[float], denominator: Sequence[float], level: float = LEVEL
) -> Estimate:
    """mean(numerator) / mean(denominator) over paired units, with the ratio estimator's t-interval.

    Units are paired by index: unit i's numerator and denominator were measured together, so drift
    shared by both cancels in the residuals. With fewer than MIN_UNITS units the interval is the
    range of the per-unit ratios and carries no level.
    """
    x = np.asarray(numerator, dtype=float)  # [n]
    y = np.asarray(denominator, dtype=float)  # [n]
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"ratio_of_means needs paired, non-empty values; got {x.size} and {y.size}")
    value = float(x.mean() / y.mean())
    n = int(x.size)
    if n < MIN_UNITS:
        ratios = x / y
        return Estimate(value, float(ratios.min()), float(ratios.max()), n, None)
    residuals = x - value * y
    se = float(residuals.std(ddof=1) / (math.sqrt(n) * y.mean()))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return Estimate(value, value - half, value + half, n, level)


def mean(values: Sequence[float], level: float = LEVEL) -> Estimate:
    """The mean with Student's t-interval; the range of the values below MIN_UNITS of them."""
    data = np.asarray(values, dtype=float)  # [n]
    if data.size == 0:
        raise ValueError("mean needs at least one value")
    value = float(data.mean())
    n = int(data.size)
    if n < MIN_UNITS:
        return Estimate(value, float(data.min()), float(data.max()), n, None)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * data.std(ddof=1) / math.sqrt(n))
    return Estimate(value, value - half, value + half, n, level)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation over mean; 0 for fewer than two values (pyperf's stability measure)."""
    data = np.asarray(values, dtype=float)
    if data.size < 2:
        return 0.0
    return float(data.std(ddof=1) / data.mean())


def cluster_bootstrap(
    clusters: Sequence[Sequence[float]],
    statistic: Callable[[np.ndarray], float],
    level: float = LEVEL,
    resamples: int = 9999,
    seed: int = 0,
    method: str = "BCa",
) -> Estimate:
    """statistic(the pooled values of every cluster) with a BCa bootstrap interval (or `method`
    "percentile") that resamples whole clusters, for values that are not independent within a
    cluster (the rows of one source).

    `clusters[i]` holds one cluster's rows: [rows] scalars, or [rows, k] numbers that must stay
    paired (two rules' errors on the same row); `statistic` gets the pooled [rows, k] array (k = 1
    for scalars). n is the number of clusters; below MIN_UNITS the interval is the range of the
    statistic over single clusters and carries no level. Where BCa is undefined (every resample
    gives the same value) the interval is the resamples' percentiles. With few clusters the
    bootstrap undercovers (the module docstring's simulation): read the interval as a lower bound
    on the uncertainty.
    """
    groups = [np.atleast_2d(np.asarray(c, dtype=float).T).T for c in clusters]  # each [rows, k]
    if not groups or any(g.size == 0 for g in groups):
        raise ValueError("cluster_bootstrap needs at least one cluster, none of them empty")
    value = float(statistic(np.concatenate(groups)))
    n = len(groups)
    if n < MIN_UNITS:
        singles = [float(statistic(g)) for g in groups]
        return Estimate(value, min(singles), max(singles), n, None)

    def pooled(index: np.ndarray) -> float:
        return float(statistic(np.concatenate([groups[int(i)] for i in index])))

    with warnings.catch_warnings():
        # a degenerate resample distribution is expected (a statistic of constant columns)
        warnings.simplefilter("ignore", (stats.DegenerateDataWarning, RuntimeWarning))
        result = stats.bootstrap(
            (np.arange(n),),
            pooled,
            vectorized=False,
            confidence_level=level,
            n_resamples=resamples,
            method=method,
            rng=np.random.default_rng(seed),
        )
    low, high = result.confidence_interval
    if not (math.isfinite(low) and math.isfinite(high)):
        tail = (1 - level) / 2
        low, high = np.quantile(result.bootstrap_distribution, [tail, 1 - tail])
    return Estimate(value, float(low), float(high), n, level)
