"""Published SD measurements priced from configs, and the engine constants fitted to them.

Every row of docs/results/calibration/published.csv is one measured speedup from a paper, a vendor
blog, a model card or an engine's documentation, with the setup it was measured in and a role:

    reported   the source reports the acceptance (τ, rate or α): the prediction uses it
    anchor     the smallest batch of a sweep that reports no acceptance: not scored; the acceptance
               at which the model reproduces it is used for the sweep's other rows
    anchored   another batch size of such a sweep, predicted at its anchor's acceptance; a reported
               row can anchor the rows of its sweep that report none (it is scored all the same)
    excluded   left out, with the reason in its note

A row is priced the way `advise --config` prices a user's question (`specmoe.perf.setup`): target
and drafter from configs, a hardware file and an engine profile. `fit_engine` refits the constants
the priors mark (`specmoe.perf.priors`) by least squares on log errors, always from the priors'
values; `specmoe.perf.heldout` uses it to hold out one source at a time.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from specmoe.errors import SpecmoeError
from specmoe.metrics import error_factor
from specmoe.perf.breakeven import AcceptanceKind, acceptance, breakeven_alpha
from specmoe.perf.drafts import DraftMethod
from specmoe.perf.firstprinciples import load_config
from specmoe.perf.hardware import load_hardware
from specmoe.perf.priors import Prior, fitted_keys, prior_profile, value_of, with_values
from specmoe.perf.runtimes import EngineProfile
from specmoe.perf.setup import SDSetup, configured_setup, with_measured_step

# The soft-L1 loss tried in docs/results/calibration/robust-fit-check.md (not shipped: the held-out
# median over all rows rose): a row beyond about 1.25x pulls the fit linearly, not quadratically.
ROBUST_SCALE = math.log(1.25)
_THROUGHPUTS = re.compile(r"[\d.]+ (?:vs|against) ([\d.]+) tok/s")  # with SD, then without


class Role(StrEnum):
    REPORTED = "reported"
    ANCHOR = "anchor"
    ANCHORED = "anchored"
    EXCLUDED = "excluded"


@dataclass(frozen=True)
class Measurement:
    """One published speedup and the setup it was measured in (one CSV row)."""

    id: str
    source: str  # one paper, blog post, model card or docs page: the unit held out
    where: str  # table or figure in it
    role: Role
    engine: str
    hardware: str
    target: str
    target_dtype: str | None
    method: str
    draft: str | None
    draft_dtype: str | None
    batch: int
    gamma: int | None
    verify_tokens: int | None
    tree_width: int
    acceptance_kind: AcceptanceKind | None
    acceptance: float | None
    anchor: str | None
    context: float
    speedup: float  # measured [×]
    note: str

    @property
    def scored(self) -> bool:
        return self.role in (Role.REPORTED, Role.ANCHORED)

    @property
    def plain_step_s(self) -> float | None:
        """The plain step the row measured, batch ÷ the output throughput without SD, where its note
        gives both throughputs as totals over the batch ("X vs Y tok/s" or "X against Y tok/s", with
        SD first); None otherwise. It includes prefill and idle time: an upper bound on the step."""
        match = _THROUGHPUTS.search(self.note)
        if match is None or "per GPU" in self.note:
            return None
        return self.batch / float(match.group(1))

    @property
    def tau(self) -> float | None:
        """The reported mean accepted length (bonus token included), or None."""
        if self.acceptance is None or self.acceptance_kind is None or self.gamma is None:
            return None
        return acceptance(self.acceptance, self.acceptance_kind, self.gamma, self.id).tau


def _int(text: str, default: int | None = None) -> int | None:
    return int(text) if text.strip() else default


def _parse(raw: dict, where: str) -> Measurement:
    try:
        return Measurement(
            id=raw["id"],
            source=raw["source"],
            where=raw["where"],
            role=Role(raw["role"]),
            engine=raw["engine"],
            hardware=raw["hardware"],
            target=raw["target"],
            target_dtype=raw["target_dtype"] or None,
            method=raw["method"],
            draft=raw["draft"] or None,
            draft_dtype=raw["draft_dtype"] or None,
            batch=_int(raw["batch"], 1),
            gamma=_int(raw["gamma"]),
            verify_tokens=_int(raw["verify_tokens"]),
            tree_width=_int(raw["tree_width"], 1),
            acceptance_kind=AcceptanceKind(raw["acceptance_kind"]) if raw["acceptance_kind"] else None,
            acceptance=float(raw["acceptance"]) if raw["acceptance"] else None,
            anchor=raw["anchor"] or None,
            context=float(raw["context"] or 512),
            speedup=float(raw["speedup"]),
            note=raw["note"],
        )
    except (KeyError, ValueError) as err:
        raise SpecmoeError(f"{where}: row '{raw.get('id', '?')}': {err}; see the header's columns") from None


def load_measurements(path: Path) -> list[Measurement]:
    with open(path, newline="", encoding="utf-8") as f:
        return [_parse(raw, str(path)) for raw in csv.DictReader(f)]


@cache
def _config(path: Path, dtype: str | None):
    return load_config(path, dtype)


@cache
def _hardware(path: Path):
    return load_hardware(path)


def is_moe(row: Measurement, examples: Path) -> bool:
    return _config(examples / f"{row.target}.json", row.target_dtype).is_moe


def setup_for(
    row: Measurement, engine: EngineProfile, examples: Path, measured_step: bool = False
) -> SDSetup:
    """The row's setup priced under `engine` (configs and hardware from `examples`); with
    `measured_step`, given the plain step the row measured, where it has one (`with_measured_step`)."""
    method = DraftMethod.parse(row.method, row.id)
    draft = None
    if method is DraftMethod.MODEL:
        draft = _config(examples / f"{row.draft}.json", row.draft_dtype)
    setup = configured_setup(
        _config(examples / f"{row.target}.json", row.target_dtype),
        _hardware(examples / f"{row.hardware}.json"),
        engine,
        method,
        draft,
        context=row.context,
        gamma_for_heads=row.gamma or 4,
        tree_tokens=row.verify_tokens,
        tree_width=row.tree_width,
    )
    if measured_step and row.plain_step_s is not None:
        setup = with_measured_step(setup, row.batch, row.plain_step_s)
    return setup


@dataclass(frozen=True)
class Priced:
    """One row's prediction under one profile."""

    alpha: float  # per-position acceptance used
    predicted: float  # [×]
    at_full: float  # the predicted speedup at α = 1 [×]
    at_ceiling: bool  # an anchored sweep the model cannot reach even at α = 1

    def error_factor(self, measured: float) -> float:
        return error_factor(self.predicted, measured)


