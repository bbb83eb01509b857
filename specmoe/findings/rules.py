"""The findings' rules as data (`rules.toml`), their hash, and the check that runs and document
were judged under the same rules.

The constants the claims use (`claims.LOW_ACCEPTANCE`, `regime.BANDWIDTH_BOUND`, ...) are read from
the file here, so a rule changes in one reviewable place, and its hash changes with it. The results
folder's `rules.json` records the hash the runs were measured under; rendering under another hash
is refused unless asked for, and the document then prints both.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from importlib import resources
from pathlib import Path

from specmoe.errors import SpecmoeError

RULES_FILE = "rules.toml"
RECORD = "rules.json"


def rules_text() -> str:
    return resources.files("specmoe.findings").joinpath(RULES_FILE).read_text(encoding="utf-8")


def rules_hash(text: str | None = None) -> str:
    """12 hex digits of sha256 over the rules file as shipped (comments included: they are part of
    what a reader was shown)."""
    return hashlib.sha256((text if text is not None else rules_text()).encode()).hexdigest()[:12]


RULES: dict = tomllib.loads(rules_text())


def _agrees_with_the_code() -> None:
    """The [cells] rules are enforced below the findings (specmoe.stats, specmoe.results.compare);
    the file states them so the hash covers them, and must say what the code does."""
    from specmoe.results.compare import REPEAT_CV_LIMIT
    from specmoe.stats import LEVEL, MIN_UNITS

    cells = RULES["cells"]
    for key, value in (("level", LEVEL), ("min_units", MIN_UNITS), ("repeat_cv_limit", REPEAT_CV_LIMIT)):
        if cells[key] != value:
            raise SpecmoeError(f"{RULES_FILE}: cells.{key} is {cells[key]!r} but the code uses {value!r}")


_agrees_with_the_code()


def record_rules(out: Path) -> None:
    """Write the rules the runs in `out` are measured under (once: the first measurement's)."""
    path = Path(out) / RECORD
    if not path.is_file():
        path.write_text(json.dumps({"hash": rules_hash(), "rules": RULES}, indent=1) + "\n", encoding="utf-8")


def measured_under(out: Path) -> str | None:
    path = Path(out) / RECORD
    return json.loads(path.read_text(encoding="utf-8"))["hash"] if path.is_file() else None


def check_rules(out: Path, allow_change: bool) -> str:
    """The line the document prints about its rules; refuses a mismatch unless `allow_change`."""
    now, then = rules_hash(), measured_under(out)
    if then is None:
        return (
            f"rules `{now}` (specmoe/findings/rules.toml); the results folder records no rules of its "
            "own: its runs predate the rules file, and the rule history below says what changed after them"
        )
    if then == now:
        return f"rules `{now}` (specmoe/findings/rules.toml), the rules the runs were measured under"
    if not allow_change:
        raise SpecmoeError(
            f"{out / RECORD}: the runs were measured under rules {then}, the rules file is now {now}; "
            "render with --rules-changed to judge them under the new rules (the document says so), "
            "or restore the rules"
        )
    return (
        f"rules `{now}` (specmoe/findings/rules.toml), **changed** since the runs were measured under "
        f"`{then}` ({RECORD} holds those)"
    )
