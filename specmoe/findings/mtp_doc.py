"""The study-hybrid-mtp pass in the findings document: per backend and batch size, the MTP module
against the separate drafts (acceptance and speedup with intervals, each beside the performance
model's prediction made before the runs), the round's cost split, the break-even acceptance, the
rules' verdict, and how the pass ran. Every value reads "not measured" before the pass has runs."""

from __future__ import annotations

from collections.abc import Sequence

from specmoe.findings.cells import Cell, select
from specmoe.findings.claims import pct
from specmoe.findings.mtp import DRAFTS, MTP, PARITY, STEP, arm_of, best_gamma, call, on_backend
from specmoe.findings.wide_doc import runs_line
from specmoe.findings.wide_predictions import read_predictions

NOT_MEASURED = "not measured"
ARMS = (MTP, *DRAFTS)
BATCHES = (1, 4)
GAMMAS = (1, 2, 3, 4)  # the pass's γ, shown before it has runs or predictions
# The backends the section reports, as runs name them (`mtp.backend_of`) and as the document does.
BACKENDS = (("hf", "transformers float32"), ("llamacpp", "llama.cpp"))


def _prediction(cells: dict, backend: str, draft: str, gamma: int, batch: int) -> str:
    found = cells.get((backend, draft, gamma, batch))
    if found is None:
        return ""
    even = found["breakeven_rate"]
    pays = f"break-even {pct(even)}" if even is not None else "never pays"
    return f"model {found['speedup']:.2f}× at {pct(found['rate'])}, {pays}"