def price(
    row: Measurement,
    engine: EngineProfile,
    anchor: Measurement | None,
    examples: Path,
    measured_step: bool = False,
) -> Priced:
    """The row's predicted speedup: at its reported acceptance, or at its anchor's (`setup_for`'s
    `measured_step` for both)."""
    setup = setup_for(row, engine, examples, measured_step)
    ceiling = False
    if row.role is Role.ANCHORED:
        if anchor is None:
            raise SpecmoeError(f"{row.id}: anchored to '{row.anchor}', which is not a row")
        alpha = anchor_alpha(anchor, engine, examples, measured_step)
        ceiling = alpha is None
        alpha = 1.0 if alpha is None else alpha
    else:
        alpha = acceptance(row.acceptance, row.acceptance_kind, row.gamma, row.id).alpha
    speedup = setup.speedup(alpha, row.gamma, row.batch)
    return Priced(alpha, speedup, setup.speedup(1.0, row.gamma, row.batch), ceiling)


def anchor_alpha(
    anchor: Measurement, engine: EngineProfile, examples: Path, measured_step: bool = False
) -> float | None:
    """The α at which the model reproduces the anchor's measured speedup; None when even α = 1
    stays below it (the sweep's rows are then priced at α = 1, the model's ceiling)."""
    setup = setup_for(anchor, engine, examples, measured_step)
    return breakeven_alpha(lambda a: setup.speedup(a, anchor.gamma, anchor.batch) / anchor.speedup)


def log_errors(
    engine: EngineProfile, rows: list[Measurement], by_id: dict[str, Measurement], examples: Path
) -> list[float]:
    """ln(predicted ÷ measured) of each row under `engine`: what the fit's least squares minimise."""
    return [
        math.log(price(r, engine, by_id.get(r.anchor or ""), examples).predicted / r.speedup) for r in rows
    ]


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
    priors: dict[str, Prior],
    rows: list[Measurement],
    by_id: dict[str, Measurement],
    examples: Path,
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
    profile, ss_min = _least_squares(base, priors, keys, rows, by_id, examples, rule.robust)
    if not rule.keep_priors:
        return profile
    kept = []
    for key in keys:
        others = tuple(k for k in keys if k != key)
        _, ss = _least_squares(base, priors, others, rows, by_id, examples, rule.robust)
        if len(rows) * math.log(ss / ss_min) < REJECT_PRIOR:
            kept.append(key)
    refit = tuple(k for k in keys if k not in kept)
    return _least_squares(base, priors, refit, rows, by_id, examples, rule.robust)[0] if kept else profile


def _least_squares(
    base: EngineProfile,
    priors: dict[str, Prior],
    keys: tuple[str, ...],
    rows: list[Measurement],
    by_id: dict[str, Measurement],
    examples: Path,
    robust: bool,
) -> tuple[EngineProfile, float]:
    """`base` with `keys` fitted (the others as `base` holds them), and its sum of squared log errors."""

    def residuals(theta) -> list[float]:
        return log_errors(with_values(base, dict(zip(keys, theta, strict=True))), rows, by_id, examples)

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
