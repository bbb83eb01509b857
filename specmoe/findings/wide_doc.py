"""The moesd-wide pass in the findings document: its verdicts on (e) and (f), each beside the
performance model's prediction made before the runs and MoESD's own figures, its tables, and how it
ran (runs, audit, what the noise guard left out and why, wall time)."""

from __future__ import annotations

import json
import statistics
import tomllib
from collections import Counter
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from specmoe.findings.cells import Cell, select
from specmoe.findings.claims import x
from specmoe.findings.regime import Regime
from specmoe.findings.wide import (
    DENSE,
    GAMMA,
    MOES,
    ORACLE,
    READ_SHARE,
    STEP,
    TOTAL,
    claim_e_wide,
    claim_f_wide,
    peak,
    point_cells,
    sweep,
    wide_regime,
)
from specmoe.findings.wide_predictions import Predicted, predicted, read_predictions

NOT_MEASURED = "not measured"
MODEL_REGIME = Regime(True, "the model prices the steps from bytes and FLOPs; no gate")


def predicted_verdicts(prices: Predicted) -> dict[str, str]:
    """The pass's rules read on the model's point predictions: what it expects them to decide."""
    items = point_cells(prices)
    e, f = claim_e_wide(items, MODEL_REGIME), claim_f_wide(items, MODEL_REGIME)
    return {
        "e": e.verdict,
        "e_shapes": e.values["shapes"],
        "e_gain": f"{e.values['gain']} ({e.values['wins']} of {e.values['pairs']} medium pairs to the MoE)",
        "f": f.verdict,
        "f_ranges": f.values["ranges"],
        "peaks": peaks_text(items),
    }


def peaks_text(items: Sequence[Cell]) -> str:
    """Each target's highest speedup of the sweep and where."""
    shown = []
    for target in (*MOES, DENSE):
        top = peak(sweep(items, target))
        shown.append(f"{target} {x(top.speedup)} at B={top.batch}" if top else f"{target} –")
    return ", ".join(shown)


