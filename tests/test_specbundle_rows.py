"""specmoe.calibration.specbundle: the GPU-count rules, the standing τ rule and the shipped rows."""

from __future__ import annotations

import csv
import io

import pytest

from specmoe.calibration import specbundle
from specmoe.calibration.catalog import PUBLISHED, Catalog, data_file


@pytest.fixture(scope="module")
def script():
    return specbundle


@pytest.fixture(scope="module")
def catalog():
    return Catalog.shipped()


def test_gpu_count_rules(script):
    h200 = script.H200_BYTES
    assert script.devices(0.8 * h200, "primary") == 1
    assert script.devices(0.81 * h200, "primary") == 8
    assert script.devices(0.95 * h200, "sensitivity") == 2
    assert script.devices(3.0 * h200, "sensitivity") == 4
    assert script.devices(20 * h200, "sensitivity") == 8  # none holds it: a node


def _data(script, speedup: float, tau: float) -> dict:
    """One dataset per target, the 3-step chain only, the SpecBundle head at `speedup` and `tau`."""
    result = {
        "batch_size": 8,
        "steps": 3,
        "topk": 1,
        "num_draft_tokens": 4,
        "metrics": [{"Name": "Wihtout EAGLE3", "output_throughput": 100.0, "accept_length": 1.0}],
    }
    data = {}
    for name, target in script.TARGETS.items():
        head = {"Name": target.draft, "output_throughput": 100.0 * speedup, "accept_length": tau}
        metrics = [*result["metrics"], head]
        data[name] = {"gsm8k": {"benchmark_name": "gsm8k", "results": [{**result, "metrics": metrics}]}}
    return data


def test_rows_apply_the_standing_rule(script, catalog):
    fine = script.rows(_data(script, 1.5, 2.5), "primary", catalog)
    assert len(fine) == len(script.TARGETS)
    assert {r["role"] for r in fine} == {"reported"}
    assert all(r["gamma"] == 3 and r["acceptance_kind"] == "tau" and r["engine"] == "sglang" for r in fine)
    above = script.rows(_data(script, 2.6, 2.5), "primary", catalog)
    assert {r["role"] for r in above} == {"excluded"}
    assert all("more than its own τ" in r["note"] for r in above)
    assert {r["role"] for r in script.rows(_data(script, 2.6, 2.5), "primary", catalog, standing=False)} == {
        "reported"
    }


def test_shipped_rows_follow_the_rules(script, catalog):
    """The rows in published.csv carry the primary count of their target's weights."""
    text = data_file(PUBLISHED).read_bytes().decode("utf-8")
    shipped = [r for r in csv.DictReader(io.StringIO(text, newline="")) if r["id"].startswith(script.PREFIX)]
    assert len(shipped) == 46
    by_config = {t.config: t for t in script.TARGETS.values()}
    for row in shipped:
        count = script.devices(script.weight_bytes(by_config[row["target"]], catalog), "primary")
        assert row["hardware"] == script.HARDWARE[count] and int(row["devices"]) == count
        above = float(row["speedup"]) > float(row["acceptance"])
        assert row["role"] == ("excluded" if above else "reported")
