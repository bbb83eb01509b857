"""MTP or a separate draft on the study's architecture: the study-hybrid-mtp pass
(`specmoe/suites/study-hybrid-mtp.toml`), judged by rules.toml [mtp].

Per backend and batch size each arm is taken at its best γ (its highest point speedup there); the
MTP arm is compared with the best separate draft by the ratio of their SD throughputs over the
paired units both measured (each unit's arms share one baseline, so the ratio is that of their
speedups), with the cells' interval. A regime gate asks that at least one of the two arms moved the
speed beyond its interval, i.e. that SD does something measurable there at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from specmoe.findings.cells import Cell, select
from specmoe.findings.rules import RULES
from specmoe.results.store import RunRow
from specmoe.stats import Estimate, ratio_of_means

STEP = "study-hybrid-mtp"
RULE = RULES["mtp"]
MTP: str = RULE["mtp"]
DRAFTS: tuple[str, ...] = tuple(RULE["drafts"])
PARITY: float = RULE["parity"]

PREFER_RULES = ("ratio interval",)
GATES = ("an arm excludes 1",)
for _key, _names in (("prefer", PREFER_RULES), ("gate", GATES)):
    if RULE[_key] not in _names:
        raise ValueError(f"rules.toml: mtp.{_key} must be one of {_names}, got {RULE[_key]!r}")

PREFER_MTP, PREFER_DRAFT, UNSURE = "MTP", "separate draft", "cannot tell"


@dataclass(frozen=True)
class Call:
    """The rules' call at one backend and batch size."""

    backend: str
    batch: int
    mtp: Cell | None  # MTP at its best γ
    draft: Cell | None  # the best separate draft at its best γ
    ratio: Estimate | None  # MTP throughput / the draft's, over their shared units
    gate: bool
    verdict: str
    why: str


def backend_of(row: RunRow) -> str:
    """The runtime that ran a row's target: its model's backend field ("hf" when not stored)."""
    return str(row.settings.target_field("backend") or "hf")


def arm_of(row: RunRow) -> str:
    """An SD row's arm by the zoo model its drafter runs ("mtp" for the target's own module): the
    suite names the llama.cpp copies of a draft apart, the rules name the zoo's drafts."""
    return str(row.settings.draft_field("zoo") or row.settings.draft_name)


def on_backend(
    items: Sequence[Cell], rows: Sequence[RunRow], backend: str
) -> tuple[list[Cell], list[RunRow]]:
    """One backend's cells, each named by its arm (`arm_of`), and its rows."""
    mine = [r for r in rows if backend_of(r) == backend]
    targets = {str(r.settings.target) for r in mine}
    arms = {str(r.settings.draft_name): arm_of(r) for r in mine if r.arm == "sd"}
    cells = [replace(c, draft=arms.get(c.draft, c.draft)) for c in items if c.target in targets]
    return cells, mine


def best_gamma(items: Sequence[Cell], draft: str, batch: int) -> Cell | None:
    """The draft's cell of highest point speedup at this batch size, over its γ."""
    found = select(items, draft=draft, batch=batch)
    return max(found, key=lambda c: (c.speedup, -c.gamma)) if found else None


def best_draft(items: Sequence[Cell], batch: int) -> Cell | None:
    """Of the separate drafts, each at its best γ, the one of highest point speedup."""
    found = [c for c in (best_gamma(items, d, batch) for d in DRAFTS) if c is not None]
    return max(found, key=lambda c: c.speedup) if found else None


def _units(rows: Sequence[RunRow], cell: Cell) -> dict[tuple[str, int], float]:
    """The cell's SD tokens/s by paired unit (its baseline's key and repeat), noisy runs left out."""
    return {
        (r.baseline_key, r.repeat): r.tokens_per_s
        for r in rows
        if r.arm == "sd"
        and not r.noisy
        and str(r.settings.target) == cell.target
        and arm_of(r) == cell.draft
        and r.settings.gamma == cell.gamma
        and r.settings.batch_size == cell.batch
    }


def throughput_ratio(rows: Sequence[RunRow], mtp: Cell, draft: Cell) -> Estimate | None:
    """MTP's SD tokens/s over the draft's, a ratio of means over the units both measured."""
    a, b = _units(rows, mtp), _units(rows, draft)
    shared = sorted(set(a) & set(b))
    if not shared:
        return None
    return ratio_of_means([a[k] for k in shared], [b[k] for k in shared])


def excludes_one(cell: Cell | None) -> bool:
    return cell is not None and cell.judged and (cell.low > 1.0 or cell.high < 1.0)


def prefer(ratio: Estimate | None, gate: bool) -> tuple[str, str]:
    """The verdict on a ratio and the regime gate, and why (rules.toml [mtp])."""
    if not gate:
        return UNSURE, "regime gate failed: neither arm's speedup interval excludes 1"
    if ratio is None:
        return UNSURE, "no units shared by the two arms"
    if ratio.level is None:
        return UNSURE, f"{ratio.n} shared units: a range, no interval"
    if ratio.low > PARITY:
        return PREFER_MTP, f"ratio interval above {PARITY:g}"
    if ratio.high < PARITY:
        return PREFER_DRAFT, f"ratio interval below {PARITY:g}"
    return UNSURE, f"ratio interval spans {PARITY:g}"


def call(items: Sequence[Cell], rows: Sequence[RunRow], backend: str, batch: int) -> Call:
    """The rules' call at one backend (`items`, `rows`: that backend's cells by arm, `on_backend`,
    and its runs) and batch size."""
    mtp, draft = best_gamma(items, MTP, batch), best_draft(items, batch)
    ratio = throughput_ratio(rows, mtp, draft) if mtp and draft else None
    gate = excludes_one(mtp) or excludes_one(draft)
    verdict, why = prefer(ratio, gate)
    if mtp is None or draft is None:
        verdict, why = UNSURE, "an arm was not measured"
    elif verdict != UNSURE and not (mtp.judged and draft.judged):
        verdict, why = (
            UNSURE,
            "an arm's cell decides nothing (" + (mtp.why_not_judged() or draft.why_not_judged()) + ")",
        )
    return Call(backend, batch, mtp, draft, ratio, gate, verdict, why)


def predicted_call(prices: dict[tuple[str, int], float]) -> str:
    """The rules read on point predictions (draft, γ) -> speedup at one batch size: no intervals,
    so the higher best-γ speedup wins."""
    mtp = max((v for (d, _), v in prices.items() if d == MTP), default=None)
    other = max((v for (d, _), v in prices.items() if d in DRAFTS), default=None)
    if mtp is None or other is None:
        return UNSURE
    return PREFER_MTP if mtp > other else PREFER_DRAFT if mtp < other else UNSURE
