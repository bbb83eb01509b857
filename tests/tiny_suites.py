"""Suite files for tests: the tiny zoo's MoE with draft-xs at γ 2, defaults given per test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from suite_files import TINY_ZOO, write_suite, zoo_models

TINY_SD_GROUP = {"name": "g", "target": ["moe"], "draft": ["draft-xs"], "gamma": [2]}


def tiny_sd_suite(directory: Path, name: str, defaults: dict[str, Any] | None = None, **parts: Any) -> Path:
    """Write `<name>.toml`: one group, MoE target, draft-xs at γ 2, float32, and the given
    [defaults]; `parts` replace whole parts (see `suite_files.suite_toml`). Returns its path."""
    return write_suite(
        directory,
        name,
        **{
            "zoo": TINY_ZOO,
            "defaults": {"dtype": "float32"} | (defaults or {}),
            "models": zoo_models("moe", "draft-xs"),
            "groups": [TINY_SD_GROUP],
            **parts,
        },
    )
