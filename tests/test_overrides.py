"""`bench run --set/--group`: a shorter pass of a shipped suite, checked by the suite's own rules."""

from __future__ import annotations

import pytest

from specmoe.errors import SpecmoeError
from specmoe.suite.expand import expand
from specmoe.suite.load import builtin_suite_path, load_suite
from specmoe.suite.overrides import SuiteOverrides, apply_overrides, parse_assignment


def test_parse_assignment_reads_toml_values_and_falls_back_to_text():
    assert parse_assignment("max_new_tokens=64") == ("max_new_tokens", 64)
    assert parse_assignment("gamma = [2, 4]") == ("gamma", [2, 4])
    assert parse_assignment('prompt_set="code"') == ("prompt_set", "code")
    assert parse_assignment("prompt_set=code") == ("prompt_set", "code")
    with pytest.raises(SpecmoeError, match="KEY=VALUE"):
        parse_assignment("max_new_tokens")


def test_settings_are_forced_in_defaults_and_groups_without_changing_the_input():
    raw = {"defaults": {"repeats": 3}, "groups": [{"name": "a", "gamma": [4, 8]}, {"name": "b"}]}
    out = apply_overrides(raw, SuiteOverrides(settings=(("gamma", [2]), ("repeats", 1))))
    assert out["defaults"] == {"repeats": 1, "gamma": [2]}
    assert out["groups"][0]["gamma"] == [2]
    assert "gamma" not in out["groups"][1]  # b inherits it from [defaults]
    assert raw["groups"][0]["gamma"] == [4, 8]


def test_shipped_study_suite_shortened_keeps_its_design():
    full = expand(load_suite(builtin_suite_path("study")))
    short = expand(
        load_suite(
            builtin_suite_path("study"),
            SuiteOverrides(settings=(("max_new_tokens", 32), ("repeats", 2)), groups=("B",)),
        )
    )
    assert {s.group for s in short} == {"B"}
    full_b = {(s.target, s.draft, s.gamma, s.prompt_set) for s in full if s.group == "B"}
    assert {(s.target, s.draft, s.gamma, s.prompt_set) for s in short if s.arm == "sd"} == full_b
    # Without group A, each SD configuration still gets its paired baseline.
    assert {s.baseline_key for s in short if s.arm == "sd"} <= {s.config_key for s in short}
    assert {s.max_new_tokens for s in short} == {32}
    assert {s.repeat for s in short} == {0, 1}


def test_unknown_group_and_bad_value_name_the_problem():
    with pytest.raises(SpecmoeError, match=r"--group Z: no such group.*available: A, B"):
        load_suite(builtin_suite_path("study"), SuiteOverrides(groups=("Z",)))
    with pytest.raises(SpecmoeError, match="max_new_tokens"):
        load_suite(builtin_suite_path("study"), SuiteOverrides(settings=(("max_new_tokens", 0),)))


def test_group_qualified_setting_changes_that_group_only():
    raw = {
        "defaults": {"repeats": 3},
        "groups": [{"name": "a", "gamma": [4, 8]}, {"name": "b", "gamma": [1]}],
    }
    out = apply_overrides(raw, SuiteOverrides(settings=(("a.gamma", [2]),)))
    assert [g["gamma"] for g in out["groups"]] == [[2], [1]]
    assert out["defaults"] == {"repeats": 3}
    with pytest.raises(SpecmoeError, match=r"no group 'c'.*available: a, b"):
        apply_overrides(raw, SuiteOverrides(settings=(("c.gamma", [2]),)))


def test_set_model_path_replaces_a_zoo_model(tiny_zoo, monkeypatch):
    monkeypatch.chdir(tiny_zoo)
    suite = load_suite(builtin_suite_path("quick"), SuiteOverrides(settings=(("models.moe.path", "moe"),)))
    moe = suite.models["moe"]
    # A relative path on the command line is taken from the current directory, not the suite's.
    mine = str((tiny_zoo / "moe").resolve())
    assert (moe.zoo, moe.path) == (None, mine)
    assert suite.models["draft-xs"].zoo == "draft-xs"
    moe_runs = [s for s in expand(suite) if s.target == "moe"]
    assert moe_runs
    assert all(s.target_model.identity == {"path": mine, "backend": "hf"} for s in moe_runs)


def test_set_model_key_on_a_dotted_name_and_other_keys():
    raw = {"models": {"qwen2.5": {"zoo": "moe"}}, "groups": []}
    out = apply_overrides(raw, SuiteOverrides(settings=(("models.qwen2.5.backend", "llamacpp"),)))
    assert out["models"]["qwen2.5"] == {"zoo": "moe", "backend": "llamacpp"}
    out = apply_overrides(raw, SuiteOverrides(settings=(("models.qwen2.5.url", "http://h:8000"),)))
    assert out["models"]["qwen2.5"] == {"url": "http://h:8000"}


def test_set_unknown_model_is_one_line_with_did_you_mean():
    with pytest.raises(SpecmoeError) as info:
        load_suite(builtin_suite_path("quick"), SuiteOverrides(settings=(("models.mo.path", "/x"),)))
    message = str(info.value)
    assert message.startswith("--set models.mo.path: no model 'mo' in the suite (did you mean 'moe'?)")
    assert "available: moe" in message and "\n" not in message
    with pytest.raises(SpecmoeError, match=r"expected models\.NAME\.KEY=VALUE"):
        load_suite(builtin_suite_path("quick"), SuiteOverrides(settings=(("models.moe", "/x"),)))


def test_set_unknown_model_key_is_the_suite_error():
    with pytest.raises(SpecmoeError, match=r"models\.moe\.pth: unknown key 'pth'; did you mean 'path'\?"):
        load_suite(builtin_suite_path("quick"), SuiteOverrides(settings=(("models.moe.pth", "/x"),)))
