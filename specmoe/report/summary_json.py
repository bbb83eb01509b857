"""The result table (`specmoe.report.summary_table.SummaryTable`) as one JSON-ready object, as
`specmoe bench summary --json` prints it: every NaN becomes null, so the output is strict JSON."""

from __future__ import annotations

import math
from typing import Any

from specmoe.report.summary_table import CATEGORY, SummaryTable, speedup_text
from specmoe.results.noisy import NOISE_FIX
from specmoe.stats import Estimate


def _number(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def estimate_json(estimate: Estimate, prompts: int = 0, copies: int = 0) -> dict[str, Any]:
    return {
        "value": estimate.value,
        "low": estimate.low,
        "high": estimate.high,
        "level": estimate.level,  # null below 5 units: low and high are the units' range
        "n": estimate.n,
        "text": speedup_text(estimate, prompts, copies),
    }


def to_json(table: SummaryTable) -> dict[str, Any]:
    """The summary as one JSON-ready object (NaN as null)."""
    rows = []
    for c in table.comparisons:
        record = {col.name: col.value(c.config) for col in table.columns}
        if table.with_category:
            record[CATEGORY] = c.category
        record.update(
            units=c.units,
            prompts=c.prompts,
            copies=c.copies,  # selected prompts that were numbered copies of the set's (see `prompts`)
            noisy=c.noisy,
            baseline_tokens_per_s=_number(c.baseline_tokens_per_s),
            sd_tokens_per_s=_number(c.sd_tokens_per_s),
            speedup=None if c.impossible or c.no_number else estimate_json(c.speedup, c.prompts, c.copies),
            impossible=c.impossible or None,
            no_number=c.no_number or None,
            busy=c.busy or None,
            acceptance_rate=_number(c.acceptance_rate),
            target_efficiency=_number(c.target_efficiency),
            audit_failures=c.audit_failures,
            unstable=c.unstable or None,
            noise_reason=c.noise_reason or None,
        )
        rows.append(record)
    latency = [
        {
            **{col.name: col.value(s.config) for col in table.latency_columns},
            "runs": s.runs,
            "requests": s.requests,
            "ttft_s": s.ttft_s,
            "tpot_s": s.tpot_s,
            "tpot_requests": s.tpot_requests,
            "noisy": s.noisy,  # runs left out of the percentiles
            "noise_reason": s.noise_reason or None,
        }
        for s in table.latency
    ]
    return {
        "by": list(table.by),
        "columns": [c.name for c in table.columns] + ([CATEGORY] if table.with_category else []),
        "fixed": table.fixed,
        "pooled": table.pooled,
        "split": list(table.split),  # identity columns rows are split by although --by did not name them
        "rows": rows,
        "latency": latency,
        "runs": {
            "total": len(table.rows),
            "noisy": len(table.noisy),
            "beyond_bound": table.beyond_bound,
            "audit_failed": len(table.failed),
        },
        "noise_fix": NOISE_FIX if table.noisy else None,
    }
