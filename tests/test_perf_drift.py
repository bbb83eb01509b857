"""`specmoe model check`: a fit's points timed again and judged against what the fit says.

The judgement is tested on profiles whose times the model itself wrote (known drift in, known
verdict out); the command is run once on a real tiny model for its shape, never for its times."""

from __future__ import annotations

import json

import pytest
from synthetic_profiles import synthetic_profile

from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.perf.drift import MIN_TOLERANCE, check_points, compare, format_check, tolerance_of
from specmoe.perf.fit import fit_profile
from specmoe.perf.model import Constants, MoEShape

SHAPE = MoEShape(8, 2)
TRUE = Constants(
    overhead_s=1e-3, sequence_s=2e-4, dense_s=4e-3, expert_s=5e-4, knee_tokens=6.0, sharpness=3.0
)
GRID = [(b, t) for b in (1, 2, 4, 8) for t in (1, 2, 3, 5)]


def _fit() -> dict:
    profile = synthetic_profile(TRUE, SHAPE, GRID, noise=0.01) | {"created": "2026-11-23T10:00:00+00:00"}
    return fit_profile(profile)


def _now(scale: float, model: dict | None = None) -> dict:
    """The machine today: every step `scale` times what it was."""
    profile = synthetic_profile(TRUE, SHAPE, [(1, 1), (1, 5), (4, 1), (4, 5)])
    for point in profile["points"]:
        point["median_s"] *= scale
    return profile | {"created": "2026-11-25T10:00:00+00:00", "model": model or profile["model"]}


def test_a_fit_records_when_its_times_were_measured():
    assert _fit()["profiled"] == "2026-11-23T10:00:00+00:00"


def test_the_points_checked_are_the_fits_own_small_ones():
    assert check_points({"batch": [1, 2, 4, 8, 16], "tokens": [1, 2, 3, 5, 9]}) == ([1, 4], [1, 5])
    assert check_points({"batch": [2, 8], "tokens": [2, 3]}) == ([2], [2, 3])


def test_the_tolerance_is_the_fits_own_error_doubled_with_a_floor():
    assert tolerance_of({"quality": {"heldout_median_abs_rel": 0.01}}) == MIN_TOLERANCE
    assert tolerance_of({"quality": {"heldout_median_abs_rel": 0.08}}) == pytest.approx(0.16)
    assert tolerance_of({"quality": {"heldout_median_abs_rel": None, "fit_median_abs_rel": 0.07}}) == (
        pytest.approx(0.14)
    )


def test_an_unchanged_machine_is_current():
    check = compare(_fit(), _now(1.0))
    assert check.current
    assert check.median_ratio == pytest.approx(1.0, abs=0.05)
    assert check.age_days == pytest.approx(2.0)
    assert format_check(check, "fit.json").splitlines()[-1].startswith("CURRENT")


def test_a_machine_that_steps_faster_has_drifted_and_says_by_how_much():
    check = compare(_fit(), _now(0.7))
    assert not check.current
    verdict = format_check(check, "fit.json").splitlines()[-1]
    assert verdict.startswith("DRIFTED: this machine steps 30% faster")
    assert "profile the model again" in verdict


def test_another_models_times_are_refused_naming_the_field():
    other = {"name": "x", "is_moe": True, "num_experts": 16, "top_k": 2}
    with pytest.raises(SpecmoeError, match="num_experts is 8, this model's 16"):
        compare(_fit(), _now(1.0, other))


COMMON = ("--model", "draft-xs", "--threads", "1")


@pytest.fixture(scope="module")
def tiny_fit(tiny_zoo, tmp_path_factory):
    folder = tmp_path_factory.mktemp("drift")
    profile, fit = folder / "profile.json", folder / "fit.json"
    grid = ("--batch", "1,2,4", "--tokens", "1,2", "--repeats", "1", "--quiet")
    assert main(["profile", *COMMON, "--zoo", str(tiny_zoo), *grid, "--out", str(profile)]) == 0
    assert main(["model", "fit", str(profile), "--out", str(fit)]) == 0
    return fit


def test_the_command_times_the_model_and_prints_a_verdict(capsys, tiny_zoo, tiny_fit):
    capsys.readouterr()
    assert (
        main(["model", "check", str(tiny_fit), *COMMON, "--zoo", str(tiny_zoo), "--repeats", "1", "--json"])
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    assert {(p["batch"], p["tokens"]) for p in payload["points"]} == {(1, 1), (1, 2), (4, 1), (4, 2)}
    assert isinstance(payload["current"], bool) and payload["profiled"]


def test_the_command_refuses_a_model_of_another_dtype(capsys, tiny_zoo, tiny_fit):
    capsys.readouterr()
    code = main(["model", "check", str(tiny_fit), *COMMON, "--zoo", str(tiny_zoo), "--dtype", "bfloat16"])
    assert code != 0
    assert "the fit is of another model: its dtype is 'float32'" in capsys.readouterr().err
