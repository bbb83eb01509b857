"""A plain step the user measured: what the model does not explain is charged to every target pass."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from specmoe.calibration.catalog import shipped_rows
from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.perf.drafts import DraftMethod
from specmoe.perf.engines import load_engines
from specmoe.perf.firstprinciples import load_config
from specmoe.perf.hardware import load_hardware
from specmoe.perf.setup import configured_setup, with_measured_step

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "perf-examples"


@pytest.fixture(scope="module")
def setup():
    return configured_setup(
        load_config(EXAMPLES / "qwen3-30b-a3b.json"),
        load_hardware(EXAMPLES / "h100-sxm.json"),
        load_engines()["sglang"],
        DraftMethod.EAGLE3,
    )


def _plain(s, batch: int) -> float:
    return s.target.time(batch, 1) + s.plain_host_s


def test_a_longer_step_is_charged_to_every_target_pass(setup):
    batch = 8
    measured = 2 * _plain(setup, batch)
    stepped = with_measured_step(setup, batch, measured)
    gap = measured - _plain(setup, batch)
    assert _plain(stepped, batch) == pytest.approx(measured)
    # a verify pass pays the same extra time; the drafter does not
    assert stepped.target.time(batch, 4) == pytest.approx(setup.target.time(batch, 4) + gap)
    assert stepped.draft_times.time(batch, 1) == setup.draft_times.time(batch, 1)
    assert stepped.measured_step == (batch, measured, pytest.approx(gap), 1.0, "fixed")
    # verification got relatively cheaper, so SD pays more at the same acceptance
    assert stepped.speedup(0.7, 3, batch) > setup.speedup(0.7, 3, batch)


def test_a_shorter_step_changes_nothing(setup):
    stepped = with_measured_step(setup, 8, 0.5 * _plain(setup, 8))
    assert stepped.target == setup.target and stepped.measured_step[2] == 0.0


def test_a_step_must_be_positive(setup):
    with pytest.raises(SpecmoeError, match="positive"):
        with_measured_step(setup, 8, 0.0)


def test_a_published_row_measured_its_step_when_it_gives_both_throughputs():
    row = next(r for r in shipped_rows() if r.id == "specbundle-qwen3-30b-a3b-gsm8k-b8")
    assert "1488.4 vs 1071.3 tok/s" in row.note
    assert row.plain_step_s == pytest.approx(8 / 1071.3)
    assert replace(row, note="throughput 10 vs 5 tok/s per GPU").plain_step_s is None
    assert replace(row, note="no throughputs").plain_step_s is None


def _args(*extra: str) -> list[str]:
    args = ["advise", "--config", str(EXAMPLES / "qwen3-30b-a3b.json"), "--draft", "eagle3"]
    args += ["--hardware", str(EXAMPLES / "h100-sxm.json"), "--engine", "sglang"]
    return [*args, "--gamma", "3", "--acceptance", "2.6", "--acceptance-kind", "tau", *extra]


def test_advise_takes_a_measured_step_at_one_batch(capsys):
    assert main(_args("--batch", "8", "--plain-step-ms", "40", "--json")) == 0
    advice = json.loads(capsys.readouterr().out)
    assert advice["measured_step"]["batch"] == 8 and advice["measured_step"]["added_per_pass_s"] > 0
    assert main(_args("--batch", "8", "--plain-step-ms", "40")) == 0
    assert "measured: a plain step of 40.00 ms at B=8; the " in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--batch", "8,16", "--plain-step-ms", "40"), "exactly one --batch"),
        (("--batch", "8", "--plain-step-ms", "0"), "positive number of ms"),
    ],
)
def test_a_measured_step_needs_one_batch_and_a_positive_time(capsys, extra, message):
    assert main(_args(*extra)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_measured_step_needs_configs_not_a_fit(capsys, tmp_path):
    assert main(["advise", str(tmp_path / "some.fit.json"), "--plain-step-ms", "5"]) == 2
    assert "--plain-step-ms prices from configs" in capsys.readouterr().err
