"""Server runs as the report shows them: per-request latencies per arm, and their percentiles.

A server run stores one trace record per request (`specmoe.bench.served_rows.request_trace`) with its
time to first token (TTFT) and time per output token after the first (TPOT), both defined once in
`specmoe.metrics`. An *arm* here is one configuration of one server at one concurrency, over all its
runs (prompt batches × repeats, noisy runs left out), so its distribution pools every request sent.
Percentiles are numpy's linear interpolation, as vLLM's and SGLang's benchmark scripts compute them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from specmoe.metrics import LATENCY_PERCENTILES, latency_percentiles
from specmoe.report.figures import Omitted
from specmoe.report.results import Results
from specmoe.report.slices import AXES, axis_value, format_axis, sort_key, varying_axes
from specmoe.report.tables import Table
from specmoe.results.compare import cell_key
from specmoe.results.latency import request_records
from specmoe.results.run_config import RunConfig
from specmoe.results.store import RunRow

PERCENTILES = LATENCY_PERCENTILES
NO_SERVER_RUNS = "no server runs (suites whose models have a url)"


@dataclass(frozen=True)
class ServedArm:
    config: dict[str, Any]  # the configuration of the arm's first run
    settings: RunConfig  # `config` typed
    arm: str  # "baseline" | "sd"
    runs: int
    ttft_s: tuple[float, ...]  # every request's time to first token, seconds, in store order
    tpot_s: tuple[float, ...]  # every request's time per output token after the first, seconds


def served_arms(rows: Iterable[RunRow]) -> dict[str, ServedArm]:
    """Cell key -> the arm's pooled request latencies, for every server run (concurrency set)."""
    by_cell: dict[str, list[RunRow]] = defaultdict(list)
    for row in rows:
        if not row.noisy and row.settings.concurrency is not None:
            by_cell[cell_key(row)].append(row)
    return {key: _arm(group) for key, group in by_cell.items()}


def _arm(rows: list[RunRow]) -> ServedArm:
    requests = [t for row in rows for t in request_records(row)]
    return ServedArm(
        config=rows[0].config,
        settings=rows[0].settings,
        arm=rows[0].arm,
        runs=len(rows),
        ttft_s=tuple(r["ttft_s"] for r in requests if r.get("ttft_s") is not None),
        tpot_s=tuple(r["tpot_s"] for r in requests if r.get("tpot_s") is not None),
    )


def ecdf(values: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF as step points: sorted values and the share of values at or below each."""
    xs = np.sort(np.asarray(values, dtype=float))
    return xs, np.arange(1, len(xs) + 1) / len(xs)


def percentiles(values: Sequence[float], qs: Sequence[float] = PERCENTILES) -> tuple[float | None, ...]:
    """`metrics.latency_percentiles` as a tuple in the order of qs; None for each without values."""
    found = latency_percentiles(values, qs)
    return tuple(found.get(f"p{q:g}") for q in qs)


def sd_cell_key(settings: RunConfig) -> str | None:
    """The cell key an SD result's configuration names (rows from outside the runner: its key)."""
    return settings.cell


def arm_pairs(results: Results) -> list[tuple[ServedArm, ServedArm]]:
    """(baseline arm, SD arm) for every served SD configuration with both arms, in store order."""
    arms = served_arms(results.rows)
    pairs = []
    for r in results.sd:
        sd, base = arms.get(sd_cell_key(r.settings)), arms.get(r.baseline_key)
        if sd is not None and base is not None:
            pairs.append((base, sd))
    return pairs


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{1000 * value:.1f}"


_SETTINGS = tuple(a for a in AXES if a not in ("target", "draft", "gamma", "concurrency", "batch_size"))


def serving_table(results: Results) -> Table | Omitted:
    title = "Serving latency per arm"
    pairs = sorted(arm_pairs(results), key=lambda pair: sort_key(pair[1].config))  # the report's row order
    if not pairs:
        return Omitted(title, NO_SERVER_RUNS)
    # Setting columns on the page for the axes that vary among the served runs, as in the other tables.
    shown = [a for a in varying_axes(sd.config for _, sd in pairs) if a in _SETTINGS]
    cells, records = [], []
    for base, sd in pairs:
        for arm in (base, sd):
            ttft, tpot = percentiles(arm.ttft_s), percentiles(arm.tpot_s)
            config = sd.config  # the pair's names; the arm says which server answered
            cells.append(
                (
                    format_axis("target", axis_value(config, "target")),
                    str(sd.settings.draft_name),
                    *(format_axis(a, axis_value(config, a)) or "–" for a in shown),
                    "SD" if arm.arm == "sd" else "baseline",
                    str(arm.settings.concurrency),
                    str(len(arm.ttft_s)),
                    *(_ms(v) for v in ttft),
                    *(_ms(v) for v in tpot),
                )
            )
            records.append(
                {
                    "target": sd.settings.target,
                    "draft": sd.settings.draft_name,
                    "arm": arm.arm,
                    "concurrency": arm.settings.concurrency,
                    **{axis: config.get(axis) for axis in _SETTINGS},
                    "runs": arm.runs,
                    "requests": len(arm.ttft_s),
                    **{f"ttft_p{q}_s": v for q, v in zip(PERCENTILES, ttft, strict=True)},
                    **{f"tpot_p{q}_s": v for q, v in zip(PERCENTILES, tpot, strict=True)},
                }
            )
    columns = (
        "target",
        "draft server",
        *shown,
        "arm",
        "concurrency",
        "requests",
        *(f"TTFT p{q} (ms)" for q in PERCENTILES),
        *(f"TPOT p{q} (ms)" for q in PERCENTILES),
    )
    caption = (
        "Per arm and concurrency, percentiles over every request of its runs: TTFT, seconds from sending "
        "a request to its first token (queueing and prefill included); TPOT, seconds per output token "
        "after the first. Percentiles of few requests are rough: see the requests column."
    )
    return Table("serving_latency", title, caption, columns, tuple(cells), tuple(records))
