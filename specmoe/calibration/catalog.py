"""The calibration's inputs, loaded once: published rows, the example configs and hardware files.

Everything ships as package data, so `specmoe calibrate` runs the same from a checkout and from an
installed wheel:

    rows       specmoe/calibration/data/published.csv (the table every fit and held-out score uses)
               and, kept apart, issue-threads.csv (rows the source rule keeps out: priced, never fitted)
    examples   specmoe/perf/examples/: abridged Hugging Face configs and spec-sheet hardware files,
               named by a row's `target`, `draft` and `hardware` columns (docs/perf-examples links there)

A `Catalog` caches each config (per weight format) and hardware file it has parsed, and shares that
cache with the catalogs `with_rows` makes from it, so a subset of rows or an extra file costs no
second read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from specmoe.calibration.rows import Measurement, load_measurements, parse_measurements
from specmoe.canonical import json_value
from specmoe.errors import SpecmoeError
from specmoe.perf.hardware import Hardware, parse_hardware
from specmoe.perf.structure import Architecture, parse_architecture

PUBLISHED = "published.csv"
ISSUE_THREADS = "issue-threads.csv"


def data_file(name: str) -> Traversable:
    """A shipped rows file (`PUBLISHED`, `ISSUE_THREADS`)."""
    return resources.files("specmoe.calibration").joinpath("data", name)


def examples_dir() -> Traversable:
    return resources.files("specmoe.perf").joinpath("examples")


def shipped_rows(name: str = PUBLISHED) -> list[Measurement]:
    return parse_measurements(data_file(name).read_bytes().decode("utf-8"), f"calibration/data/{name}")


@dataclass(frozen=True)
class _Cache:
    configs: dict[tuple[str, str | None], Architecture] = field(default_factory=dict)
    hardware: dict[str, Hardware] = field(default_factory=dict)


@dataclass(frozen=True)
class Catalog:
    """Rows and the files they name. `rows` keeps the file's order; `by_id` indexes them."""

    rows: tuple[Measurement, ...]
    examples: Traversable | Path
    by_id: dict[str, Measurement] = field(init=False, repr=False, compare=False)
    _cache: _Cache = field(default_factory=_Cache, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_id", {r.id: r for r in self.rows})

    @classmethod
    def shipped(cls, extra: tuple[Path, ...] = ()) -> Catalog:
        """The published table, with the rows of `extra` CSV files after it."""
        rows = shipped_rows() + [r for path in extra for r in load_measurements(path)]
        return cls(tuple(rows), examples_dir())

    @classmethod
    def from_files(cls, data: Path, examples: Path | None = None) -> Catalog:
        """Rows from a CSV file, configs and hardware from `examples` (default: the shipped ones)."""
        return cls(tuple(load_measurements(data)), examples or examples_dir())

    def with_rows(self, rows) -> Catalog:
        """The same files (and cache) with other rows."""
        return Catalog(tuple(rows), self.examples, self._cache)

    @property
    def scored(self) -> list[Measurement]:
        return [r for r in self.rows if r.scored]

    def anchor_of(self, row: Measurement) -> Measurement | None:
        return self.by_id.get(row.anchor or "")

    def config(self, name: str, dtype: str | None = None) -> Architecture:
        key = (name, dtype)
        if key not in self._cache.configs:
            where = f"examples/{name}.json"
            self._cache.configs[key] = parse_architecture(self._json(name, "config"), where, dtype)
        return self._cache.configs[key]

    def hardware(self, name: str) -> Hardware:
        if name not in self._cache.hardware:
            where = f"examples/{name}.json"
            self._cache.hardware[name] = parse_hardware(self._json(name, "hardware file"), where)
        return self._cache.hardware[name]

    def is_moe(self, row: Measurement) -> bool:
        return self.config(row.target, row.target_dtype).is_moe

    def _json(self, name: str, what: str):
        try:
            text = self.examples.joinpath(f"{name}.json").read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpecmoeError(
                f"no {what} '{name}.json' among the examples; a row's target, draft and hardware name "
                "files of specmoe/perf/examples/"
            ) from None
        try:
            return json_value(text)
        except json.JSONDecodeError as err:
            raise SpecmoeError(
                f"examples/{name}.json is not valid JSON ({err.msg}, line {err.lineno})"
            ) from None
