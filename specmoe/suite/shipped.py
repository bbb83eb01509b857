"""What ships inside the package as data: the suites (`specmoe/suites/*.toml`), found without loading
any of them (`specmoe bench run --help` lists them, so this module imports nothing heavy), and the
study's published rows the demo audits (`specmoe/audit/study-runs.csv`)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _shipped(package: str, name: str) -> Path:
    # specmoe is installed as files (a wheel unpacked by pip, or a checkout), so each resource is a
    # real path: suites name their model configs relative to their own file.
    return Path(str(resources.files(package).joinpath(name)))


SUITES_DIR = _shipped("specmoe", "suites")
# The MoE SD study's published rows (its CSV as released), audited by `specmoe demo`.
STUDY_ROWS = _shipped("specmoe.audit", "study-runs.csv")


def shipped_suites() -> list[str]:
    """Names of the shipped suites, sorted; empty when the package was installed without its data."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml")) if SUITES_DIR.is_dir() else []
