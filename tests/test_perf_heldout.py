"""Leave-one-source-out sees nothing of the source it predicts; the baselines neither."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.heldout import Scored, band_of, c_tau, leave_one_source_out, shortfall_of, trivial
from specmoe.calibration.rows import Role
from specmoe.perf.constants import load_constants
from specmoe.perf.engines import load_engines

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results" / "calibration"
PICK = {  # two hf-eager sources, two rows each, and one vllm sweep from a single source
    "specbench-a100-vicuna7b-eagle",
    "specbench-a100-vicuna7b-pld",
    "eagle2-hf-vicuna7b-mtbench",
    "pld-hf-vicuna7b-mtbench",
    "eagle3-vllm-3090-b2",
    "eagle3-vllm-3090-b8",
}


@pytest.fixture(scope="module")
def catalog():
    return Catalog.shipped()


@pytest.fixture(scope="module")
def rows(catalog):
    return [r for r in catalog.rows if r.id in PICK]


def _by_id(results):
    return {s.row.id: s for s in results}


def test_a_source_is_predicted_without_its_own_measurements(catalog, rows):
    engines, priors = load_engines(), load_constants()
    before = _by_id(leave_one_source_out(catalog.with_rows(rows), engines, priors))
    # the Spec-Bench rows measured twice as fast: their held-out predictions must not move
    doubled = [replace(r, speedup=2 * r.speedup) if r.source.startswith("Spec-Bench") else r for r in rows]
    after = _by_id(leave_one_source_out(catalog.with_rows(doubled), engines, priors))
    for rid in ("specbench-a100-vicuna7b-eagle", "specbench-a100-vicuna7b-pld"):
        assert after[rid].predicted == pytest.approx(before[rid].predicted, rel=1e-9)
    # ... while the other source, fitted on them, does
    assert after["eagle2-hf-vicuna7b-mtbench"].constants != before["eagle2-hf-vicuna7b-mtbench"].constants


def test_an_engine_with_one_source_has_no_held_out_estimate(catalog, rows):
    held = _by_id(leave_one_source_out(catalog.with_rows(rows), load_engines(), load_constants()))
    assert held["eagle3-vllm-3090-b8"].predicted is None and held["eagle3-vllm-3090-b8"].verdict is None
    assert held["eagle2-hf-vicuna7b-mtbench"].predicted is not None


def test_c_tau_is_fitted_on_the_other_sources(rows):
    before = _by_id(c_tau(rows))
    doubled = [replace(r, speedup=2 * r.speedup) if r.source.startswith("EAGLE-2") else r for r in rows]
    after = _by_id(c_tau(doubled))
    own = "pld-hf-vicuna7b-mtbench"
    assert after[own].predicted == pytest.approx(before[own].predicted)
    assert after["specbench-a100-vicuna7b-pld"].predicted == pytest.approx(
        2 * before["specbench-a100-vicuna7b-pld"].predicted
    )


def test_trivial_takes_the_anchor_where_no_acceptance_is_reported(catalog):
    rows = list(catalog.rows)
    anchored = next(r for r in rows if r.role is Role.ANCHORED)
    scored = _by_id(trivial(rows))
    anchor = next(r for r in rows if r.id == anchored.anchor)
    assert scored[anchored.id].predicted == anchor.speedup


def test_bands_need_five_errors_and_cover_eighty_percent():
    assert band_of([1.1, 1.2, 1.3, 1.4]) is None
    assert band_of([1.0, 1.1, 1.2, 1.3, 1.4, 1.5]) == pytest.approx(1.4)


def test_the_shortfall_counts_only_predictions_below_the_measurement(rows):
    row = rows[0]

    def scored(measured: float, predicted: float) -> Scored:
        return Scored(replace(row, speedup=measured), "held out", predicted)

    short = [scored(1.5, 1.0), scored(1.0, 2.5), scored(2.0, 1.6), scored(1.2, 1.2)]
    assert shortfall_of(short) is None  # too few to say
    # 2.5× over-predicted does not count: an over-prediction cannot hide a speedup
    assert shortfall_of([*short, scored(1.1, 1.0)]) == pytest.approx(1.5)
    assert shortfall_of([scored(1.0, 2.0)] * 5) == 1.0


def test_shipped_profiles_carry_the_calibrations_bands_and_shortfalls():
    import json

    bands = json.loads((RESULTS / "calibration.json").read_text(encoding="utf-8"))["bands"]
    engines = load_engines()
    for name, band in bands.items():
        assert engines[name].uncertainty == band["band"], name
        assert engines[name].max_shortfall == band["max_shortfall"], name
