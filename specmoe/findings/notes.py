"""What the first measurement pass taught, computed from its shipped export beside this pass's.

The first pass (docs/results/cpu/findings/one-warmup-repeated-prompts/) ran before two harness
fixes: a model's first configuration now warms up until two runs agree, and batches larger than a
prompt set get distinct prompts. Shipping it lets the document show the size of both effects
instead of asserting them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from statistics import median

from specmoe.findings.batch_claims import Predict, batch_series
from specmoe.findings.cells import Cell, cells
from specmoe.findings.results import read_export
from specmoe.results.store import RunRow


def repeat_ratios(rows: Sequence[RunRow], target: str) -> list[float]:
    """Second repeat's tokens/s over the first's, per baseline configuration of `target`."""
    by_config: dict[str, dict[int, float]] = defaultdict(dict)
    for row in rows:
        if row.arm == "baseline" and row.settings.target == target:
            by_config[row.config_key][row.repeat] = row.tokens_per_s
    return sorted(r[1] / r[0] for r in by_config.values() if 0 in r and 1 in r)


def _ratio_text(ratios: list[float]) -> str:
    if not ratios:
        return "–"
    return f"{median(ratios):.2f} (at most {max(ratios):.2f})"


def _ratio_line(study: Sequence[RunRow], moesd: Sequence[RunRow]) -> str:
    """This pass's second-over-first repeat ratio, from the study's MoE baselines where they have two
    repeats, else from the moesd sweep's (float32, five repeats), saying which."""
    ratios = repeat_ratios(study, "moe")
    if ratios:
        return f"in this pass the ratio is {_ratio_text(ratios)}"
    ratios = repeat_ratios(moesd, "moe")
    if ratios:
        return (
            "this pass's study step measured each configuration once, so it has no second repeat to "
            "compare; the moesd step's float32 MoE baselines, repeated, give "
            f"{_ratio_text(ratios)}"
        )
    return "this pass measured no MoE baseline twice, so it has no ratio to compare"


def _baseline_ms(rows: Sequence[RunRow], target: str, batch: int) -> str:
    found = [
        r.times.verify_s / r.counts.target_forwards
        for r in rows
        if r.arm == "baseline"
        and r.settings.group == "batch"
        and r.settings.target == target
        and r.settings.batch_size == batch
    ]
    return f"{1e3 * median(found):.0f} ms" if found else "–"


def _speedup_at(items: Sequence[Cell], target: str, gamma: int, batch: int) -> str:
    found = [c for c in batch_series(items, target, gamma) if c.batch == batch]
    return found[0].interval() if found else "–"


def model_gap(moesd: Sequence[Cell], predict: Predict) -> tuple[str, str]:
    """(median, largest) |predicted / measured − 1| of end-to-end speedup over the batch sweep."""
    gaps = []
    for cell in moesd:
        if cell.group != "batch":
            continue
        predicted = predict(cell.target, cell.batch, cell.gamma, None)
        if predicted is not None:
            gaps.append(abs(predicted / cell.speedup - 1))
    if not gaps:
        return "–", "–"
    return f"{100 * median(gaps):.0f}%", f"{100 * max(gaps):.0f}%"


def prediction_errors(predictions: Path) -> str:
    """Per engine, the median and worst |predicted / measured − 1| of the prediction check
    (`benchmarks/perf_model/predictions.py`), e.g. "transformers 3.4% median, 93.2% worst over 78 cells"."""
    if not predictions.is_file():
        return "–"
    summary = json.loads(predictions.read_text(encoding="utf-8"))["summary"]
    return "; ".join(
        f"{engine} {100 * s['median_abs_error']:.1f}% median, {100 * s['worst_abs_error']:.1f}% worst "
        f"over {s['cells']} cells"
        for engine, s in sorted(summary.items())
    )


def out_of_sample_errors(path: Path, model: str = "v2") -> str:
    """Per engine, the judged cells' median and worst |predicted / measured − 1| of the
    out-of-sample check (`benchmarks/perf_model/out_of_sample.py`): cells measured after the model froze."""
    summary = (
        json.loads(path.read_text(encoding="utf-8")).get("summary", {}).get(model) if path.is_file() else None
    )
    if not summary:
        return "–"
    return "; ".join(
        f"{engine} {100 * s['median_abs_error']:.1f}% median, {100 * s['worst_abs_error']:.1f}% worst "
        f"over {s['judged']} cells"
        for engine, s in sorted(summary.items())
        if s["judged"]
    )


def measured_again(path: Path) -> str:
    """How far the out-of-sample check's cells measured again moved from their first measurement,
    one clause per later pass (`benchmarks/perf_model/out_of_sample.py`)."""
    passes = json.loads(path.read_text(encoding="utf-8")).get("again", []) if path.is_file() else []
    if not passes:
        return "–"
    return "; ".join(
        f"{p['measured'][:10]}: a median {100 * p['median_moved']:.1f}% (at most "
        f"{100 * p['most_moved']:.1f}%), intervals overlapping in {p['overlap']} of {p['cells']}"
        for p in passes
    )


def notes_values(
    out: Path,
    study: Sequence[RunRow],
    this_moesd: Sequence[RunRow],
    moesd: Sequence[Cell],
    predict: Predict,
) -> dict[str, str]:
    """`study` and `this_moesd` are this pass's rows, `moesd` its cells; the first pass is read here."""
    first = out / "one-warmup-repeated-prompts"
    first_study = read_export(first / "study.csv") if (first / "study.csv").is_file() else []
    first_moesd = read_export(first / "moesd.csv") if (first / "moesd.csv").is_file() else []
    gap_median, gap_max = model_gap(moesd, predict)
    first_cells = cells(first_moesd)
    return {
        "notes.first_ratio": _ratio_text(repeat_ratios(first_study, "moe")),
        "notes.ratio_line": _ratio_line(study, this_moesd),
        "notes.first_fails": str(sum(r.audit_verdict != "pass" for r in first_study)),
        "notes.first_b64_ms": _baseline_ms(first_moesd, "moe", 64),
        "notes.b64_ms": _baseline_ms(this_moesd, "moe", 64),
        "notes.first_b64": _speedup_at(first_cells, "moe", 4, 64),
        "notes.b64": _speedup_at(moesd, "moe", 4, 64),
        "notes.gap_median": gap_median,
        "notes.gap_max": gap_max,
        "notes.prediction_errors": prediction_errors(out.parent / "predictions" / "predictions.json"),
        "notes.out_of_sample": out_of_sample_errors(out.parent / "predictions" / "out-of-sample.json"),
        "notes.out_of_sample_refit": out_of_sample_errors(
            out.parent / "predictions" / "out-of-sample.json", "v2_refit"
        ),
        "notes.out_of_sample_v1": out_of_sample_errors(
            out.parent / "predictions" / "out-of-sample.json", "v1_on_seen"
        ),
        "notes.out_of_sample_again": measured_again(out.parent / "predictions" / "out-of-sample.json"),
        "notes.out_of_sample_declared": out_of_sample_errors(
            out.parent / "predictions" / "out-of-sample.json", "v2_declared"
        ),
    }
