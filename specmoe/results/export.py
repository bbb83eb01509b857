"""Stored runs as flat files: one record per run, nested values as dotted columns, written as CSV
or Parquet. `store.export` reads a store and writes its runs through here; `per_prompt` writes
its per-prompt records with the same writers."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any, TextIO

from specmoe.canonical import canonical_json
from specmoe.errors import SpecmoeError
from specmoe.extras import require
from specmoe.metrics import COUNT_KEYS, EXPORT_TIME_KEYS
from specmoe.results.run_row import RunRow

EXPORT_FORMATS = ("csv", "parquet")
_LEAD_COLUMNS = ("run_id", "config_key", "baseline_key", "suite", "group", "arm", "repeat")
_TAIL_COLUMNS = ("tokens_per_s", "acceptance_rate", "noisy", "audit_verdict", "audit_reason", "created_at")


def flatten(prefix: str, value: dict[str, Any]) -> dict[str, Any]:
    """Nested dicts as dotted keys ("config.target_model.zoo"); lists become JSON text; a path under
    the home folder is written from `~` (`shareable`)."""
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}.{key}"
        if isinstance(item, dict):
            flat.update(flatten(name, item))
        else:
            flat[name] = canonical_json(item) if isinstance(item, list) else shareable(item)
    return flat


def shareable(value: Any) -> Any:
    """A path under the home folder as `~/...`: exports are made to be shared, and the measuring
    machine's home folder says nothing about the run (`Path.expanduser` reads it back)."""
    home = str(Path.home())
    if isinstance(value, str) and home != "/" and value.startswith(home + "/"):
        return "~" + value[len(home) :]
    return value


def export_records(rows: list[RunRow]) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and one flat record per run (traces omitted).

    Column order is fixed: identity, then config.*, env.* and measure.* (sorted), counts.* and times.* (in
    COUNT_KEYS / EXPORT_TIME_KEYS order), then the scalars.
    """
    records = []
    for row in rows:
        record: dict[str, Any] = {name: getattr(row, name) for name in _LEAD_COLUMNS}
        record.update(flatten("config", row.config))
        record.update(flatten("env", row.env))
        record.update(flatten("measure", row.measure))
        record.update({f"counts.{k}": getattr(row.counts, k) for k in COUNT_KEYS})
        record.update({f"times.{k}": getattr(row.times, k) for k in EXPORT_TIME_KEYS})
        record.update({name: getattr(row, name) for name in _TAIL_COLUMNS})
        record["noisy"] = int(row.noisy)
        records.append(record)
    config_cols = sorted({k for r in records for k in r if k.startswith("config.")})
    env_cols = sorted({k for r in records for k in r if k.startswith(("env.", "measure."))})
    columns = [
        *_LEAD_COLUMNS,
        *config_cols,
        *env_cols,
        *(f"counts.{k}" for k in COUNT_KEYS),
        *(f"times.{k}" for k in EXPORT_TIME_KEYS),
        *_TAIL_COLUMNS,
    ]
    return columns, records


STDOUT = Path("-")  # `--out -`: write to standard output, as most command-line tools read it


def default_export_path(db_path: Path, fmt: str, per_prompt: bool = False) -> Path:
    """Where an export goes when no path is given: beside the store, named after it
    (`results.db` -> `results.csv`, or `results.prompts.csv` for the per-prompt records)."""
    return db_path.with_suffix((".prompts." if per_prompt else ".") + fmt)


def write_records(out_path: Path, columns: list[str], records: list[dict[str, Any]], fmt: str) -> None:
    """Flat records as a CSV or Parquet file, columns in the given order; CSV to stdout for `-`."""
    if fmt == "csv" and out_path == STDOUT:
        _write_csv_to(sys.stdout, columns, records)
    elif fmt == "csv":
        with out_path.open("w", newline="", encoding="utf-8") as f:
            _write_csv_to(f, columns, records)
    elif out_path == STDOUT:
        raise SpecmoeError("--out -: Parquet is binary, not for a terminal or a pipe; pass a file name")
    else:
        _write_parquet(out_path, columns, records)


def _write_csv_to(f: TextIO, columns: list[str], records: list[dict[str, Any]]) -> None:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    writer.writerows(records)  # missing keys (and None) become empty cells


def _write_parquet(out_path: Path, columns: list[str], records: list[dict[str, Any]]) -> None:
    require("parquet", "parquet export")
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({name: [r.get(name) for r in records] for name in columns})
    pq.write_table(table, out_path)
