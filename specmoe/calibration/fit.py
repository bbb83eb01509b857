"""The engine constants fitted to published rows, always from their priors.

`fit_engine` refits the constants an engine's priors mark (`fit` in `specmoe/perf/constants.toml`)
by least squares on the log errors of its rows, from the priors' values whatever the profile held;
`fit_all` does it for every engine with scored rows, on all of them: the values `calibrate fit`
writes. `specmoe.calibration.heldout` calls `fit_engine` once per source held out.

A key names a profile field (`round_s`) or one entry of a per-format table
(`compute_efficiency.default`); `value_of` and `with_values` read and set either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.pricing import log_errors
from specmoe.calibration.rows import Measurement
from specmoe.perf.constants import TABLES, Constant, fitted_keys
from specmoe.perf.engines import EngineProfile

# The soft-L1 loss tried in docs/results/calibration/robust-fit-check.md (not shipped: the held-out
# median over all rows rose): a row beyond about 1.25x pulls the fit linearly, not quadratically.
ROBUST_SCALE = math.log(1.25)


def value_of(profile: EngineProfile, key: str) -> float | None:
    """A profile's value for `key` (a field or "table.format"); None when a table lacks the entry."""
    field, _, entry = key.partition(".")
    if field in TABLES:
        return getattr(profile, field).get(entry)
    return getattr(profile, field)


def with_values(profile: EngineProfile, values: dict[str, float]) -> EngineProfile:
    """The profile with `values` (key -> number) set; table entries merge into their tables."""
    update: dict = {}
    for key, value in values.items():
        field, _, entry = key.partition(".")
        if field in TABLES:
            table = update.get(field, dict(getattr(profile, field)))
            update[field] = {**table, entry: float(value)}
        else:
            update[field] = float(value)
    return profile.model_copy(update=update)


def prior_profile(profile: EngineProfile, priors: dict[str, Constant]) -> EngineProfile:
    """The profile as the priors set it: every fitted constant back at its starting value."""
    return with_values(profile, {key: prior.value for key, prior in priors.items()})


@dataclass(frozen=True)
class FitRule:
    """How `fit_engine` fits. The defaults are the shipped fit; each option is a change tested
    under a rule fixed beforehand (docs/results/calibration/*-rules.md)."""

    robust: bool = False  # soft-L1 loss, scale ln 1.25: tried, not shipped (robust-fit-check.md)
    keep_priors: bool = False  # keep a prior the rows do not reject: not shipped (prior-retention-check.md)


SHIPPED_FIT = FitRule()

# χ²(1) at 95%: a prior is rejected when holding it raises n·ln(SS) by more than this.
REJECT_PRIOR = 3.84


def fit_engine(
    start: EngineProfile,
    priors: dict[str, Constant],
    rows: list[Measurement],
    catalog: Catalog,
    rule: FitRule = SHIPPED_FIT,
) -> EngineProfile:
    """The constants `priors` marks for fitting, least squares on the log errors of `rows` (all of
    this engine), started from the priors' values whatever `start` holds. No rows: the priors.
    `rule.keep_priors`: each constant whose prior the rows do not reject (likelihood ratio, held at
    its prior with the others refitted) keeps it; the rest are refitted once more."""
    base = prior_profile(start, priors)
    keys = fitted_keys(priors)
    if not rows or not keys:
        return base
    profile, ss_min = _least_squares(base, priors, keys, rows, catalog, rule.robust)
    if not rule.keep_priors:
        return profile
    kept = []
    for key in keys:
        others = tuple(k for k in keys if k != key)
        _, ss = _least_squares(base, priors, others, rows, catalog, rule.robust)
        if len(rows) * math.log(ss / ss_min) < REJECT_PRIOR:
            kept.append(key)
    refit = tuple(k for k in keys if k not in kept)
    return _least_squares(base, priors, refit, rows, catalog, rule.robust)[0] if kept else profile


def _least_squares(
    base: EngineProfile,
    priors: dict[str, Constant],
    keys: tuple[str, ...],
    rows: list[Measurement],
    catalog: Catalog,
    robust: bool,
) -> tuple[EngineProfile, float]:
    """`base` with `keys` fitted (the others as `base` holds them), and its sum of squared log errors."""

    def residuals(theta) -> list[float]:
        return log_errors(with_values(base, dict(zip(keys, theta, strict=True))), rows, catalog)

    if not keys:
        return base, float(np.sum(np.square(residuals([]))))
    ranges = [priors[k].fit for k in keys]
    low = np.array([r.low for r in ranges])
    high = np.array([r.high for r in ranges])
    x0 = np.array([value_of(base, k) for k in keys])
    loss = {"loss": "soft_l1", "f_scale": ROBUST_SCALE} if robust else {}
    result = least_squares(residuals, x0, bounds=(low, high), x_scale=[r.scale for r in ranges], **loss)
    fitted = with_values(base, dict(zip(keys, result.x, strict=True)))
    return fitted, float(np.sum(np.square(residuals(result.x))))


def fit_all(
    catalog: Catalog,
    engines: dict[str, EngineProfile],
    priors: dict[str, dict[str, Constant]],
    rule: FitRule = SHIPPED_FIT,
) -> dict[str, EngineProfile]:
    """Each engine with scored rows refitted on all of them, from its priors: the shipped values."""
    fitted = dict(engines)
    for name in sorted({r.engine for r in catalog.scored}):
        mine = [r for r in catalog.scored if r.engine == name]
        fitted[name] = fit_engine(engines[name], priors.get(name, {}), mine, catalog, rule)
    return fitted
