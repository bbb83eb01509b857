"""A suite file's problems as one line each: file, key, what is wrong, the fix, and a did-you-mean
where a name is close to a valid one.

Pydantic's `ValidationError` (from `schema`) is worded here, one error type at a time; the
loader's own cross-table checks raise through `SuiteContext.fail` in the same shape.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from specmoe.errors import SpecmoeError
from specmoe.suite.schema import (
    DEFAULTS_KEYS,
    GROUP_KEYS,
    MODEL_KEYS,
    SCHEMA_VERSION,
    TOP_KEYS,
    ZOO_KEYS,
)

_GROUPS_NEEDED = "a suite needs at least one [[groups]] table"
_MISSING = {  # what to write when a required key is absent, by key
    "schema": f"missing; put `schema = {SCHEMA_VERSION}` at the top of the file",
    "models": "no models; declare each one as [models.<name>] with zoo = or path =",
    "groups": _GROUPS_NEEDED,
    "name": 'every group needs a name, e.g. name = "B"',
}
_TABLE_KEYS = {"": TOP_KEYS, "zoo": ZOO_KEYS, "defaults": DEFAULTS_KEYS, "models": MODEL_KEYS}


def type_name(value: Any) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)


def suggest(value: str, options: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def leaf(key: str) -> str:
    return key.rsplit(".", 1)[-1]


class SuiteContext:
    """The file a suite comes from, so every error the loader raises names it and the key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, message: str) -> NoReturn:
        raise SpecmoeError(f"{self.path}: {key}: {message}")

    def choice(self, key: str, value: str, options: tuple[str, ...]) -> str:
        if value not in options:
            self.fail(key, _unknown(leaf(key), value, options))
        return value


def explain(err: ValidationError, path: Path) -> SpecmoeError:
    """The first problem pydantic found, as the one-line error of the file's key."""
    detail = err.errors(include_url=False)[0]
    key = _key(detail["loc"])
    extra = detail.get("ctx", {}).get("key", "") if detail["type"] == "suite" else ""
    if extra:
        key = f"{key}.{extra}" if key else extra
    return SpecmoeError(f"{path}: {key}: {_message(detail, key)}")


def _key(loc: tuple[int | str, ...]) -> str:
    """pydantic's location as the file spells it: groups[1].gamma, models.moe.zoo; the index of a
    value within an axis list is left out (the key names the axis)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            if i > 0 and loc[i - 1] == "groups":
                parts[-1] += f"[{part}]"
        elif part != "[key]":
            parts.append(part)
    return ".".join(parts)


def _message(detail: ErrorDetails, key: str) -> str:
    kind, value, ctx = detail["type"], detail["input"], detail.get("ctx", {})
    name = leaf(key)
    if kind == "suite":
        return ctx["message"]
    if kind == "suite_choice":
        return _unknown(name, value, ctx["options"])
    if kind == "extra_forbidden":
        return _unknown_key(detail["loc"], name)
    if kind == "missing":
        return _MISSING.get(name, f"missing; add {name} = ...")
    if key == "schema":
        return f"unsupported schema {value!r}; this specmoe reads schema = {SCHEMA_VERSION}"
    if key == "groups":
        return _GROUPS_NEEDED  # not an array of tables, or an empty one
    if kind == "too_short":
        return f"{name} must not be empty; give at least one value"
    if kind == "greater_than_equal":
        return f"{name} must be >= {_bound(ctx['ge'])}, got {value}"
    if kind == "greater_than":
        return f"{name} must be > {_bound(ctx['gt'])}, got {value}"
    if kind == "finite_number":
        return f"{name} must be a finite number, got {value}; give a finite value"
    if kind == "bool_type":
        return f"{name} must be true or false, got {value!r}"
    if kind in ("model_type", "dict_type"):
        return f"expected a table, got {type_name(value)}"
    expected = {"int_type": "an integer", "float_type": "a number", "string_type": "a string"}
    if kind in expected:
        return f"expected {expected[kind]}, got {type_name(value)} {value!r}"
    return detail["msg"]  # a shape the schema does not produce today: pydantic's own words


def _bound(value: float) -> float | int:
    """A bound as the schema wrote it: pydantic holds a float field's `gt=0` as 0.0."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _unknown(name: str, value: str, options: tuple[str, ...]) -> str:
    return f"unknown {name} '{value}'{suggest(value, options)}; choose from {', '.join(options)}"


def _unknown_key(loc: tuple[int | str, ...], name: str) -> str:
    """An unknown key, with the valid keys of its table (or the closest of them)."""
    table = str(loc[0]) if len(loc) > 1 else ""
    valid = GROUP_KEYS if table == "groups" else _TABLE_KEYS.get(table, ())
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(valid)}"
    return f"unknown key '{name}'; {hint}"
