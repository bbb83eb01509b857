"""A published row priced the way `advise --config` prices a user's question.

Target and drafter come from configs, with a hardware file and an engine profile
(`specmoe.perf.setup`), all named by the row and read from the catalog. A reported row is priced at
its own acceptance; an anchored row at the acceptance at which the model reproduces its sweep's
anchor (`anchor_alpha`). `log_errors` is what the fit minimises (`specmoe.calibration.fit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.rows import Measurement, Role
from specmoe.errors import SpecmoeError
from specmoe.metrics import error_factor
from specmoe.perf.breakeven import acceptance, breakeven_alpha
from specmoe.perf.drafts import DraftMethod
from specmoe.perf.engines import EngineProfile
from specmoe.perf.setup import SDSetup, StepForm, configured_setup, with_measured_step


def setup_for(
    row: Measurement, engine: EngineProfile, catalog: Catalog, measured_step: StepForm | None = None
) -> SDSetup:
    """The row's setup priced under `engine` (configs and hardware from `catalog`); with a
    `measured_step` form, given the plain step the row measured, where it has one
    (`with_measured_step`)."""
    method = DraftMethod.parse(row.method, row.id)
    draft = None
    if method is DraftMethod.MODEL:
        draft = catalog.config(row.draft, row.draft_dtype)
    setup = configured_setup(
        catalog.config(row.target, row.target_dtype),
        catalog.hardware(row.hardware),
        engine,
        method,
        draft,
        context=row.context,
        gamma_for_heads=row.gamma or 4,
        tree_tokens=row.verify_tokens,
        tree_width=row.tree_width,
    )
    if measured_step is not None and row.plain_step_s is not None:
        setup = with_measured_step(setup, row.batch, row.plain_step_s, measured_step)
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
    row: Measurement, engine: EngineProfile, catalog: Catalog, measured_step: StepForm | None = None
) -> Priced:
    """The row's predicted speedup: at its reported acceptance, or at its anchor's (the catalog's
    row of that id; `setup_for`'s `measured_step` for both)."""
    setup = setup_for(row, engine, catalog, measured_step)
    ceiling = False
    if row.role is Role.ANCHORED:
        anchor = catalog.anchor_of(row)
        if anchor is None:
            raise SpecmoeError(f"{row.id}: anchored to '{row.anchor}', which is not a row")
        alpha = anchor_alpha(anchor, engine, catalog, measured_step)
        ceiling = alpha is None
        alpha = 1.0 if alpha is None else alpha
    else:
        alpha = acceptance(row.acceptance, row.acceptance_kind, row.gamma, row.id).alpha
    speedup = setup.speedup(alpha, row.gamma, row.batch)
    return Priced(alpha, speedup, setup.speedup(1.0, row.gamma, row.batch), ceiling)


def anchor_alpha(
    anchor: Measurement, engine: EngineProfile, catalog: Catalog, measured_step: StepForm | None = None
) -> float | None:
    """The α at which the model reproduces the anchor's measured speedup; None when even α = 1
    stays below it (the sweep's rows are then priced at α = 1, the model's ceiling)."""
    setup = setup_for(anchor, engine, catalog, measured_step)
    return breakeven_alpha(lambda a: setup.speedup(a, anchor.gamma, anchor.batch) / anchor.speedup)


def log_errors(engine: EngineProfile, rows: list[Measurement], catalog: Catalog) -> list[float]:
    """ln(predicted ÷ measured) of each row under `engine`: what the fit's least squares minimise."""
    return [math.log(price(r, engine, catalog).predicted / r.speedup) for r in rows]
