"""`benchmarks/gpu/gpu_check.sh --smoke`: the GPU check's steps on the CPU at tiny widths, end to end.

CI runs a subset of the steps (one of each kind: the hardware probe, the models, the float64 and the
compiled lossless checks, the suite at B = 1, profile, fit, predict, one advise): the whole smoke
starts fifteen processes, each importing torch and transformers, and takes 5-6 minutes on a
shared 2-core CPU (docs/gpu-check.md). Nothing here needs a GPU.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu" / "gpu_check.sh"
CI_STEPS = ",".join(
    [
        *("hw", "models", "lossless-float64-draft", "lossless-compiled-self", "suite", "export"),
        *("profile", "fit", "predict", "advise-olmoe"),
    ]
)


def test_smoke_writes_every_step_and_a_readme(tmp_path):
    out = tmp_path / "check"
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "PYTHON": sys.executable,
        "SPECMOE": f"{sys.executable} -m specmoe.cli",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    argv = [str(SCRIPT), "--smoke", "--out", str(out), "--steps", CI_STEPS, "--set", "batch_size=[1]"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    with (out / "steps.tsv").open(encoding="utf-8") as handle:
        steps = {row["step"]: row for row in csv.DictReader(handle, delimiter="\t")}
    failed = {name: row["status"] for name, row in steps.items() if row["status"] != "ok"}
    assert done.returncode == 0 and not failed, (failed, done.stderr[-2000:])
    assert set(steps) == set(CI_STEPS.split(",")) | {"profile-draft"}
    assert done.stdout.strip() == str(out / "README.md")

    for check in ("float64-draft", "compiled-self"):
        result = json.loads((out / f"lossless-{check}.json").read_text())
        assert result["divergences"] == [] and result["stats"]["emitted"] == 4 * 8
    assert json.loads((out / "lossless-compiled-self.json").read_text())["stats"]["acceptance_rate"] == 1.0
    models = dict(line.split("\t") for line in (out / "models.tsv").read_text().splitlines())
    assert set(models) == {"olmoe", "dense", "qwen3-moe", "draft-olmoe", "draft-qwen3", "lossless"}
    assert all(Path(path).is_relative_to(tmp_path / "cache") for path in models.values())
    rows = list(csv.DictReader((out / "moesd-gpu.csv").open(encoding="utf-8")))
    assert len(rows) == 3 * 3  # three targets at B = 1: a baseline and two oracle arms each
    predicted = json.loads((out / "predict.json").read_text())
    assert {(r["batch"], r["gamma"]) for r in predicted["rows"]} >= {(1, 2), (4, 4)}

    readme = (out / "README.md").read_text(encoding="utf-8")
    for heading in (
        "## Steps",
        "## Hardware",
        "## Lossless checks",
        "## The moesd-gpu suite",
        "## Measured beside predicted",
        "## From the configs alone",
    ):
        assert heading in readme
    assert "Mode: smoke" in readme and "identical to plain decoding" in readme
    assert "| 1 | 2 | 0.9 |" in readme  # OLMoE at B = 1, gamma 2: measured beside predicted
