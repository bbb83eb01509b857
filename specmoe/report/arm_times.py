"""Where each configuration's time goes, per arm: decode milliseconds per output token split into
draft, verify and overhead, and the prompt phase (prefill, time to first token) of local runs.

An *arm timing* is one configuration (a baseline or an SD arm) over its runs, each run one prompt
batch in one repeat, the sampling unit. Runs the noise guard flagged are left out; a configuration
whose every run was flagged is kept with no number and says so. Each arm's own clean runs count
here (not only the runs of clean pairs, as for a speedup), so a baseline reads the same beside every
SD configuration it serves. The definitions are `specmoe.metrics` (docs/metrics.md); server runs time
neither the per-round parts nor a local prompt phase and have no arm timing (their TTFT is in the
serving latency table).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specmoe.metrics import decode_split_per_token, local_time_to_first_token
from specmoe.report.intervals import Interval, mean_interval
from specmoe.report.slices import sorted_by_config
from specmoe.results.compare import cell_key, noise_reason
from specmoe.results.run_config import RunConfig
from specmoe.results.store import RunRow


@dataclass(frozen=True)
class ArmTiming:
    config: dict[str, Any]
    settings: RunConfig  # `config` typed
    arm: str  # "baseline" | "sd"
    runs: int  # clean runs behind the numbers
    noisy: int  # runs the noise guard flagged, left out
    # "draft", "verify", "overhead", "decode" -> ms per output token (`metrics.decode_split_per_token`);
    # None when a run did not time its parts.
    per_token_ms: dict[str, Interval] | None
    prefill_ms: Interval | None  # mean prefill milliseconds per run (the batch's prompt phase)
    ttft_ms: Interval | None  # mean local time to first token, ms; None without round traces
    no_number: str = ""  # "all 4 runs flagged noisy: no number"; "" when the arm has numbers
    reason: str = ""  # the noise guard's reason for the first flagged run


def arm_timings(rows: Sequence[RunRow]) -> list[ArmTiming]:
    """One ArmTiming per local configuration (both arms), in the report's row order."""
    clean: dict[str, list[RunRow]] = defaultdict(list)
    flagged: dict[str, list[RunRow]] = defaultdict(list)
    for row in rows:
        if row.settings.concurrency is None:  # local runs only: a server times neither part
            (flagged if row.noisy else clean)[cell_key(row)].append(row)
    timings = [_timing(group, len(flagged.get(key, ()))) for key, group in clean.items()]
    timings += [_unmeasured(group) for key, group in flagged.items() if key not in clean]
    return sorted_by_config(timings)


def _timing(rows: list[RunRow], noisy: int) -> ArmTiming:
    ttft = [first_token_s(r) for r in rows]
    return ArmTiming(
        config=rows[0].config,
        settings=rows[0].settings,
        arm=rows[0].arm,
        runs=len(rows),
        noisy=noisy,
        per_token_ms=decode_split_per_token([r.times for r in rows], [r.counts.emitted for r in rows]),
        prefill_ms=mean_interval([r.times.prefill_s for r in rows]).scaled(1000.0),
        ttft_ms=None if None in ttft else mean_interval(ttft).scaled(1000.0),  # type: ignore[arg-type]
    )


def _unmeasured(rows: list[RunRow]) -> ArmTiming:
    return ArmTiming(
        config=rows[0].config,
        settings=rows[0].settings,
        arm=rows[0].arm,
        runs=0,
        noisy=len(rows),
        per_token_ms=None,
        prefill_ms=None,
        ttft_ms=None,
        no_number=f"all {len(rows)} runs flagged noisy: no number",
        reason=noise_reason(rows),
    )


def first_token_s(row: RunRow) -> float | None:
    """A local run's time to first token (`metrics.local_time_to_first_token`) from its stored
    prefill and its first traced round; None when the run kept no round trace."""
    rounds = [t for t in row.rounds_trace if "kind" not in t]  # server records carry a kind
    if not rounds:
        return None
    first = rounds[0]
    return local_time_to_first_token(
        row.times.prefill_s, first["draft_s"] + first["verify_s"] + first["overhead_s"]
    )
