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
import re
from dataclasses import dataclass
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


def parse_measurements(text: str, where: str) -> list[Measurement]:
    """The rows of a CSV's text (the header names the columns); `where` names it in errors."""
    return [_parse(raw, where) for raw in csv.DictReader(io.StringIO(text, newline=""))]


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
    return parse_measurements(text, str(path))
