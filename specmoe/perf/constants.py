"""Every number of the CUDA and Apple-silicon engine profiles in one place: its prior, the reasoning
or published figure behind it, where the calibration may move it, and the value it was fitted to.

`specmoe/perf/constants.toml` holds one table per engine and key:

    value     the prior: what reasoning alone or a published figure gives (`basis`, `why`, `source`)
    fit       present on the constants the calibration refits: bounds and the optimiser's step
    fitted    the value fitted to the published SD measurements, from the prior, on every row:
              written by `specmoe calibrate fit --write`, never by hand (absent: the prior ships)
    rows, shortfall
              on `uncertainty` only, written with its fitted value: how many held-out rows the
              band's 80th percentile is over, and the largest held-out shortfall a NO-GO must survive

The engine profiles (`specmoe.perf.engines`) take every value from here: the fitted one where there
is one, else the prior. The calibration (`specmoe.calibration`) starts every fit from the priors,
so a prediction held out from a source has seen nothing of it.

A key names a profile field (`round_s`) or one entry of a per-format table
(`compute_efficiency.default`, `reread.gguf`).
"""

from __future__ import annotations

import math
import re
import tomllib
from enum import StrEnum
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specmoe.errors import SpecmoeError

SHIPPED = "constants.toml"
TABLES = ("compute_efficiency", "reread")  # per-format fields, keyed "field.format"
BAND = "uncertainty"  # the one key whose fitted value comes with `rows` and `shortfall`
WRITTEN = ("fitted", "rows", "shortfall")  # the keys `calibrate fit --write` owns


class Basis(StrEnum):
    PUBLISHED = "published"  # follows from a published figure, named in `source`
    PRIOR = "prior"  # reasoning alone


class FitRange(BaseModel):
    """Where the calibration may move a refitted constant, and the optimiser's step scale."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float
    high: float
    scale: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> FitRange:
        if not self.low < self.high:
            raise ValueError(f"fit range needs low < high, got [{self.low}, {self.high}]")
        return self


class Constant(BaseModel):
    """One profile value: its prior with the reasoning, and the fitted value where one exists."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float
    basis: Basis
    why: str = Field(min_length=5)  # "as vllm" points at a sibling's reasoning
    source: str = ""
    fit: FitRange | None = None
    fitted: float | None = None
    rows: int | None = Field(None, ge=0)
    shortfall: float | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _sourced(self) -> Constant:
        if self.basis is Basis.PUBLISHED and not self.source:
            raise ValueError("a published value names its source")
        for name in ("value", "fitted"):
            number = getattr(self, name)
            if number is not None and not math.isfinite(number):
                raise ValueError(f"{name} must be a finite number, got {number}")
        if self.fit is not None and not self.fit.low <= self.value <= self.fit.high:
            raise ValueError(f"value {self.value} lies outside its fit range")
        if (
            self.fitted is not None
            and self.fit is not None
            and not self.fit.low <= self.fitted <= self.fit.high
        ):
            raise ValueError(f"fitted {self.fitted} lies outside its fit range")
        return self

    @property
    def shipped(self) -> float:
        """What the engine profile holds: the fitted value, else the prior."""
        return self.value if self.fitted is None else self.fitted


def parse_constants(text: str, where: str = SHIPPED) -> dict[str, dict[str, Constant]]:
    """engine name -> key -> Constant, from the text of a constants file."""
    try:
        raw = tomllib.loads(text).get("engines", {})
    except tomllib.TOMLDecodeError as err:
        raise SpecmoeError(f"{where} is not valid TOML ({err})") from None
    constants: dict[str, dict[str, Constant]] = {}
    for engine, table in raw.items():
        constants[engine] = {}
        for key, entry in table.items():
            if not isinstance(entry, dict):
                raise SpecmoeError(f"{where}: engines.{engine}.{key} must be a table (value, basis, why)")
            try:
                constants[engine][key] = Constant(**entry)
            except ValidationError as err:
                first = err.errors()[0]
                raise SpecmoeError(f"{where}: engines.{engine}.{key}: {first['msg']}") from None
            if key != BAND and (entry.get("rows") is not None or entry.get("shortfall") is not None):
                raise SpecmoeError(f"{where}: engines.{engine}.{key}: rows and shortfall belong to {BAND}")
    return constants


def shipped_text() -> str:
    return resources.files("specmoe.perf").joinpath(SHIPPED).read_text(encoding="utf-8")


def load_constants() -> dict[str, dict[str, Constant]]:
    """engine name -> key -> Constant, from the shipped constants.toml."""
    return parse_constants(shipped_text())


def fitted_keys(constants: dict[str, Constant]) -> tuple[str, ...]:
    """The keys of one engine the calibration refits, in file order."""
    return tuple(key for key, constant in constants.items() if constant.fit is not None)


def profile_values(constants: dict[str, Constant]) -> dict:
    """The profile fields one engine's constants set (tables merged), as the profile ships them;
    a fitted band also sets where it comes from and its held-out statistics."""
    values: dict = {}
    for key, constant in constants.items():
        field, _, entry = key.partition(".")
        if field in TABLES:
            values.setdefault(field, {})[entry] = constant.shipped
        else:
            values[field] = constant.shipped
    band = constants.get(BAND)
    if band is not None and band.fitted is not None:
        values |= {"band_basis": "held-out", "band_rows": band.rows or 0, "max_shortfall": band.shortfall}
    return values


_HEADER = re.compile(r'^\[engines\.([\w.-]+)\.("[^"]+"|[\w-]+)\]\s*$')


def with_fitted(text: str, updates: dict[tuple[str, str], dict[str, float | int | None]]) -> str:
    """The constants file's text with the `WRITTEN` keys of the tables `updates` names, (engine,
    key) -> {"fitted": x, "rows": n, "shortfall": s}, replaced (a None drops the line). Everything
    else, comments included, is kept byte for byte; a table `updates` names must exist."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    current: tuple[str, str] | None = None
    seen: set[tuple[str, str]] = set()

    def flush() -> None:
        if current not in updates:
            return
        # after the table's last key, before the blank lines and comments that end it
        end = len(out)
        while end > 0 and (not out[end - 1].strip() or out[end - 1].lstrip().startswith("#")):
            end -= 1
        new = [f"{k} = {_number(v)}\n" for k, v in updates[current].items() if v is not None]
        out[end:end] = new
        seen.add(current)

    for line in lines:
        if line.startswith("["):
            flush()
            match = _HEADER.match(line)
            current = (match.group(1), match.group(2).strip('"')) if match else None
        elif current in updates and line.split("=", 1)[0].strip() in WRITTEN:
            continue
        out.append(line)
    flush()
    missing = sorted(set(updates) - seen)
    if missing:
        engine, key = missing[0]
        raise SpecmoeError(f"{SHIPPED}: no table [engines.{engine}.{key}] to write a fitted value into")
    return "".join(out)


def _number(value: float | int) -> str:
    """Three significant figures for a float (what the fit can stand behind), as TOML."""
    if isinstance(value, int):
        return str(value)
    text = format(float(value), ".3g")
    return text if any(c in text for c in ".en") else f"{text}.0"
