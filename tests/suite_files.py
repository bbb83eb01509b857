"""Suite files for tests, written from data so each test states only what differs.

A suite is TOML with `schema = 1`, `name`, `[zoo]`, `[defaults]`, `[models.NAME]` and `[[groups]]`;
`suite_toml` writes those parts in that order and leaves out any part given as None, so a test of
a missing part passes None. Tests of the TOML parser itself (bad syntax, line numbers) keep their
literal text instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

TINY_ZOO = {"preset": "tiny"}


def zoo_models(*names: str) -> dict[str, dict[str, str]]:
    """`[models.NAME]` tables that take each model from the zoo under its own name."""
    return {name: {"zoo": name} for name in names}


def without(table: dict[str, Any], *keys: str) -> dict[str, Any]:
    """A copy of a group or model table less `keys`, for a test of a key left out."""
    return {key: value for key, value in table.items() if key not in keys}


def _plain(value: Any) -> Any:
    """Paths as strings (suites name model and prompt files), containers walked."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def suite_toml(
    name: str | None = "t",
    *,
    schema: Any = 1,
    zoo: Any = None,
    defaults: Any = None,
    models: Any = None,
    groups: Any = None,
    **extra: Any,
) -> str:
    """The suite's TOML text; `extra` adds top-level keys after the usual parts (unknown ones,
    for tests of their refusal). A group or model is a dict; a Path anywhere becomes its string."""
    parts = {"schema": schema, "name": name, "zoo": zoo, "defaults": defaults, "models": models}
    parts |= {"groups": groups, **extra}
    return tomli_w.dumps(_plain({key: value for key, value in parts.items() if value is not None}))


def write_suite(directory: Path, name: str | None = "t", *, file: str = "", **parts: Any) -> Path:
    """Write `suite_toml(name, **parts)` to `directory/file` (default `<name>.toml`); returns its path."""
    path = directory / (file or f"{name}.toml")
    path.write_text(suite_toml(name, **parts), encoding="utf-8")
    return path
