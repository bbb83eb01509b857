"""The suite format's pydantic models: the loader validates through them, their errors read as one
line naming the file and key, and they print as a JSON Schema."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError
from suite_files import TINY_ZOO
from tiny_suites import TINY_SD_GROUP, tiny_sd_suite

from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.suite.load import SUITES_DIR, load_suite
from specmoe.suite.schema import SuiteFile, builtin_defaults

SHIPPED = sorted(SUITES_DIR.glob("*.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_suite_validates_against_the_schema(path: Path):
    load_suite(path)  # the loader accepts it ...
    SuiteFile.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))  # ... and so does the schema


def test_a_test_suite_validates_and_unknown_keys_are_refused_by_both(tmp_path):
    path = tiny_sd_suite(tmp_path, "s", {"repeats": 2, "prompts": 1})
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    SuiteFile.model_validate(raw)
    path = tiny_sd_suite(tmp_path, "s", {"repeat": 2, "prompts": 1})
    with pytest.raises(
        SpecmoeError, match=r"defaults\.repeat: unknown key 'repeat'; did you mean 'repeats'\?"
    ):
        load_suite(path)
    with pytest.raises(ValidationError):
        SuiteFile.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    ("defaults", "message"),
    [
        ({"cpus": 0}, "defaults.cpus: cpus must be > 0, got 0"),
        ({"gpus": -1}, "defaults.gpus: gpus must be >= 0, got -1"),
        ({"prompts": "some"}, "defaults.prompts: prompts must be a count >= 1 or \"all\", got 'some'"),
        ({"prompts": 0}, 'defaults.prompts: prompts must be a count >= 1 or "all", got 0'),
        ({"request_rate": ["fast"]}, "defaults.request_rate: request_rate must be a number of requests/s"),
        ({"request_rate": -1.0}, "defaults.request_rate: request_rate must be a number of requests/s"),
        ({"temperature": math.nan}, "defaults.temperature: temperature must be a finite number, got nan"),
        ({"temperature": math.inf}, "defaults.temperature: temperature must be a finite number, got inf"),
        ({"cpus": math.inf}, "defaults.cpus: cpus must be a finite number, got inf"),
        ({"compile": 1}, "defaults.compile: compile must be true or false, got 1"),
        ({"device": ["cpu", "cuda:x"]}, "defaults.device: unknown device 'cuda:x'; use cpu, mps, cuda"),
        ({"oracle_cost": 3}, "defaults.oracle_cost: expected a string, got an integer 3"),
        ({"gamma": [[2]]}, "defaults.gamma: expected an integer, got an array [2]"),
        ({"draft": ["oracle:2"]}, "defaults.draft: "),
        (
            {"prompt_set": "code", "prompt_length": 8},
            "defaults.prompt_length: set prompt_set or prompt_length",
        ),
    ],
)
def test_schema_errors_are_one_line_naming_the_key(tmp_path, defaults, message):
    path = tiny_sd_suite(tmp_path, "s", defaults)
    with pytest.raises(SpecmoeError) as info:
        load_suite(path)
    assert str(info.value).startswith(f"{path}: {message}") and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"schema": True}, "schema: unsupported schema True; this specmoe reads schema = 1"),
        ({"schema_version": 1}, "schema_version: unknown key 'schema_version'"),
        ({"zoo": 3}, "zoo: expected a table, got an integer"),
        ({"zoo": {**TINY_ZOO, "seed": -1}}, "zoo.seed: seed must be >= 0, got -1"),
        (
            {"defaults": {"dtype": "f16"}},
            "defaults.dtype: unknown dtype 'f16' (did you mean 'float16'?); choose from",
        ),
        ({"groups": TINY_SD_GROUP}, "groups: a suite needs at least one [[groups]] table"),
        ({"groups": [{**TINY_SD_GROUP, "requests": "8"}]}, "groups[0].requests: expected an integer"),
    ],
)
def test_table_and_type_errors_name_the_table(tmp_path, parts, message):
    path = tiny_sd_suite(tmp_path, "s", **parts)
    with pytest.raises(SpecmoeError) as info:
        load_suite(path)
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)


def test_builtin_defaults_leave_the_required_axes_unset():
    defaults = builtin_defaults()
    assert "target" not in defaults and "gamma" not in defaults and "prompt_length" not in defaults
    assert defaults["draft"] == [] and defaults["draft"] is not builtin_defaults()["draft"]


def test_bench_schema_prints_the_json_schema(capsys):
    assert main(["bench", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert list(schema["properties"]) == [
        "schema",
        "name",
        "description",
        "zoo",
        "defaults",
        "models",
        "groups",
    ]
    assert set(schema["required"]) == {"schema", "models", "groups"}
    group = schema["$defs"]["GroupTable"]
    assert group["additionalProperties"] is False and "gamma" in group["properties"]