def paper() -> dict:
    text = resources.files("specmoe.findings").joinpath("moesd_paper.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def paper_table() -> str:
    found = paper()
    lines = ["| target | draft | hardware | γ | acceptance | best speedup |", "|---|---|---|---|---|---|"]
    for row in found["best"]:
        lines.append(
            f"| {row['target']} | {row['draft']} | {row['hardware']} | {row['gamma']} | "
            f"{row['acceptance']:.2f} | {x(row['speedup'])} |"
        )
    return "\n".join(lines)


def _shown(cell: Cell | None, model: float | None) -> str:
    if cell is None and model is not None:
        return f"model {model:.2f}×"
    shown = cell.interval() if cell else "–"
    if model is not None:
        shown += f" (model {model:.2f}×)"
    return shown


def _keys(items: Sequence[Cell], prices: Predicted) -> set[tuple[str, str, int, int]]:
    """(target, draft, γ, B) of every measured cell and every prediction."""
    return {(c.target, c.draft, c.gamma, c.batch) for c in items} | set(prices)


def sweep_table(items: Sequence[Cell], prices: Predicted) -> str:
    """Speedup against batch size per target at the rules' oracle and γ, the prediction beside
    (before the runs, the prediction alone)."""
    keys = _keys(items, prices)
    batches = sorted({b for _, d, g, b in keys if (d, g) == (ORACLE, GAMMA)})
    lines = ["| target | " + " | ".join(f"B={b}" for b in batches) + " |", "|---" * (len(batches) + 1) + "|"]
    for target in (*MOES, DENSE, TOTAL):
        by_batch = {c.batch: c for c in sweep(items, target)}
        row = [_shown(by_batch.get(b), prices.get((target, ORACLE, GAMMA, b))) for b in batches]
        lines.append(f"| {target} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def grid_table(items: Sequence[Cell], prices: Predicted) -> str:
    """The acceptance and γ grid: per target and (oracle, γ), the batch sizes it was measured at."""
    keys = _keys(items, prices)
    arms = sorted({(d, g) for _, d, g, _ in keys if (d, g) != (ORACLE, GAMMA)})
    batches = sorted({b for _, d, g, b in keys if (d, g) in arms})
    lines = [
        "| target, draft, γ | " + " | ".join(f"B={b}" for b in batches) + " |",
        "|---" * (len(batches) + 1) + "|",
    ]
    for target in (*MOES, DENSE):
        for draft, gamma in [*arms, (ORACLE, GAMMA)]:
            found = {c.batch: c for c in select(items, target=target, draft=draft, gamma=gamma)}
            row = [_shown(found.get(b), prices.get((target, draft, gamma, b))) for b in batches]
            lines.append(f"| {target}, {draft}, γ={gamma} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def runs_line(rows: Sequence) -> str:
    """Runs, audit, the runs the noise guard left out and why, units, threads and load."""
    from specmoe.findings.cells import cells

    noisy = [r for r in rows if r.noisy]
    arms = Counter(r.arm for r in noisy)
    units = sorted({c.repeats for c in cells(rows)})
    loads = [float(r.measure["load_avg"]) for r in rows if r.measure.get("load_avg") is not None]
    audit = Counter(r.audit_verdict for r in rows)
    # The CPU part can change between sessions; a prediction priced on one part is read against
    # runs on another only with both named.
    cpus = "/".join(sorted({str(r.env.get("cpu")) for r in rows}))
    line = (
        f"on {cpus}, {len(rows)} runs, audit {audit.get('pass', 0)} pass / {audit.get('fail', 0)} fail, "
        f"{left_out(noisy, arms)}, paired units per cell "
        + (f"{units[0]}–{units[-1]}" if len(units) > 1 else str(units[0]) if units else "–")
        + f", {'/'.join(sorted({str(r.env.get('torch_threads')) for r in rows}))} thread(s)"
    )
    if loads:
        line += f", load average median {statistics.median(loads):.1f} (max {max(loads):.1f})"
    other = [float(r.measure["other_cpu"]) for r in rows if r.measure.get("other_cpu") is not None]
    if other:
        line += (
            f", other processes on the measuring core(s) median {statistics.median(other):.2f} "
            f"(max {max(other):.2f}) cores"
        )
    return line


def left_out(noisy: Sequence, arms: Counter) -> str:
    """ "N flagged noisy and left out (s SD, b baseline: why; load)" or "none flagged noisy"."""
    if not noisy:
        return "none flagged noisy"
    reasons = Counter(_reason_kind(r.measure.get("noise") or "") for r in noisy).most_common()
    loads = [float(r.measure["load_avg"]) for r in noisy if r.measure.get("load_avg") is not None]
    why = ", ".join(f"{n} {kind}" for kind, n in reasons)
    if loads:
        why += f"; load average {min(loads):.1f}–{max(loads):.1f} while they ran"
    return (
        f"{len(noisy)} flagged noisy and left out ({arms.get('sd', 0)} SD, {arms.get('baseline', 0)} "
        f"baseline: {why})"
    )


def _reason_kind(reason: str) -> str:
    """The noise guard's reason without its run's own figure ("other processes used 1.30 cores ...")."""
    if reason.startswith("other processes used"):
        return "while other processes used the measuring core"
    if "hypervisor" in reason:
        return "while the hypervisor stole CPU time"
    if "verify times spread" in reason:
        return "whose verify times spread"
    return f"for {reason}" if reason else "for a reason not recorded"


def wall_line(out: Path, step: str = STEP) -> str:
    path = out / f"{step}-wall.json"
    if not path.is_file():
        return NOT_MEASURED
    calls = json.loads(path.read_text(encoding="utf-8"))["calls"]
    total = sum(c["total_s"] for c in calls)
    parts = ", ".join(
        f"{name} {sum(c[key] for c in calls) / 60:.1f} min"
        for name, key in (("zoo", "zoo_s"), ("measuring", "measure_s"), ("report", "report_s"))
    )
    return f"{total / 60:.1f} min ({parts}; {len(calls)} call{'s' if len(calls) != 1 else ''})"


def wide_values(out: Path, items: Sequence[Cell], rows: Sequence, hardware: dict | None) -> dict[str, str]:
    """wide.* values for the findings template; "not measured" throughout before the pass has run."""
    record = read_predictions(out, STEP)
    prices = predicted(record)
    made = (
        f"made {record['made_at'][:10]} from {record['hardware_file']}, measured on "
        f"{record['hardware'].get('name', 'an unnamed machine')} (rules `{record['rules']}`)"
        if record
        else "no prediction file"
    )
    found = {
        "wide.rule_read_share": f"{READ_SHARE:g}",
        "wide.paper": paper_table(),
        "wide.paper_e": paper()["claims"]["e"],
        "wide.paper_f": paper()["claims"]["f"],
        "wide.predicted_when": made,
    }
    model = record["verdicts"] if record else {}
    for key in ("e", "e_shapes", "e_gain", "f", "f_ranges", "peaks"):
        found[f"wide.model_{key}"] = model.get(key, "–")
    found["wide.table"] = sweep_table(items, prices)
    found["wide.grid"] = grid_table(items, prices)
    if not rows:
        keys = ("runs", "regime", "wall", "e", "e_shape", "e_shapes", "e_gain", "f")
        keys += ("f_outcome", "e_decided_by", "shape_decided_by", "f_ranges", "f_decided_by", "peaks")
        found.update({f"wide.{k}": NOT_MEASURED for k in keys})
        return found
    regime = wide_regime(rows, hardware=hardware)
    e, f = claim_e_wide(items, regime), claim_f_wide(items, regime)
    found.update(
        {
            "wide.runs": runs_line(rows),
            "wide.regime": regime.why,
            "wide.wall": wall_line(out),
            "wide.e": e.verdict,
            "wide.e_shape": e.values["shape"],
            "wide.e_shapes": e.values["shapes"],
            "wide.e_gain": f"{e.values['gain']} (of {e.values['pairs']} medium pairs the MoE is ahead "
            f"beyond the intervals in {e.values['wins']}, {DENSE} in {e.values['losses']})",
            "wide.peaks": peaks_text(items),
            "wide.e_decided_by": e.values["decided_by"],
            "wide.shape_decided_by": e.values["shape_decided_by"],
            "wide.f": f.verdict,
            "wide.f_outcome": f.values["outcome"],
            "wide.f_ranges": f.values["ranges"],
            "wide.f_decided_by": f.values["decided_by"],
        }
    )
    return found
