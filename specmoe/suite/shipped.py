"""What ships with the source tree rather than the package: the suites (`suites/*.toml`), found
without loading any of them (`specmoe bench run --help` lists them, so this module imports nothing
heavy), and the study's published rows the demo audits."""

from __future__ import annotations

from pathlib import Path

SUITES_DIR = Path(__file__).resolve().parents[2] / "suites"
# The MoE SD study's published rows (its CSV as released), audited by `specmoe demo`.
STUDY_ROWS = SUITES_DIR.parent / "docs" / "results" / "study-runs.csv"


def shipped_suites() -> list[str]:
    """Names of the shipped suites, sorted; empty when specmoe is installed without its source tree."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml")) if SUITES_DIR.is_dir() else []
