"""What `specmoe demo` prints around its measurements: the model's calls before them, and after
them the account of each configuration (`story`), the closing paragraph (`story_seeds`) and the
audit of the study's published rows in one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from specmoe.perf.hardware import Hardware
from specmoe.report.predicted import Prediction, prediction_text
from specmoe.report.story import accounts, audit_line, label, story_lines
from specmoe.report.story_seeds import closing_lines
from specmoe.results.noisy import OTHER_CPU_LIMIT
from specmoe.results.store import RunRow

STUDY_WHERE = "The study's published rows (`specmoe audit docs/results/study-runs.csv`)"


def prediction_lines(
    predictions: Mapping[str, Prediction], hardware: Hardware, threads: int, other_cpu: float = 0.0
) -> list[str]:
    """The model's call on each configuration, printed before any of them runs; `other_cpu`: cores'
    worth of other processes' work just before the probe (above a quarter core, said)."""
    engines = sorted({p.engine for p in predictions.values()})
    rate = hardware.flops_per_s.get("float32")
    flops = f" and {rate / 1e9:.0f} GFLOP/s float32 matmuls" if rate else ""
    read = f"{hardware.bandwidth_bytes_per_s / 1e9:.1f} GB/s with {threads} threads{flops}{_busy(other_cpu)}"
    head = (
        "Before measuring, what the MoESD performance model expects here: first principles from each "
        f"model's config, this machine's read rate just measured ({read}) and the engine profile "
        f"{', '.join(engines)}, its band "
        "×/÷ the profile's uncertainty; an oracle draft's acceptance is dialed, a trained draft's "
        "unknown until it runs."
    )
    return [head, *(f"  - {label(p.spec.as_dict())}: {prediction_text(p)}" for p in predictions.values()), ""]


def _busy(other_cpu: float) -> str:
    if other_cpu <= OTHER_CPU_LIMIT:
        return ""
    return f", read while other processes used {other_cpu:.1f} cores, so low"


def model_shapes(suites: Sequence, zoos: Sequence[Path | None]) -> dict[str, tuple[int, int]]:
    """(experts, top-k) of each suite-local MoE model name, from its zoo's manifest."""
    from specmoe.zoo.manifest import load_manifest

    found: dict[str, tuple[int, int]] = {}
    for suite, zoo in zip(suites, zoos, strict=True):
        if zoo is None:
            continue
        shapes = load_manifest(zoo)["models"]
        for name, model in suite.models.items():
            shape = shapes.get(model.zoo) if model.zoo else None
            if shape and shape.get("experts"):
                found[name] = (shape["experts"], shape["top_k"])
    return found


def study_audit() -> str:
    """The audit of the study's published rows in one line, or why there is none."""
    from specmoe.audit.foreign import audit_csv
    from specmoe.suite.shipped import STUDY_ROWS

    if not STUDY_ROWS.is_file():
        return f"{STUDY_WHERE}: not found; they ship inside the package (specmoe/audit): reinstall specmoe"
    return audit_line(audit_csv(STUDY_ROWS), STUDY_WHERE)


def demo_story(
    rows: Sequence[RunRow],
    suites: Sequence,
    zoos: Sequence[Path | None],
    predictions: Mapping[str, Prediction],
) -> list[str]:
    """The account of the run (a sentence per configuration under its group, the batch series), then
    the closing paragraph ending in the study audit. Runs a busy machine disturbed keep their
    numbers, marked BUSY: the demo says what it measured rather than nothing."""
    experts = model_shapes(suites, zoos)
    groups = {g.name: g.description for suite in suites for g in suite.groups}
    lines = story_lines(rows, groups, experts, keep_noisy=True)
    return lines + closing_lines(accounts(rows, keep_noisy=True), predictions, experts, study_audit())
