"""Published SD measurements: one CSV row each, with the setup it was measured in and a role.

Every row of the shipped table (`specmoe/calibration/data/published.csv`) is one measured speedup
from a paper, a vendor blog, a model card or an engine's documentation:

    reported   the source reports the acceptance (τ, rate or α): the prediction uses it
    anchor     the smallest batch of a sweep that reports no acceptance: not scored; the acceptance
               at which the model reproduces it is used for the sweep's other rows
    anchored   another batch size of such a sweep, predicted at its anchor's acceptance; a reported
               row can anchor the rows of its sweep that report none (it is scored all the same)
    excluded   left out, with the reason in its note

The unit a held-out score leaves out is the row's `source` (one paper, blog post, model card or docs
page): a source's tables share its authors' machine, software and prompts.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.perf.breakeven import AcceptanceKind, acceptance
from specmoe.user_files import check_regular

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


_COLUMNS = tuple(f.name for f in fields(Measurement))  # a published CSV's header, in order


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


def _check(row: Measurement, where: str) -> Measurement:
    """A row's numbers are ones a measurement can have: the fit divides by the batch and takes the
    log of the speedup, so a 0, a negative or a NaN would surface as a math error deep inside it."""
    bad = None
    if not (math.isfinite(row.speedup) and row.speedup > 0):
        bad = f"speedup must be a finite number > 0 (measured ×), got {row.speedup}"
    elif row.batch < 1 or row.tree_width < 1:
        bad = f"batch and tree_width must be whole numbers >= 1, got {row.batch} and {row.tree_width}"
    elif any(v is not None and v < 1 for v in (row.gamma, row.verify_tokens)):
        bad = f"gamma and verify_tokens must be >= 1 when given, got {row.gamma} and {row.verify_tokens}"
    elif row.acceptance is not None and not (math.isfinite(row.acceptance) and row.acceptance >= 0):
        bad = f"acceptance must be a finite number >= 0, got {row.acceptance}"
    elif not (math.isfinite(row.context) and row.context >= 0):
        bad = f"context must be a finite number of tokens >= 0, got {row.context}"
    if bad:
        raise SpecmoeError(f"{where}: row '{row.id}': {bad}; fix the row or mark it excluded")
    return row


def parse_measurements(text: str, where: str) -> list[Measurement]:
    """The rows of a CSV's text (the header names the columns); `where` names it in errors."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in _COLUMNS if c not in (reader.fieldnames or ())]
    if reader.fieldnames and missing:
        raise SpecmoeError(
            f"{where}: no column {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} in its header; "
            "pass a CSV with published.csv's columns"
        )
    return [_check(_parse(raw, where), where) for raw in reader]


def load_measurements(path: Path) -> list[Measurement]:
    path = Path(path)
    check_regular(path)  # a FIFO would block the read forever
    try:
        text = path.read_bytes().decode("utf-8")  # the csv module reads line ends itself
    except FileNotFoundError:
        raise SpecmoeError(f"rows file '{path}' not found; pass a CSV with published.csv's columns") from None
    except UnicodeDecodeError:
        raise SpecmoeError(
            f"rows file '{path}' is not UTF-8 text; pass a CSV with published.csv's columns"
        ) from None
    rows = parse_measurements(text, str(path))
    if not rows:
        raise SpecmoeError(f"rows file '{path}' holds no rows; pass a CSV with published.csv's columns")
    _check_engines(rows, str(path))
    return rows


def _check_engines(rows: list[Measurement], where: str) -> None:
    """Each row's engine is one the performance model has a profile for."""
    from specmoe.perf.engines import load_engines

    known = load_engines()
    for row in rows:
        if row.engine not in known:
            raise SpecmoeError(
                f"{where}: row '{row.id}': unknown engine '{row.engine}'; one of: {', '.join(sorted(known))}"
            )
