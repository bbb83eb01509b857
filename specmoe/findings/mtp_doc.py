"""The study-hybrid-mtp pass in the findings document: per backend and batch size, the MTP module
against the separate drafts (acceptance and speedup with intervals, each beside the performance
model's prediction made before the runs), the round's cost split, the break-even acceptance, the
rules' verdict, and how the pass ran. Every value reads "not measured" before the pass has runs."""

from __future__ import annotations

from collections.abc import Sequence

from specmoe.findings.cells import Cell, select
from specmoe.findings.claims import pct
from specmoe.findings.mtp import DRAFTS, MTP, PARITY, STEP, backend_of, best_gamma, call
from specmoe.findings.wide_doc import runs_line
from specmoe.findings.wide_predictions import read_predictions

NOT_MEASURED = "not measured"
ARMS = (MTP, *DRAFTS)
BATCHES = (1, 4)
GAMMAS = (1, 2, 3, 4)  # the pass's γ, shown before it has runs or predictions
# The backends the section reports, as runs name them (`mtp.backend_of`) and as the document does.
BACKENDS = (("hf", "transformers float32"), ("llamacpp", "llama.cpp"))
LLAMACPP_NOTE = "not measured (the pass is transformers-only: suites/study-hybrid-mtp.toml says why)"


def _rows_of(rows: Sequence, backend: str) -> list:
    return [r for r in rows if backend_of(r) == backend]


def _prediction(cells: dict, draft: str, gamma: int, batch: int) -> str:
    found = cells.get((draft, gamma, batch))
    if found is None:
        return ""
    even = found["breakeven_rate"]
    pays = f"break-even {pct(even)}" if even is not None else "never pays"
    return f"model {found['speedup']:.2f}× at {pct(found['rate'])}, {pays}"


