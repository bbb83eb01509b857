"""The suites that ship with the source tree (`suites/*.toml`), found without loading any of them:
`specmoe bench run --help` lists them, so this module imports nothing heavy."""

from __future__ import annotations

from pathlib import Path

SUITES_DIR = Path(__file__).resolve().parents[2] / "suites"


def shipped_suites() -> list[str]:
    """Names of the shipped suites, sorted; empty when specmoe is installed without its source tree."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml")) if SUITES_DIR.is_dir() else []
