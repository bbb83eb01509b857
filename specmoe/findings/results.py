"""Exported results read back: `bench export --format csv` files turned into stored rows again.

The findings rest on the exported CSV files alone (they ship; the stores do not), so every number in
the document can be recomputed from what the repository holds. Traces are not exported; nothing
here needs them.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from specmoe.errors import SpecmoeError
from specmoe.metrics import RunCounts, RunTimes
from specmoe.results.store import RunRow

_INT = re.compile(r"-?\d+")
_NESTED = ("config", "env", "measure")


# Keys and digests are text whatever their characters: a hex key such as "8431e05..." or one of
# digits only would otherwise come back as a number (the first as infinity).
_TEXT_SUFFIXES = ("_key", "_id", "_sha")


def parse_cell(text: str, name: str = "") -> Any:
    """A CSV cell as the value it was written from: empty -> None, numbers, booleans, JSON lists;
    `name`, the cell's column's last part, keeps identifiers as text."""
    if text == "":
        return None
    if name.endswith(_TEXT_SUFFIXES):
        return text
    if text in ("True", "False"):
        return text == "True"
    if _INT.fullmatch(text):
        return int(text)
    if text.startswith("["):
        return json.loads(text)
    try:
        return float(text)
    except ValueError:
        return text


def _unflatten(flat: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    # Parents first, so "config.draft_model" (empty for a baseline) is replaced by its children's dict.
    for key in sorted(flat, key=lambda k: k.count(".")):
        parts = key.split(".")
        node = out
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = parse_cell(flat[key], parts[-1])
    return out


def _none_if_empty(value: Any) -> Any:
    # A baseline's draft_model exports as empty cells; stored, it was None.
    if isinstance(value, dict):
        value = {k: _none_if_empty(v) for k, v in value.items()}
        return None if all(v is None for v in value.values()) else value
    return value


def _env(env: dict[str, Any]) -> dict[str, Any]:
    # A column exists for every key any row has: a baseline reads `env.weights.<draft>` as empty
    # although it stored no draft's weights. A nested env value is never None when stored.
    return {
        k: {kk: vv for kk, vv in v.items() if vv is not None} if isinstance(v, dict) else v
        for k, v in env.items()
    }


def _numbers(values: dict[str, Any], kind: type) -> dict[str, Any]:
    return {k: None if v is None else kind(v) for k, v in values.items()}


def read_export(path: Path) -> list[RunRow]:
    path = Path(path)
    if not path.is_file():
        raise SpecmoeError(f"exported results not found: {path}; run `specmoe findings` to produce them")
    with path.open(newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    rows = []
    for line, record in enumerate(records, start=2):  # line 1 is the header
        try:
            rows.append(_row(record))
        except (ValueError, TypeError, KeyError) as err:  # an export edited or cut outside specmoe
            raise SpecmoeError(
                f"{path}:{line}: run {record.get('run_id')!r} is malformed ({type(err).__name__}: {err}); "
                "export it again from its store with `specmoe bench export`"
            ) from None
    return rows


def _row(record: dict[str, Any]) -> RunRow:
    """One exported run as the store held it."""
    nested = _unflatten({k: v for k, v in record.items() if k.split(".")[0] in (*_NESTED, "counts", "times")})
    config = {k: _none_if_empty(v) for k, v in nested.get("config", {}).items()}
    rate = record["acceptance_rate"]
    return RunRow(
        run_id=record["run_id"],
        config_key=record["config_key"],
        baseline_key=record["baseline_key"],
        suite=record["suite"],
        group=record["group"],
        arm=record["arm"],
        repeat=int(record["repeat"]),
        config=config,
        env=_env(nested.get("env", {})),
        # None: a count or time the run could not know (a server that reports no drafts).
        counts=RunCounts.from_dict({k: None if v is None else int(v) for k, v in nested["counts"].items()}),
        times=RunTimes.from_dict({k: None if v is None else float(v) for k, v in nested["times"].items()}),
        tokens_per_s=float(record["tokens_per_s"]),
        acceptance_rate=float(rate) if rate else None,
        rounds_trace=[],
        audit_verdict=record["audit_verdict"],
        audit_reason=record["audit_reason"],
        created_at=record["created_at"],
        measure=nested.get("measure", {}),
        noisy=record.get("noisy", "0") == "1",
    )