def arm_table(items: Sequence[Cell], predicted: dict) -> str:
    """Per arm and γ, per batch size: the measured speedup with its interval and acceptance, the
    prediction beside (before the runs, the prediction alone)."""
    lines = [
        "| arm | γ | " + " | ".join(f"B={b}" for b in BATCHES) + " |",
        "|---|---|" + "---|" * len(BATCHES),
    ]
    gammas = sorted({g for _, g, _ in predicted} | {c.gamma for c in items}) or list(GAMMAS)
    for draft in ARMS:
        for gamma in gammas:
            shown = []
            for batch in BATCHES:
                cell = next(iter(select(items, draft=draft, gamma=gamma, batch=batch)), None)
                model = _prediction(predicted, draft, gamma, batch)
                text = f"{cell.interval()}, acceptance {pct(cell.acceptance)}" if cell else NOT_MEASURED
                shown.append(f"{text} ({model})" if model and cell else model or text)
            lines.append(f"| {draft} | {gamma} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def _arm_runs(rows: Sequence, cell: Cell) -> list:
    return [
        r
        for r in rows
        if r.arm == "sd"
        and not r.noisy
        and str(r.settings.draft_name) == cell.draft
        and r.settings.gamma == cell.gamma
        and r.settings.batch_size == cell.batch
        and r.counts.rounds
    ]


def split_text(rows: Sequence, cell: Cell) -> str:
    """A cell's mean round in ms: drafting, verifying, rolling state back, the rest (bookkeeping)."""
    runs = _arm_runs(rows, cell)
    rounds = sum(r.counts.rounds for r in runs)
    if not rounds:
        return NOT_MEASURED
    parts = {
        "draft": sum(r.times.draft_s or 0.0 for r in runs),
        "verify": sum(r.times.verify_s or 0.0 for r in runs),
        "state": sum(r.times.state_s or 0.0 for r in runs),
    }
    decode = sum(r.times.decode_s for r in runs)
    parts["other"] = max(decode - sum(parts.values()), 0.0)
    shown = ", ".join(f"{k} {1000 * v / rounds:.1f} ({pct(v / decode)})" for k, v in parts.items())
    return f"{1000 * decode / rounds:.1f} ms a round: {shown}"


def breakeven_text(cell: Cell) -> str:
    """The acceptance rate at which the cell's measured round cost breaks even with plain decoding."""
    from specmoe.perf.breakeven import round_breakeven

    if not (cell.round_s and cell.step_s and cell.draft_round_s is not None):
        return NOT_MEASURED
    found = round_breakeven(cell.gamma, cell.round_s / cell.step_s, cell.draft_round_s / cell.step_s)
    if found is None:
        return "none (a round costs more than γ + 1 plain steps)"
    return f"{pct(found.rate)} (measured {pct(cell.acceptance)})"


def calls_table(items: Sequence[Cell], rows: Sequence) -> str:
    """Per backend and batch size: each arm at its best γ, the ratio, the gate and the verdict."""
    head = "| backend | B | MTP, best γ | best separate draft, best γ | MTP / draft | verdict |"
    lines = [head, "|---|---|---|---|---|---|"]
    for backend, label in BACKENDS:
        mine = _rows_of(rows, backend)
        if not mine:
            lines.append(f"| {label} | {', '.join(map(str, BATCHES))} | – | – | – | {NOT_MEASURED} |")
            continue
        cells = [c for c in items if (c.draft, c.gamma, c.batch) in _keys(mine)]
        for batch in BATCHES:
            found = call(cells, mine, backend, batch)
            mtp = f"γ={found.mtp.gamma}: {found.mtp.interval()}" if found.mtp else "–"
            draft = (
                f"{found.draft.draft} γ={found.draft.gamma}: {found.draft.interval()}" if found.draft else "–"
            )
            ratio = found.ratio.format() if found.ratio else "–"
            lines.append(
                f"| {label} | {batch} | {mtp} | {draft} | {ratio} | **{found.verdict}** ({found.why}) |"
            )
    return "\n".join(lines)


def _keys(rows: Sequence) -> set[tuple[str, int, int]]:
    return {
        (str(r.settings.draft_name), r.settings.gamma, r.settings.batch_size) for r in rows if r.arm == "sd"
    }


def cost_table(items: Sequence[Cell], rows: Sequence) -> str:
    """Per batch size and arm at its best γ: the round's cost split and the break-even acceptance."""
    lines = ["| B | arm, best γ | round cost | break-even acceptance |", "|---|---|---|---|"]
    for batch in BATCHES:
        for draft in ARMS:
            cell = best_gamma(items, draft, batch)
            if cell is not None:
                split, even = split_text(rows, cell), breakeven_text(cell)
                lines.append(f"| {batch} | {draft}, γ={cell.gamma} | {split} | {even} |")
    return "\n".join(lines)


def mtp_values(out, items: Sequence[Cell], rows: Sequence) -> dict[str, str]:
    """mtp.* values for the findings template; "not measured" throughout before the pass has run."""
    from specmoe.findings.wide_doc import wall_line

    record = read_predictions(out, STEP)
    predicted = {(c["draft"], c["gamma"], c["batch"]): c for c in record["cells"]} if record else {}
    found = {
        "mtp.parity": f"{PARITY:g}",
        "mtp.predicted_when": (
            f"made {record['made_at'][:10]} from {record['hardware_file']}, measured on "
            f"{record['hardware'].get('name', 'an unnamed machine')}; rules `{record['rules']}`"
            if record
            else "no prediction file"
        ),
        "mtp.model_verdicts": (
            ", ".join(f"{b}: {v}" for b, v in record["verdicts"].items()) if record else "none"
        ),
        "mtp.table": arm_table(items, predicted),
        "mtp.calls": calls_table(items, rows),
        "mtp.llamacpp": LLAMACPP_NOTE,
    }
    if not rows:
        found.update({f"mtp.{k}": NOT_MEASURED for k in ("runs", "wall", "cost")})
        return found
    found.update(
        {
            "mtp.runs": runs_line(rows),
            "mtp.wall": wall_line(out, STEP),
            "mtp.cost": cost_table(items, _rows_of(rows, "hf")),
        }
    )
    return found
