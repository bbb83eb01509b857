"""The per-user zoo cache: where `specmoe bench`, `specmoe demo` and `zoo fetch` keep what they build
or download ($XDG_CACHE_HOME/specmoe/zoo, else ~/.cache/specmoe/zoo), so a later run reuses it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """The folder holding every cached zoo, read from the environment when called."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specmoe" / "zoo"


def default_zoo_dir(preset: str, seed: int) -> Path:
    """Where a preset's zoo built with this seed is cached: `<cache_root>/<preset>-seed<seed>`."""
    return cache_root() / f"{preset}-seed{seed}"
