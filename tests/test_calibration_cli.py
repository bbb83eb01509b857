"""`specmoe calibrate`: one command for the calibration, its inputs shipped as package data, its
fitted constants written rather than pasted, and the strict / design-time split."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from specmoe.calibration.catalog import PUBLISHED, Catalog, data_file, shipped_rows
from specmoe.calibration.heldout import Scored
from specmoe.calibration.split import STRICT_SOURCES, split_of
from specmoe.calibration.verdicts import ratio_band
from specmoe.cli import main
from specmoe.perf.breakeven import Verdict, band_verdict
from specmoe.perf.drafts import DraftMethod
from specmoe.perf.engines import load_engines
from specmoe.perf.firstprinciples import load_config
from specmoe.perf.hardware import load_hardware
from specmoe.perf.setup import StepForm, configured_setup, with_measured_step

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "specmoe" / "perf" / "examples"
PICK = ("eagle3-vllm-3090-b2", "eagle3-vllm-3090-b8", "eagle3-vllm-3090-b24")  # one sweep


def _subset(tmp_path: Path, ids) -> Path:
    text = data_file(PUBLISHED).read_bytes().decode("utf-8")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = [r for r in reader if r["id"] in ids]
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=reader.fieldnames, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_calibrate_has_its_commands(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["calibrate", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    for command in ("fit", "heldout", "frozen", "check", "specbundle"):
        assert command in out


def test_no_calibration_script_is_left_in_benchmarks():
    scripts = {p.name for p in (ROOT / "benchmarks").rglob("*.py")}
    gone = {"calibration.py", "heldout_intervals.py", "fit_check.py", "frozen_test.py"}
    gone |= {"constant_intervals.py", "measured_step_check.py", "specbundle_rows.py", "step_time_audit.py"}
    assert not scripts & gone


def test_the_catalog_reads_package_data_once():
    catalog = Catalog.shipped()
    assert len(catalog.rows) == len(shipped_rows()) and len(catalog.scored) == 126
    first = catalog.config("qwen3-30b-a3b")
    assert catalog.with_rows(catalog.rows[:3]).config("qwen3-30b-a3b") is first  # the cache is shared
    assert catalog.hardware("h100-sxm").bandwidth_bytes_per_s == 3.35e12


def test_every_scored_row_is_strict_or_design_time():
    catalog = Catalog.shipped()
    strict = [r for r in catalog.scored if split_of(r) == "strict predictions"]
    assert len(strict) == 66 and len(catalog.scored) - len(strict) == 60
    assert set(STRICT_SOURCES) <= {r.source for r in catalog.scored}


def test_frozen_prices_a_subset_from_a_rows_file(capsys, tmp_path):
    path = _subset(tmp_path, PICK)
    code = main(["calibrate", "frozen", "--data", str(path), "--source", "D-cut, arXiv 2607.14647"])
    assert code == 2 and "no rows from source" in capsys.readouterr().err
    vllm = "EAGLE-3, arXiv 2503.01840"
    assert main(["calibrate", "frozen", "--data", str(path), "--source", vllm]) == 0
    out = capsys.readouterr().out
    assert "eagle3-vllm-3090-b8" in out and "verdict, shipped rule" in out


def test_check_steps_runs_on_a_rows_file(capsys, tmp_path):
    path = _subset(tmp_path, ("specbundle-qwen3-30b-a3b-gsm8k-b8",))
    assert main(["calibrate", "check", "--steps", "--data", str(path)]) == 0
    assert "specbundle-qwen3-30b-a3b-gsm8k-b8 | sglang | 8 |" in capsys.readouterr().out


def test_a_ratio_band_commits_unless_it_straddles_one():
    assert band_verdict(3.0, 1.3, 0.8, 1.6) is Verdict.GO  # 1.04 .. 2.08
    assert band_verdict(3.0, 0.5, 0.8, 1.6) is Verdict.NO_GO  # 0.40 .. 0.80
    assert band_verdict(3.0, 1.0, 0.8, 1.6) is Verdict.DEPENDS  # 0.80 .. 1.60
    assert band_verdict(0.5, None, 0.8, 1.6) is Verdict.NO_GO  # even full acceptance, times q90
    assert band_verdict(3.0, None, 0.8, 1.6) is Verdict.DEPENDS
    row = shipped_rows()[0]
    few = [Scored(row, "held out", 1.0)] * 4
    assert ratio_band(few) == pytest.approx((1 / 1.5, 1.5))


def test_a_scaled_step_grows_with_the_pass():
    setup = configured_setup(
        load_config(EXAMPLES / "qwen3-30b-a3b.json"),
        load_hardware(EXAMPLES / "h100-sxm.json"),
        load_engines()["sglang"],
        DraftMethod.EAGLE3,
    )
    batch, measured = 8, 3 * setup.plain_step_s(8)
    scaled = with_measured_step(setup, batch, measured, StepForm.SCALED)
    fixed = with_measured_step(setup, batch, measured, StepForm.FIXED)
    assert scaled.plain_step_s(batch) == pytest.approx(measured)
    assert fixed.plain_step_s(batch) == pytest.approx(measured)
    factor = scaled.measured_step[3]
    assert scaled.target.time(batch, 4) == pytest.approx(factor * setup.target.time(batch, 4))
    assert scaled.draft_times.time(batch, 1) == pytest.approx(factor * setup.draft_times.time(batch, 1))
    # the fixed form makes a verify relatively cheaper than the scaled one
    assert fixed.target.time(batch, 4) / fixed.target.time(batch, 1) < scaled.target.time(
        batch, 4
    ) / scaled.target.time(batch, 1)
    shorter = with_measured_step(setup, batch, setup.plain_step_s(batch) / 2, StepForm.SCALED)
    assert shorter.target == setup.target
    with pytest.raises(Exception, match="finite"):
        with_measured_step(setup, batch, float("inf"))
