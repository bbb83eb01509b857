"""Point estimates with 95% intervals, as every number in the report is shown.

The mean's interval is a percentile bootstrap over repeats with the same settings (confidence,
resamples, seed) as `specmoe.metrics.speedup_interval`, so tokens/s and speedup intervals in one
table are built the same way. With one repeat the interval is the point: one measurement says
nothing about its own spread, and the report shows it that way rather than inventing a width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    @property
    def has_width(self) -> bool:
        return self.high > self.low

    def format(self, digits: int = 2, suffix: str = "") -> str:
        point = f"{self.value:.{digits}f}{suffix}"
        if not self.has_width:
            return point
        return f"{point} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def mean_interval(
    values: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Interval:
    """Mean of `values` with a percentile-bootstrap interval; needs at least one value."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("mean_interval needs at least one value")
    point = float(data.mean())
    if data.size < 2:
        return Interval(point, point, point)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(resamples, data.size))].mean(axis=1)
    tail = (1 - confidence) / 2
    return Interval(point, float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail)))


def point(value: float) -> Interval:
    return Interval(value, value, value)
