"""Command-line changes to a suite: `--set [GROUP.]KEY=VALUE` and `--group NAME`, applied before
validation.

A shipped suite describes the full experiment; a shorter pass of the same design (fewer tokens or
repeats, a subset of groups) is the same file with a few settings forced, so the run's rows still
carry every setting in their config and the suite's own checks still apply.
"""

from __future__ import annotations

import copy
import tomllib
from dataclasses import dataclass
from typing import Any

from specmoe.errors import SpecmoeError


@dataclass(frozen=True)
class SuiteOverrides:
    # KEY is forced in [defaults] and every group; GROUP.KEY in that group alone; models.NAME.KEY in
    # one [models.NAME] entry and models.*.KEY in every one (e.g. models.*.gguf = "q4_k_m").
    settings: tuple[tuple[str, Any], ...] = ()
    groups: tuple[str, ...] = ()  # keep only these groups; empty keeps all

    def __bool__(self) -> bool:
        return bool(self.settings or self.groups)


def parse_assignment(text: str) -> tuple[str, Any]:
    """ "gamma=[2, 4]" -> ("gamma", [2, 4]); a value that is not TOML is taken as a string."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SpecmoeError(f"--set {text!r}: expected KEY=VALUE, e.g. --set max_new_tokens=64")
    try:
        return key, tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return key, value.strip()


def apply_overrides(raw: dict[str, Any], overrides: SuiteOverrides) -> dict[str, Any]:
    """A copy of a parsed suite file with the overrides applied (the input is not changed)."""
    out = copy.deepcopy(raw)
    groups = out.get("groups")
    if overrides.groups and isinstance(groups, list):
        names = [g.get("name") for g in groups if isinstance(g, dict)]
        unknown = [g for g in overrides.groups if g not in names]
        if unknown:
            raise SpecmoeError(
                f"--group {', '.join(unknown)}: no such group in the suite; "
                f"available: {', '.join(map(str, names))}"
            )
        out["groups"] = [g for g in groups if isinstance(g, dict) and g.get("name") in overrides.groups]
    groups = [g for g in out.get("groups", []) if isinstance(g, dict)]
    for setting, value in overrides.settings:
        where, _, key = setting.rpartition(".")
        if key in ("name", "description"):
            raise SpecmoeError(f"--set {setting}: only run settings can be set, not a {key}")
        if where == "models" or where.startswith("models."):
            _set_model_key(out, setting, where.removeprefix("models").removeprefix("."), key, value)
            continue
        if not where:
            out.setdefault("defaults", {})[key] = value
            for group in groups:
                if key in group:
                    group[key] = value
            continue
        targets = [g for g in groups if g.get("name") == where]
        if not targets:
            names = ", ".join(str(g.get("name")) for g in groups)
            raise SpecmoeError(f"--set {setting}: no group '{where}' in the suite; available: {names}")
        for group in targets:
            group[key] = value
    return out


def _set_model_key(suite: dict[str, Any], setting: str, name: str, key: str, value: Any) -> None:
    """Set KEY in the [models.NAME] entry (NAME "*": in every entry)."""
    models = suite.get("models")
    entries = {k: v for k, v in models.items() if isinstance(v, dict)} if isinstance(models, dict) else {}
    if name == "*":
        chosen = list(entries.values())
    elif name in entries:
        chosen = [entries[name]]
    else:
        available = ", ".join(entries) or "none"
        raise SpecmoeError(
            f"--set {setting}: no model '{name}' in the suite's [models]; available: {available} "
            "(or * for every model)"
        )
    for entry in chosen:
        entry[key] = value
