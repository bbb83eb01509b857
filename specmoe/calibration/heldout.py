"""Leave-one-source-out: each source's rows predicted from constants refitted without it, and the
trivial rules a referee would try first, scored on the same rows.

The unit held out is a source (one paper, blog post, model card or docs page), not a table: a
paper's tables share its authors' machine, software and prompts. For each engine and each source
among its rows, the engine's refitted constants (`specmoe.calibration.fit`) are fitted from the priors'
values on the engine's rows from every *other* source, and the source's rows are priced with them.
An engine whose rows all come from one source has nothing to fit on: its rows get no held-out
estimate and are not scored here (they are not scored in sample in their place either).

Baselines, none of which sees the held-out source:

    roofline   the hardware alone (no engine profile: shares of 1, no fixed costs, a hard roofline)
    c·τ        rows with a reported acceptance: the speedup is c times the mean accepted length τ,
               c the geometric mean of measured ÷ τ over the reported rows of the other sources
    anchor     anchored rows: the sweep's anchor speedup, held constant over batch size
    trivial    c·τ where τ is reported, the anchor where it is not: one rule for every row
    always GO  for verdicts: SD pays everywhere

A verdict held out uses the band the other sources' held-out errors give (their 80th percentile
error factor, with at least `MIN_BAND_ROWS` of them; else the priors' 1.5).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.fit import SHIPPED_FIT, FitRule, fit_engine, value_of
from specmoe.calibration.pricing import Priced, price
from specmoe.calibration.rows import Measurement, Role
from specmoe.metrics import error_factor
from specmoe.perf.breakeven import Verdict, verdict
from specmoe.perf.constants import Constant, fitted_keys
from specmoe.perf.engines import EngineProfile

BAND_PERCENTILE = 80
MIN_BAND_ROWS = 5  # fewer held-out errors than this say too little about a tail
PRIOR_BAND = 1.5
DECIDED = (0.95, 1.05)  # measured inside: even, no go/no-go to get right


@dataclass(frozen=True)
class Scored:
    """One scored row under one rule. `predicted` None: that rule has no estimate for the row."""

    row: Measurement
    rule: str
    predicted: float | None
    verdict: Verdict | None = None
    priced: Priced | None = None  # the model's pricing (None for the trivial rules)
    constants: dict[str, float] = field(default_factory=dict)  # refitted without the row's source

    @property
    def at_ceiling(self) -> bool:
        return self.priced is not None and self.priced.at_ceiling

    @property
    def error_factor(self) -> float | None:
        if self.predicted is None:
            return None
        return error_factor(self.predicted, self.row.speedup)


def band_of(errors: list[float]) -> float | None:
    """The ×/÷ factor that covers `BAND_PERCENTILE`% of these error factors; None when too few."""
    if len(errors) < MIN_BAND_ROWS:
        return None
    return float(np.percentile(errors, BAND_PERCENTILE))


def shortfall_of(held: list[Scored]) -> float | None:
    """The largest factor by which these estimates fell short of the measurement (measured ÷
    predicted); None when too few to say (the band stands in)."""
    have = [s for s in held if s.predicted is not None]
    if len(have) < MIN_BAND_ROWS:
        return None
    return max(1.0, max(s.row.speedup / s.predicted for s in have))


def call(priced: Priced, band: float, shortfall: float | None = None) -> Verdict:
    """advise's verdict for a priced row at its acceptance with ×/÷ `band` and the shortfall a
    NO-GO must survive (`breakeven.verdict`; None: the band, the rule as first fixed)."""
    return verdict(priced.at_full, priced.predicted, band, shortfall or band)


def in_sample(
    catalog: Catalog,
    engines: dict[str, EngineProfile],
    rule: str = "in sample",
    worst_case: bool = True,
) -> list[Scored]:
    """Every scored row priced under `engines` as given (the shipped, fitted profiles); without
    `worst_case`, verdicts by the rule as first fixed (NO-GO at the band's optimistic end)."""
    out = []
    for row in catalog.rows:
        if row.scored:
            engine = engines[row.engine]
            priced = price(row, engine, catalog)
            verdict_ = call(priced, engine.uncertainty, engine.shortfall if worst_case else None)
            out.append(Scored(row, rule, priced.predicted, verdict_, priced))
    return out


def leave_one_source_out(
    catalog: Catalog,
    engines: dict[str, EngineProfile],
    priors: dict[str, dict[str, Constant]],
    rule: FitRule = SHIPPED_FIT,
) -> list[Scored]:
    """Every scored row predicted from its engine's constants refitted without its source."""
    scored = catalog.scored
    out: list[Scored] = []
    for name in sorted({r.engine for r in scored}):
        mine = [r for r in scored if r.engine == name]
        table = priors.get(name, {})
        for source in sorted({r.source for r in mine}):
            train = [r for r in mine if r.source != source]
            held = [r for r in mine if r.source == source]
            if not train:
                out += [Scored(r, "held out", None) for r in held]
                continue
            profile = fit_engine(engines[name], table, train, catalog, rule)
            constants = {k: value_of(profile, k) for k in fitted_keys(table)}
            for row in held:
                priced = price(row, profile, catalog)
                out.append(Scored(row, "held out", priced.predicted, priced=priced, constants=constants))
    return held_out_verdicts(out)


def held_out_verdicts(held: list[Scored], worst_case: bool = True) -> list[Scored]:
    """Each estimate's verdict with the band (and, `worst_case`, the shortfall) of its engine's
    *other* sources' held-out rows; without `worst_case`, the rule as first fixed (NO-GO at the
    band's optimistic end)."""
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
        band = band_of([o.error_factor for o in others]) or PRIOR_BAND
        shortfall = shortfall_of(others) if worst_case else None
        out.append(replace(s, verdict=call(s.priced, band, shortfall)))
    return out


def contradictions(results: list[Scored]) -> list[Scored]:
    """Verdicts the measurement contradicts: NO-GO where SD paid ≥ 1.10×, GO where it gave < 0.95×."""
    return [
        s
        for s in results
        if (s.verdict is Verdict.NO_GO and s.row.speedup >= 1.10)
        or (s.verdict is Verdict.GO and s.row.speedup < 0.95)
    ]


def roofline(catalog: Catalog, engines: dict[str, EngineProfile]) -> list[Scored]:
    bare = {n: EngineProfile(name=n, description="roofline", device=e.device) for n, e in engines.items()}
    return in_sample(catalog, bare, rule="roofline")


def tau_factor(reported: list[Measurement]) -> float:
    """c of the trivial rule speedup = c·τ: the geometric mean of measured ÷ τ over these rows."""
    return math.exp(statistics.fmean(math.log(r.speedup / r.tau) for r in reported))


def c_tau(rows: list[Measurement]) -> list[Scored]:
    """speedup = c·τ on rows that report τ, c fitted on the other sources' such rows."""
    reported = [r for r in rows if r.role is Role.REPORTED]
    out = []
    for row in [r for r in rows if r.scored]:
        train = [r for r in reported if r.source != row.source]
        if row.role is not Role.REPORTED or not train:
            out.append(Scored(row, "c·τ", None))
            continue
        out.append(Scored(row, "c·τ", tau_factor(train) * row.tau))
    return out


def anchor_constant(rows: list[Measurement]) -> list[Scored]:
    """An anchored row predicted at its anchor's measured speedup."""
    by_id = {r.id: r for r in rows}
    return [
        Scored(r, "anchor", by_id[r.anchor].speedup if r.role is Role.ANCHORED else None)
        for r in rows
        if r.scored
    ]


def trivial(rows: list[Measurement]) -> list[Scored]:
    """c·τ where the row reports τ, the anchor where it does not."""
    out = []
    for tau, anchor in zip(c_tau(rows), anchor_constant(rows), strict=True):
        out.append(
            Scored(tau.row, "trivial", tau.predicted if tau.predicted is not None else anchor.predicted)
        )
    return out


def always_go(rows: list[Measurement]) -> list[Scored]:
    return [Scored(r, "always GO", None, Verdict.GO) for r in rows if r.scored]


def summary(results: list[Scored]) -> dict:
    """Error factors and go/no-go over the rows that have an estimate."""
    have = [s for s in results if s.predicted is not None]
    errors = [s.error_factor for s in have]
    decided = [s for s in have if not DECIDED[0] <= s.row.speedup <= DECIDED[1]]
    agree = [s for s in decided if (s.predicted >= 1) == (s.row.speedup >= 1)]
    return {
        "rows": len(have),
        "no_estimate": len(results) - len(have),
        "median_error_factor": statistics.median(errors) if errors else None,
        "p80_error_factor": float(np.percentile(errors, BAND_PERCENTILE)) if errors else None,
        "worst_error_factor": max(errors) if errors else None,
        "within_1.25": sum(e <= 1.25 for e in errors),
        "go_no_go_decided": len(decided),
        "go_no_go_agree": len(agree),
        "above_measured": sum(s.predicted > s.row.speedup for s in have),
    }
