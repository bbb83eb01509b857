"""Intervals as the report shows them: `specmoe.stats.Estimate`, which carries its level and n.

Every number the report shows with an interval comes from `specmoe.stats`: a mean's t-interval over
units, a speedup's ratio-estimator t-interval over paired units, and below five units the observed
range without a level. One value has no interval: one measurement says nothing about its own spread,
and the report shows it that way rather than inventing a width.
"""

from __future__ import annotations

from specmoe.stats import Estimate as Interval
from specmoe.stats import mean as mean_interval
from specmoe.stats import point

__all__ = ["Interval", "mean_interval", "point"]