def arm_table(items: Sequence[Cell], rows: Sequence, predicted: dict) -> str:
    """Per backend, arm and γ, per batch size: the measured speedup with its interval and acceptance,
    the prediction beside (before the runs, the prediction alone)."""
    head = "| backend | arm | γ | " + " | ".join(f"B={b}" for b in BATCHES) + " |"
    lines = [head, "|---|---|---|" + "---|" * len(BATCHES)]
    gammas = sorted({k[2] for k in predicted} | {c.gamma for c in items}) or list(GAMMAS)
    for backend, label in BACKENDS:
        cells, _ = on_backend(items, rows, backend)
        for draft in ARMS:
            for gamma in gammas:
                shown = []
                for batch in BATCHES:
                    cell = next(iter(select(cells, draft=draft, gamma=gamma, batch=batch)), None)
                    model = _prediction(predicted, backend, draft, gamma, batch)
                    text = f"{cell.interval()}, acceptance {pct(cell.acceptance)}" if cell else NOT_MEASURED
                    shown.append(f"{text} ({model})" if model and cell else model or text)
                lines.append(f"| {label} | {draft} | {gamma} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def _arm_runs(rows: Sequence, cell: Cell) -> list:
    return [
        r
        for r in rows
        if r.arm == "sd"
        and not r.noisy
        and arm_of(r) == cell.draft
        and r.settings.gamma == cell.gamma
        and r.settings.batch_size == cell.batch
        and r.counts.target_forwards
    ]


def round_parts(rows: Sequence, cell: Cell) -> dict[str, float] | None:
    """A cell's mean batch round in seconds, by part: drafting, verifying, rolling the state back,
    the rest (bookkeeping), and the whole ("decode"). A batch round is one verify forward of the
    target (the counts' rounds are per sequence)."""
    runs = _arm_runs(rows, cell)
    rounds = sum(r.counts.target_forwards for r in runs)
    if not rounds:
        return None
    parts = {
        "draft": sum(r.times.draft_s or 0.0 for r in runs),
        "verify": sum(r.times.verify_s or 0.0 for r in runs),
        "state": sum(r.times.state_s or 0.0 for r in runs),
    }
    decode = sum(r.times.decode_s for r in runs)
    parts["other"] = max(decode - sum(parts.values()), 0.0)
    return {k: v / rounds for k, v in {**parts, "decode": decode}.items()}


def split_text(parts: dict[str, float] | None) -> str:
    """A round's cost in ms, each part with its share."""
    if parts is None:
        return NOT_MEASURED
    decode = parts["decode"]
    shown = ", ".join(f"{k} {1000 * v:.1f} ({pct(v / decode)})" for k, v in parts.items() if k != "decode")
    return f"{1000 * decode:.1f} ms a round: {shown}"


def breakeven_text(cell: Cell, parts: dict[str, float] | None) -> str:
    """The acceptance rate at which the cell's measured round cost breaks even with plain decoding
    (its paired baseline's step)."""
    from specmoe.perf.breakeven import round_breakeven

    if parts is None or not cell.step_s:
        return NOT_MEASURED
    found = round_breakeven(cell.gamma, parts["decode"] / cell.step_s, parts["draft"] / cell.step_s)
    if found is None:
        return "none (a round costs more than γ + 1 plain steps)"
    return f"{pct(found.rate)} (measured {pct(cell.acceptance)})"


def calls_table(items: Sequence[Cell], rows: Sequence) -> str:
    """Per backend and batch size: each arm at its best γ, the ratio, the gate and the verdict."""
    head = "| backend | B | MTP, best γ | best separate draft, best γ | MTP / draft | verdict |"
    lines = [head, "|---|---|---|---|---|---|"]
    for backend, label in BACKENDS:
        cells, mine = on_backend(items, rows, backend)
        if not mine:
            lines.append(f"| {label} | {', '.join(map(str, BATCHES))} | – | – | – | {NOT_MEASURED} |")
            continue
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


def cost_table(items: Sequence[Cell], rows: Sequence) -> str:
    """Per backend, batch size and arm at its best γ: the round's cost split and the break-even
    acceptance."""
    lines = ["| backend | B | arm, best γ | round cost | break-even acceptance |", "|---|---|---|---|---|"]
    for backend, label in BACKENDS:
        cells, mine = on_backend(items, rows, backend)
        for batch in BATCHES:
            for draft in ARMS:
                cell = best_gamma(cells, draft, batch)
                if cell is not None:
                    parts = round_parts(mine, cell)
                    split, even = split_text(parts), breakeven_text(cell, parts)
                    lines.append(f"| {label} | {batch} | {draft}, γ={cell.gamma} | {split} | {even} |")
    return "\n".join(lines)


def rollback_text(rows: Sequence) -> str:
    """llama.cpp's state rollback's share of SD decode time, per `recurrent_rollback` method the
    runs record (snapshots or checkpoints), over its SD runs."""
    found: dict[str, list[float]] = {}
    for r in rows:
        method = r.measure.get("recurrent_rollback")
        if r.arm == "sd" and not r.noisy and method:
            total = found.setdefault(str(method), [0.0, 0.0, 0])
            total[0] += r.times.state_s or 0.0
            total[1] += r.times.decode_s
            total[2] += 1
    if not found:
        return NOT_MEASURED
    shown = [
        f"{m}: {pct(s / d)} of SD decode time over {n} SD runs" for m, (s, d, n) in sorted(found.items())
    ]
    missing = [m for m in ("snapshots", "checkpoints") if m not in found]
    if missing:
        shown.append(f"{' and '.join(missing)} not measured (the runs use llama.cpp's default)")
    return "; ".join(shown)


def mtp_values(out, items: Sequence[Cell], rows: Sequence) -> dict[str, str]:
    """mtp.* values for the findings template; "not measured" throughout before the pass has run."""
    from specmoe.findings.wide_doc import wall_line

    record = read_predictions(out, STEP)
    predicted = (
        {(c["backend"], c["arm"], c["gamma"], c["batch"]): c for c in record["cells"]} if record else {}
    )
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
        "mtp.table": arm_table(items, rows, predicted),
        "mtp.calls": calls_table(items, rows),
    }
    if not rows:
        found.update({f"mtp.{k}": NOT_MEASURED for k in ("runs", "wall", "cost", "rollback")})
        return found
    _, llamacpp = on_backend(items, rows, "llamacpp")
    found.update(
        {
            "mtp.runs": runs_line(rows),
            "mtp.wall": wall_line(out, STEP),
            "mtp.cost": cost_table(items, rows),
            "mtp.rollback": rollback_text(llamacpp),
        }
    )
    return found
