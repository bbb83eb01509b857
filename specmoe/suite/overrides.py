"""Command-line changes to a suite: `--set [GROUP.]KEY=VALUE`, `--set models.NAME.KEY=VALUE` and
`--group NAME`, applied before validation.

A shipped suite describes the full experiment; a shorter pass of the same design (fewer tokens or
repeats, a subset of groups) is the same file with a few settings forced, so the run's rows still
carry every setting in their config and the suite's own checks still apply.
"""

from __future__ import annotations

import copy
import difflib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmoe.errors import SpecmoeError

MODELS_PREFIX = "models."
# A model has exactly one of these: setting one replaces the others (and what belongs to them).
_SERVER = ("model", "engine", "endpoint", "api_key_env", "timeout_s")
_SOURCE_KEYS = {
    "path": ("zoo", "url", "gguf", "config", "overrides", *_SERVER),
    "zoo": ("path", "url", "config", "overrides", *_SERVER),
    "url": ("zoo", "path", "gguf", "config", "overrides"),
    "config": ("zoo", "path", "url", "gguf", *_SERVER),
}


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
    except RecursionError:  # the parser recurses per level of a list
        raise SpecmoeError(
            f"--set {key}=...: lists nested too deeply to read; a suite's values are numbers, strings and "
            "lists of them"
        ) from None


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
        if setting.startswith(MODELS_PREFIX):
            _set_model_key(out, setting, value)
            continue
        where, _, key = setting.rpartition(".")
        if key in ("name", "description"):
            raise SpecmoeError(f"--set {setting}: only run settings can be set, not a {key}")
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


def _set_model_key(raw: dict[str, Any], setting: str, value: Any) -> None:
    """`models.NAME.KEY=VALUE` on a model the suite defines (NAME may itself hold dots), or on
    every model with NAME `*` (e.g. `models.*.gguf=q4_k_m`).

    A new source (`path`, `zoo`, `url`) replaces the model's old one, so `--set
    models.moe.path=DIR` points a zoo model at a directory; a relative path is taken from the
    current directory, as any path on a command line (a suite's own paths are relative to it).
    """
    name, _, key = setting[len(MODELS_PREFIX) :].rpartition(".")
    models = raw.get("models")
    models = models if isinstance(models, dict) else {}
    if not name or not key:
        raise SpecmoeError(f"--set {setting}: expected models.NAME.KEY=VALUE, e.g. models.moe.path=DIR")
    if name == "*":
        for entry in models.values():
            if isinstance(entry, dict):
                _set_entry(entry, key, value)
        return
    if name not in models or not isinstance(models[name], dict):
        close = difflib.get_close_matches(name, list(models), n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise SpecmoeError(
            f"--set {setting}: no model '{name}' in the suite{hint}; available: {', '.join(models) or 'none'}"
        )
    _set_entry(models[name], key, value)


def _set_entry(entry: dict[str, Any], key: str, value: Any) -> None:
    for other in _SOURCE_KEYS.get(key, ()):
        entry.pop(other, None)
    if key in ("path", "config") and isinstance(value, str):
        value = command_line_path(value)
    entry[key] = value


def command_line_path(text: str) -> str:
    """An existing or relative-looking path made absolute from the current directory; a hub ID
    ("org/name") that is no local path is kept as written for the suite to look up."""
    from specmoe.zoo.hub_cache import looks_like_hub_id

    path = Path(text).expanduser()
    if not path.exists() and looks_like_hub_id(text):
        return text
    return str(path.resolve())
