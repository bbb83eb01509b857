"""The suite format's pydantic description agrees with the loader and prints as a JSON Schema."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError
from tiny_suites import tiny_sd_suite

from specmoe.bench.suite_load import SUITES_DIR, load_suite
from specmoe.bench.suite_schema import SuiteFile, builtin_defaults
from specmoe.cli import main
from specmoe.errors import SpecmoeError

SHIPPED = sorted(SUITES_DIR.glob("*.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_suite_validates_against_the_schema(path: Path):
    load_suite(path)  # the loader accepts it ...
    SuiteFile.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))  # ... and so does the schema


def test_a_test_suite_validates_and_unknown_keys_are_refused_by_both(tmp_path):
    path = tiny_sd_suite(tmp_path, "s", "repeats = 2\nprompts = 1")
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    SuiteFile.model_validate(raw)
    path.write_text(path.read_text(encoding="utf-8").replace("repeats = 2", "repeat = 2"), encoding="utf-8")
    with pytest.raises(
        SpecmoeError, match=r"defaults\.repeat: unknown key 'repeat'; did you mean 'repeats'\?"
    ):
        load_suite(path)
    with pytest.raises(ValidationError):
        SuiteFile.model_validate(tomllib.loads(path.read_text(encoding="utf-8")))


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
