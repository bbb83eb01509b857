"""The priors file covers every hand-set value of the CUDA and Apple-silicon engine profiles."""

from __future__ import annotations

import pytest

from specmoe.errors import SpecmoeError
from specmoe.perf.priors import (
    TABLES,
    Basis,
    Prior,
    fitted_keys,
    load_priors,
    prior_profile,
    value_of,
    with_values,
)
from specmoe.perf.runtimes import load_engines

# what a profile holds that is not a number to source: its identity and its own annotations
_NOT_VALUES = {
    "name",
    "description",
    "device",
    "sources",
    "band_basis",
    "band_rows",
    "max_shortfall",
    "hybrid_rollback",
}
# hybrid_rollback is a method, not a number: each profile names its source in `sources`;
# max_shortfall, like band_rows, is a statistic of the held-out errors, not a hand-set value


def _set_keys(profile) -> set[str]:
    keys = set()
    for field in profile.model_fields_set - _NOT_VALUES:
        if field in TABLES:
            keys |= {f"{field}.{entry}" for entry in getattr(profile, field)}
        else:
            keys.add(field)
    return keys


def _gpu_profiles():
    return {name: p for name, p in load_engines().items() if p.device in ("cuda", "mps")}


def test_every_gpu_profile_value_has_a_prior_or_a_source():
    priors = load_priors()
    for name, profile in _gpu_profiles().items():
        assert name in priors, f"{name} has no priors"
        missing = _set_keys(profile) - set(priors[name])
        assert not missing, f"{name}: no prior for {sorted(missing)}"
        for key, prior in priors[name].items():
            assert prior.basis is Basis.PRIOR or prior.source, f"{name}.{key}"


def test_shipped_values_are_the_priors_except_where_refitted():
    priors = load_priors()
    for name, profile in _gpu_profiles().items():
        fitted = set(fitted_keys(priors[name])) | {"uncertainty"}  # the band comes from held-out errors
        for key, prior in priors[name].items():
            shipped = value_of(profile, key)
            if key in fitted:
                if prior.fit is not None and shipped is not None:
                    assert prior.fit.low <= shipped <= prior.fit.high, f"{name}.{key}"
                continue
            assert shipped == pytest.approx(prior.value), f"{name}.{key}: differs from its prior"


def test_every_engine_refits_the_same_three_constants():
    for name, table in load_priors().items():
        assert fitted_keys(table) == ("round_s", "round_seq_s", "compute_efficiency.default"), name


def test_prior_profile_resets_fitted_constants_and_keeps_the_rest():
    vllm = load_engines()["vllm"]
    start = prior_profile(vllm, load_priors()["vllm"])
    assert start.round_s == 0.001 and start.round_seq_s == 0.0
    assert start.compute_efficiency == {"default": 0.6, "int": 0.45}
    assert start.step_s == vllm.step_s
    moved = with_values(start, {"compute_efficiency.default": 0.9, "round_s": 0.002})
    assert moved.compute_efficiency == {"default": 0.9, "int": 0.45} and moved.round_s == 0.002


def test_a_published_prior_names_its_source():
    with pytest.raises(ValueError, match="names its source"):
        Prior(value=0.8, basis="published", why="a figure somewhere")
    with pytest.raises(ValueError, match="outside its fit range"):
        Prior(value=2.0, basis="prior", why="too far out here", fit={"low": 0, "high": 1, "scale": 0.1})


def test_priors_errors_are_one_line(monkeypatch):
    import specmoe.perf.priors as module

    monkeypatch.setattr(module, "_SHIPPED", "runtimes.toml")  # a file of another shape
    with pytest.raises(SpecmoeError):
        load_priors()
