"""constants.toml is the one home of every CUDA and Apple-silicon profile value: its prior, its
fit range and its fitted value together; the profiles read it, `calibrate fit --write` writes it."""

from __future__ import annotations

import tomllib

import pytest

from specmoe.calibration.fit import prior_profile, value_of, with_values
from specmoe.errors import SpecmoeError
from specmoe.perf.constants import (
    Basis,
    Constant,
    fitted_keys,
    load_constants,
    parse_constants,
    shipped_text,
    with_fitted,
)
from specmoe.perf.engines import _parse, load_engines


def _gpu_profiles():
    return {name: p for name, p in load_engines().items() if p.device in ("cuda", "mps")}


def test_every_gpu_profile_takes_its_values_from_the_constants():
    constants = load_constants()
    for name, profile in _gpu_profiles().items():
        assert name in constants, f"{name} has no constants"
        for key, constant in constants[name].items():
            assert constant.basis is Basis.PRIOR or constant.source, f"{name}.{key}"
            assert value_of(profile, key) == pytest.approx(constant.shipped), f"{name}.{key}"


def test_a_fitted_band_says_where_it_comes_from():
    constants, engines = load_constants(), load_engines()
    for name, table in constants.items():
        band = table["uncertainty"]
        if band.fitted is None:
            assert engines[name].band_basis.value == "prior" and engines[name].max_shortfall is None
        else:
            assert engines[name].band_basis.value == "held-out"
            assert engines[name].band_rows == band.rows and engines[name].max_shortfall == band.shortfall


def test_runtimes_toml_repeats_no_constant():
    raw = {"engines": {"vllm": {"description": "x", "device": "cuda", "round_s": 0.002}}}
    with pytest.raises(SpecmoeError, match="one home"):
        _parse(raw, "engines.toml", load_constants())


def test_every_engine_refits_the_same_three_constants():
    for name, table in load_constants().items():
        assert fitted_keys(table) == ("round_s", "round_seq_s", "compute_efficiency.default"), name


def test_prior_profile_resets_fitted_constants_and_keeps_the_rest():
    vllm = load_engines()["vllm"]
    start = prior_profile(vllm, load_constants()["vllm"])
    assert start.round_s == 0.001 and start.round_seq_s == 0.0
    assert start.compute_efficiency == {"default": 0.6, "int": 0.45}
    assert start.step_s == vllm.step_s
    moved = with_values(start, {"compute_efficiency.default": 0.9, "round_s": 0.002})
    assert moved.compute_efficiency == {"default": 0.9, "int": 0.45} and moved.round_s == 0.002


def test_a_constant_checks_its_own_numbers():
    with pytest.raises(ValueError, match="names its source"):
        Constant(value=0.8, basis="published", why="a figure somewhere")
    fit = {"low": 0, "high": 1, "scale": 0.1}
    with pytest.raises(ValueError, match="outside its fit range"):
        Constant(value=2.0, basis="prior", why="too far out here", fit=fit)
    with pytest.raises(ValueError, match=r"fitted 1\.5 lies outside"):
        Constant(value=0.5, basis="prior", why="fitted too far", fit=fit, fitted=1.5)
    with pytest.raises(ValueError, match="finite"):
        Constant(value=float("nan"), basis="prior", why="not a number")


def test_constants_errors_are_one_line():
    runtimes = "[engines.vllm]\ndescription = 'x'\ndevice = 'cuda'\n"
    with pytest.raises(SpecmoeError, match="must be a table"):
        parse_constants(runtimes, "other.toml")
    with pytest.raises(SpecmoeError, match="rows and shortfall belong to uncertainty"):
        parse_constants("[engines.vllm.round_s]\nvalue = 0.0\nbasis = 'prior'\nwhy = 'words'\nrows = 3\n")
    with pytest.raises(SpecmoeError, match="not valid TOML"):
        parse_constants("[engines.vllm.round_s\n")


def test_writing_fitted_values_keeps_everything_else():
    text = shipped_text()
    updates = {("vllm", "round_s"): {"fitted": 0.00123}, ("mlx", "uncertainty"): {"fitted": 1.4, "rows": 7}}
    written = with_fitted(text, updates)
    again = parse_constants(written)
    assert again["vllm"]["round_s"].fitted == 0.00123
    assert again["mlx"]["uncertainty"].fitted == 1.4 and again["mlx"]["uncertainty"].rows == 7
    assert [line for line in written.splitlines() if line.startswith("#")] == [
        line for line in text.splitlines() if line.startswith("#")
    ]
    # the same values written again change nothing; a None drops the line
    assert with_fitted(written, updates) == written
    assert (
        "fitted"
        not in tomllib.loads(with_fitted(written, {("mlx", "uncertainty"): {"fitted": None, "rows": None}}))[
            "engines"
        ]["mlx"]["uncertainty"]
    )
    with pytest.raises(SpecmoeError, match="no table"):
        with_fitted(text, {("vllm", "no_such_key"): {"fitted": 1.0}})
