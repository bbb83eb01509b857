"""Per-request latency of server runs: time to first token and time per output token, as percentiles.

A server run stores one trace record per request (`specmoe.bench.served_rows.request_trace`) with its
TTFT (seconds from sending to the first token chunk) and TPOT (seconds per token after the first;
None below 2 tokens). A configuration's latency pools the requests of all its runs, both arms
apart, runs the noise guard flagged left out and counted (with the first one's reason, as the
result table does), and reports p50, p90 and p99 of each with the number
of requests behind them: with few requests p99 is close to the slowest request, which is why the
count is shown beside it (as vLLM's and SGLang's serving benchmarks print percentiles of requests).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from specmoe.metrics import latency_percentiles
from specmoe.results.compare import cell_key, noise_reason
from specmoe.results.store import RunRow


@dataclass(frozen=True)
class Latency:
    """One server configuration (an arm at a concurrency): its requests' TTFT and TPOT percentiles."""

    config: dict  # the first run's configuration
    runs: int  # runs behind the percentiles (noisy ones left out)
    requests: int  # requests with a first token (behind TTFT)
    ttft_s: dict[str, float]  # "p50", "p90", "p99" -> seconds; empty without requests
    tpot_s: dict[str, float]  # the same over requests of 2 or more tokens
    tpot_requests: int
    noisy: int = 0  # runs the noise guard flagged, left out of the percentiles
    noise_reason: str = ""  # the guard's reason for the first of them; "" when none was flagged


def request_records(row: RunRow) -> list[dict]:
    return [r for r in row.rounds_trace if r.get("kind") == "request"]


def served_latency(rows: Iterable[RunRow], key: Callable[[RunRow], Hashable] = cell_key) -> list[Latency]:
    """One Latency per value of `key` over the server runs (by default per configuration, each arm
    apart), in order of first appearance."""
    cells: dict[Hashable, list[RunRow]] = defaultdict(list)
    for row in rows:
        if row.config.get("concurrency") is not None:
            cells[key(row)].append(row)
    return [_latency(cell_rows) for cell_rows in cells.values()]


def _latency(cell_rows: list[RunRow]) -> Latency:
    """The percentiles of the clean runs' requests; a cell whose every run is noisy has none (0 runs,
    empty percentiles) but is kept, so the table shows it and why."""
    clean = [row for row in cell_rows if not row.noisy]
    records = [r for row in clean for r in request_records(row)]
    ttft = [r["ttft_s"] for r in records if r.get("ttft_s") is not None]
    tpot = [r["tpot_s"] for r in records if r.get("tpot_s") is not None]
    return Latency(
        cell_rows[0].config,
        len(clean),
        len(ttft),
        latency_percentiles(ttft),
        latency_percentiles(tpot),
        len(tpot),
        noisy=len(cell_rows) - len(clean),
        noise_reason=noise_reason(cell_rows),
    )
