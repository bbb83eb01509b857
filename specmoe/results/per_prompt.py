"""One row per (run, prompt): the per-prompt export (`specmoe bench export --per-prompt`).

A run decodes one batch of prompts; its row keeps each prompt's counts (`RunRow.prompts`). The
batch's timings are shared: every prompt of a batch carries the batch's decode_s, and its tokens/s
is its own emitted tokens over that time (at B = 1, the run's tokens/s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specmoe.metrics import acceptance_rate, decode_tokens_per_s
from specmoe.results.export import write_records
from specmoe.results.store import RunRow, stored_rows

PER_PROMPT_COLUMNS = (
    "run_id",
    "suite",
    "group",
    "arm",
    "target",
    "draft",
    "gamma",
    "batch_size",
    "prompt_set",
    "prompt_batch",
    "repeat",
    "prompt_id",
    "category",
    "emitted",
    "drafted",
    "accepted",
    "rounds",
    "truncated",
    "acceptance_rate",
    "accepted_by_position",
    "decode_s",
    "tokens_per_s",
    "noisy",
    "started_at",
)


def per_prompt_records(rows: list[RunRow]) -> list[dict[str, Any]]:
    """A flat record per prompt of every run that kept per-prompt counts, in store order."""
    records = []
    for row in rows:
        config, decode_s = row.config, row.times.decode_s
        for prompt in row.prompts:
            records.append(
                {
                    "run_id": row.run_id,
                    "suite": row.suite,
                    "group": row.group,
                    "arm": row.arm,
                    "target": config.get("target"),
                    "draft": config.get("draft"),
                    "gamma": config.get("gamma"),
                    "batch_size": config.get("batch_size"),
                    "prompt_set": config.get("prompt_set") or f"len{config.get('prompt_length')}",
                    "prompt_batch": config.get("prompt_batch", 0),
                    "repeat": row.repeat,
                    "prompt_id": prompt["prompt_id"],
                    "category": prompt["category"],
                    "emitted": prompt["emitted"],
                    "drafted": prompt["drafted"],
                    "accepted": prompt["accepted"],
                    "rounds": prompt["rounds"],
                    "truncated": prompt["truncated"],
                    "acceptance_rate": acceptance_rate(prompt["accepted"], prompt["drafted"]),
                    "accepted_by_position": " ".join(map(str, prompt["accepted_by_position"])),
                    "decode_s": decode_s,
                    "tokens_per_s": decode_tokens_per_s(prompt["emitted"], decode_s) if decode_s else None,
                    "noisy": int(row.noisy),
                    "started_at": row.measure.get("started_at"),
                }
            )
    return records


def export_per_prompt(db_path: str | Path, out_path: str | Path, fmt: str) -> int:
    """Write the per-prompt records of every stored run; returns the number of records."""
    records = per_prompt_records(stored_rows(db_path, out_path, fmt))
    write_records(Path(out_path), list(PER_PROMPT_COLUMNS), records, fmt)
    return len(records)
