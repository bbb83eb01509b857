"""The shipped constants as the calibration makes them: each engine with scored rows refitted on all
of them, from its priors, and its band from its held-out errors. `calibrate fit --write` writes
them into specmoe/perf/constants.toml (`fitted`, and on `uncertainty` also `rows` and
`shortfall`); `calibrate check` says whether the file still holds what a fit gives now.

Values are written to three significant figures (a band to two decimals, as advise prints it):
what the rows can stand behind, and what keeps the file readable. A value within a millionth of
its optimiser step (`fit.scale`) of a bound is written as the bound: the optimiser cannot tell
them apart (a round cost of 2e-10 s is 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.fit import fit_all, value_of
from specmoe.calibration.heldout import leave_one_source_out
from specmoe.calibration.report import bands
from specmoe.perf.constants import BAND, Constant, fitted_keys
from specmoe.perf.engines import EngineProfile

Updates = dict[tuple[str, str], dict[str, float | int | None]]


@dataclass(frozen=True)
class Refit:
    """What `calibrate fit` computes: the refitted profiles and each engine's band."""

    fitted: dict[str, EngineProfile]
    bands: dict[str, dict]
    engines: tuple[str, ...]  # those with scored rows, sorted


def refit(
    catalog: Catalog, engines: dict[str, EngineProfile], priors: dict[str, dict[str, Constant]]
) -> Refit:
    fitted = fit_all(catalog, engines, priors)
    held = leave_one_source_out(catalog, engines, priors)
    names = tuple(sorted({r.engine for r in catalog.scored}))
    return Refit(fitted, bands(held, engines), names)


def fit_lines(result: Refit, priors: dict[str, dict[str, Constant]]) -> list[str]:
    """One line per engine, its fitted constants as constants.toml will hold them."""
    return [
        f"[engines.{name}] "
        + ", ".join(f"{k} = {written(result, priors, name, k):.3g}" for k in fitted_keys(priors[name]))
        for name in result.engines
    ]


SNAP = 1e-6  # of the optimiser's step scale


def written(result: Refit, priors: dict[str, dict[str, Constant]], name: str, key: str) -> float:
    """The fitted value as constants.toml holds it: snapped to a bound it cannot be told from,
    then three significant figures."""
    value = value_of(result.fitted[name], key)
    fit = priors[name][key].fit
    for bound in (fit.low, fit.high):
        if abs(value - bound) < SNAP * fit.scale:
            value = bound
    return float(f"{value:.3g}")


def updates(result: Refit, priors: dict[str, dict[str, Constant]]) -> Updates:
    """(engine, key) -> the written keys, for `perf.constants.with_fitted`. An engine whose band
    has no held-out basis keeps its prior band (its `uncertainty` gets no fitted value)."""
    out: Updates = {}
    for name in result.engines:
        for key in fitted_keys(priors[name]):
            out[(name, key)] = {"fitted": written(result, priors, name, key)}
        band = result.bands.get(name)
        if band is not None and BAND in priors[name]:
            held = band["basis"] == "held-out"
            out[(name, BAND)] = {
                "fitted": band["band"] if held else None,
                "rows": band["held_out_rows"] if held else None,
                "shortfall": band["max_shortfall"] if held else None,
            }
    return out


def differences(new: Updates, constants: dict[str, dict[str, Constant]]) -> list[str]:
    """Each written value constants.toml holds otherwise than `new`, as "engine.key.field: a → b"."""
    lines = []
    for (name, key), values in sorted(new.items()):
        held = constants.get(name, {}).get(key)
        for field, value in values.items():
            shipped = None if held is None else getattr(held, field)
            if shipped != value:
                lines.append(f"{name}.{key}.{field}: {shipped} in constants.toml, {value} from the fit")
    return lines
