"""The performance model's prediction of every cell of a findings pass, made before the pass runs.

`specmoe findings --pass moesd-wide --predict` prices each SD configuration of the pass's suite from
what exists before measuring (`specmoe.report.predicted`: the zoo models' configs, this CPU's
hardware file, the shipped engine profile; never a measurement of these models) and writes the
predictions beside the results, `<step>-predictions.json`, with the hardware they used and the
verdicts the pass's rules give on them. Measuring refuses to start without the file, and the file
is refused once the pass has runs: a prediction written after the runs would not be one.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.findings.rules import rules_hash

KIND = "specmoe-findings-predictions"
PROBE_THREADS = 2  # the engine profiles' bandwidth shares are of a two-thread read (perf/engines.toml)

Predicted = dict[tuple[str, str, int, int], float]  # (target, draft, γ, B) -> predicted speedup


def predictions_path(out: Path, step: str) -> Path:
    return Path(out) / f"{step}-predictions.json"


def hardware_path(out: Path, step: str) -> Path:
    return Path(out) / f"hw-{step}.json"


def probe_hardware() -> dict:
    """This machine's read bandwidth and float32 matmul rate as `specmoe demo` probes them."""
    import os

    from specmoe.perf.hardware import measure_hardware

    threads = max(1, min(PROBE_THREADS, os.cpu_count() or 1))
    return measure_hardware("cpu", read_mib=512, repeats=5, dtypes=("float32",), threads=threads)


def predict_step(suite, hardware: dict, where: str) -> list[dict]:
    """One record per SD configuration of `suite` the model can price, in suite order."""
    from specmoe.perf.hardware import parse_hardware
    from specmoe.report.predicted import predict_suite
    from specmoe.suite.expand import expand

    found = predict_suite(expand(suite), parse_hardware(hardware, where))
    return [
        {
            "target": p.spec.target,
            "draft": str(p.spec.draft),  # its canonical spelling, as cells name it
            "gamma": p.spec.gamma,
            "batch": p.spec.batch_size,
            "alpha": p.alpha,
            "speedup": round(p.speedup, 4) if p.speedup is not None else None,
            "band": [round(b, 4) for b in p.band] if p.band else None,
            "at_full": round(p.at_full, 4),
            "call": p.verdict.name,
            "engine": p.engine,
        }
        for p in found.values()
    ]


def refuse_after_runs(out: Path, step: str) -> None:
    if (Path(out) / f"{step}.db").is_file() or (Path(out) / f"{step}.csv").is_file():
        raise SpecmoeError(
            f"{out}: the {step} pass has runs already; a prediction written now would not precede them "
            "(keep the one committed before it ran)"
        )


def write_predictions(
    out: Path, step: str, cells: list[dict], hardware: dict, hardware_file: str, verdicts: dict
) -> Path:
    """Write the pass's predictions (refused once the pass has runs in `out`)."""
    refuse_after_runs(out, step)
    record = {
        "schema": 1,
        "kind": KIND,
        "step": step,
        "made_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rules": rules_hash(),
        "hardware_file": hardware_file,
        "hardware": hardware,
        "cells": cells,
        "verdicts": verdicts,
    }
    path = predictions_path(out, step)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_predictions(out: Path, step: str) -> dict | None:
    path = predictions_path(out, step)
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get("kind") != KIND:
        raise SpecmoeError(f"{path} is not a findings predictions file (kind {record.get('kind')!r})")
    return record


def predicted(record: dict | None) -> Predicted:
    """The record's predicted speedups by (target, draft, γ, B)."""
    if record is None:
        return {}
    return {
        (c["target"], c["draft"], c["gamma"], c["batch"]): c["speedup"]
        for c in record["cells"]
        if c["speedup"] is not None
    }
