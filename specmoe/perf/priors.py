"""Priors: every hand-set value of the CUDA and Apple-silicon engine profiles, with its reasoning.

`specmoe/perf/priors.toml` gives each value of those profiles its basis ("published" when a
figure it names fixes it, "prior" when reasoning alone does) and marks the few constants the
calibration against published SD measurements refits (`fit`, with bounds). The calibration starts
every fit from these values, so a prediction held out from a source has seen nothing of it; the
shipped profiles (runtimes.toml) hold these values except where a fit replaced them.

A key names a profile field (`round_s`) or one entry of a per-format table
(`compute_efficiency.default`, `reread.gguf`).
"""

from __future__ import annotations

import tomllib
from enum import StrEnum
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specmoe.errors import SpecmoeError
from specmoe.perf.runtimes import EngineProfile

_SHIPPED = "priors.toml"
TABLES = ("compute_efficiency", "reread")  # per-format fields, keyed "field.format"


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


class Prior(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    value: float
    basis: Basis
    why: str = Field(min_length=5)  # "as vllm" points at a sibling's reasoning
    source: str = ""
    fit: FitRange | None = None

    @model_validator(mode="after")
    def _sourced(self) -> Prior:
        if self.basis is Basis.PUBLISHED and not self.source:
            raise ValueError("a published value names its source")
        if self.fit is not None and not self.fit.low <= self.value <= self.fit.high:
            raise ValueError(f"value {self.value} lies outside its fit range")
        return self


def load_priors() -> dict[str, dict[str, Prior]]:
    """engine name -> key -> Prior, from the shipped priors.toml."""
    text = resources.files("specmoe.perf").joinpath(_SHIPPED).read_text(encoding="utf-8")
    raw = tomllib.loads(text).get("engines", {})
    priors: dict[str, dict[str, Prior]] = {}
    for engine, table in raw.items():
        priors[engine] = {}
        for key, entry in table.items():
            if not isinstance(entry, dict):
                raise SpecmoeError(f"{_SHIPPED}: engines.{engine}.{key} must be a table (value, basis, why)")
            try:
                priors[engine][key] = Prior(**entry)
            except ValidationError as err:
                first = err.errors()[0]
                raise SpecmoeError(f"{_SHIPPED}: engines.{engine}.{key}: {first['msg']}") from None
    return priors


def fitted_keys(priors: dict[str, Prior]) -> tuple[str, ...]:
    """The keys of one engine the calibration refits, in file order."""
    return tuple(key for key, prior in priors.items() if prior.fit is not None)


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


def prior_profile(profile: EngineProfile, priors: dict[str, Prior]) -> EngineProfile:
    """The profile as the priors set it: every fitted constant back at its starting value."""
    return with_values(profile, {key: prior.value for key, prior in priors.items()})
