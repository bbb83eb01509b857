"""The findings' rules as data (`rules.toml`), their hash, and the check that runs and document
were judged under the same rules.

The constants the claims use (`claims.LOW_ACCEPTANCE`, `regime.BANDWIDTH_BOUND`, ...) are read from
the file here, so a rule changes in one reviewable place, and its hash changes with it. Each pass
records beside its results the rules it is measured under (`rules/<step>.json`, written before its
first run); a pass measured before records existed has one reconstructed from the commit its runs
record (`env.git_sha`), or none where that commit had no rules file, and says which. Rendering a pass
recorded under other rules than the file's is refused unless asked for; the document then says so.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from importlib import resources
from pathlib import Path

from specmoe.errors import SpecmoeError

RULES_FILE = "rules.toml"


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


RECORDS = "rules"  # out/rules/<step>.json: the rules each pass was measured under
MEASURED, RECONSTRUCTED = "recorded when it was measured", "reconstructed"


def record_path(out: Path, step: str) -> Path:
    return Path(out) / RECORDS / f"{step}.json"


def read_record(out: Path, step: str) -> dict | None:
    path = record_path(out, step)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def record_rules(out: Path, step: str) -> None:
    """Write the rules a pass is measured under, beside its results, before its first run; refuse a
    pass already recorded under other rules (measuring more of it would mix them)."""
    found, now = read_record(out, step), rules_hash()
    if found is not None and found["hash"] != now:
        raise SpecmoeError(
            f"{record_path(out, step)}: the {step} pass was measured under rules {found['hash']}, the rules "
            f"file is now {now}; delete its store, export and record to measure it anew, or restore the rules"
        )
    if found is None:
        path = record_path(out, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"step": step, "hash": now, "how": MEASURED, "rules": RULES}
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def _changed_sections(rules: dict | None) -> list[str]:
    if rules is None:
        return []
    return sorted(k for k in set(rules) | set(RULES) if rules.get(k) != RULES.get(k))


def _only_added(rules: dict | None) -> bool:
    """Whether the file differs from a record only by sections the record lacks (a later pass's
    rules): every section the pass was judged by parses as it did, so it is judged as before. The
    document still names the added sections; comments inside the record's sections are not compared
    (the record keeps the parsed rules, not the text)."""
    changed = _changed_sections(rules)
    return rules is not None and bool(changed) and all(name not in rules for name in changed)


def _pass_rules(step: str, record: dict | None, now: str) -> str:
    """What one pass was measured under, as the document says it."""
    if record is None:
        return f"{step}: no record"
    if record["hash"] is None:
        return f"{step}: no rules file ({record['basis']})"
    how = record["how"] if record["how"] == MEASURED else record["basis"]
    if record["hash"] == now:
        return f"{step}: `{now}`, these rules ({how})"
    changed = ", ".join(f"[{name}]" for name in _changed_sections(record.get("rules")))
    return f"{step}: `{record['hash']}` ({how}; the file has changed since in {changed or 'its comments'})"


def check_rules(out: Path, allow_change: bool, steps: tuple[str, ...] = ()) -> str:
    """The document's line on the rules each pass in `steps` was measured under; refuses a pass
    recorded when it was measured under other rules than the file's unless `allow_change` (a file
    that only adds sections the record lacks judges the pass as before, `_only_added`)."""
    now = rules_hash()
    records = {step: read_record(out, step) for step in steps}
    changed = [
        step
        for step, r in records.items()
        if r is not None and r["how"] == MEASURED and r["hash"] != now and not _only_added(r.get("rules"))
    ]
    if changed and not allow_change:
        step = changed[0]
        raise SpecmoeError(
            f"{record_path(out, step)}: the {step} pass was measured under rules "
            f"{records[step]['hash']}, the rules file is now {now}; render with --rules-changed to judge "
            "it under the new rules (the document says so), or restore the rules"
        )
    passes = "; ".join(_pass_rules(step, r, now) for step, r in records.items())
    line = f"rules `{now}` (specmoe/findings/rules.toml) now; the passes were measured under: {passes}"
    if changed:
        line += f". **Judged under changed rules**: {', '.join(changed)} (--rules-changed)"
    return line
