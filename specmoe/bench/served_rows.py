"""A server run as a store row: the same columns and metric definitions as a local run.

Counts a server does not report are stored as null, never as a guessed number: `target_forwards`,
`truncated`, and per engine `rounds`, `drafted`, `accepted`; so are the per-round times `draft_s`,
`verify_s` and `overhead_s`, which only the server could measure. The trace holds one record per
request (raw times, plus the per-request metrics of `specmoe.metrics`) and one record of the
server's counters and gauges.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from specmoe.bench.spec_row import run_row
from specmoe.errors import SpecmoeError
from specmoe.metrics import (
    RunCounts,
    RunTimes,
    request_tokens_per_s,
    served_decode_tokens_per_s,
    served_run_times,
    time_per_output_token,
    time_to_first_token,
)
from specmoe.results.run_audit import audit_served_run
from specmoe.results.store import RunRow
from specmoe.serving.load import RequestRecord, ServedRun, unfinished
from specmoe.serving.server_log import Counts
from specmoe.serving.servers import engine_metrics
from specmoe.serving.spec import ServerSpec
from specmoe.suite.types import RunSpec


def served_row(
    spec: RunSpec,
    server: ServerSpec,
    run: ServedRun,
    baseline: RunRow | None,
    env: dict[str, Any],
    created_at: str,
) -> RunRow:
    outputs = [r.output_tokens for r in run.requests]
    prefill_s, decode_s = served_run_times(
        0.0, [r.first_token_s for r in run.requests], [r.last_token_s for r in run.requests]
    )
    tokens_per_s = served_decode_tokens_per_s(outputs, decode_s)
    if not (math.isfinite(tokens_per_s) and tokens_per_s > 0):
        raise SpecmoeError(
            f"{server.url}: no response held 2 or more tokens, so there is no decode rate to measure; "
            "raise max_new_tokens or check what the server returns"
        )
    c = run.counters
    counts = RunCounts(
        rounds=c.rounds,
        target_forwards=None,
        drafted=c.drafted,
        accepted=c.accepted,
        emitted=sum(outputs),
        truncated=None,
    )
    times = RunTimes(
        prefill_s=prefill_s,
        decode_s=decode_s,
        draft_s=None,
        verify_s=None,
        overhead_s=None,
        wall_s=prefill_s + decode_s,
    )
    ignore_eos = engine_metrics(server.engine).ignore_eos  # as `load.request_body` sent it
    ends = [unfinished(r, spec.max_new_tokens, ignore_eos) for r in run.requests]
    audit = audit_served_run(
        counts,
        spec.gamma,
        tokens_per_s,
        baseline.tokens_per_s if baseline else None,
        cut_off=ends.count("cut off"),
        aborted=ends.count("aborted"),
        stopped_early=ends.count("stopped early"),
    )
    return run_row(
        spec,
        env=env,
        counts=counts,
        times=times,
        tokens_per_s=tokens_per_s,
        rounds_trace=[request_trace(r) for r in run.requests] + [server_trace(run)],
        audit_verdict=audit.verdict,
        audit_reason="; ".join([audit.reason, *run.notes]),
        created_at=created_at,
    )


def request_trace(record: RequestRecord) -> dict[str, Any]:
    """A request's raw record with its time to first token, time per output token and end-to-end
    tokens/s (`specmoe.metrics`) beside it."""
    return {
        "kind": "request",
        **asdict(record),
        "ttft_s": time_to_first_token(record.sent_s, record.first_token_s),
        "tpot_s": time_per_output_token(record.first_token_s, record.last_token_s, record.output_tokens),
        "tokens_per_s": request_tokens_per_s(record.output_tokens, record.sent_s, record.last_token_s),
    }


def server_trace(run: ServedRun) -> dict[str, Any]:
    c = run.counters
    by_position = list(c.accepted_by_position) if c.accepted_by_position is not None else None
    return {
        "kind": "server",
        "counters": {
            "source": c.source,
            "rounds": c.rounds,
            "drafted": c.drafted,
            "accepted": c.accepted,
            "accepted_by_position": by_position,
        },
        "gauges": dict(sorted(run.gauges.items())),
        "notes": list(run.notes),
    }


def stored_counts(rows: Iterable[RunRow]) -> list[Counts]:
    """(accepted, drafted) of every stored request that drafted, as the responses reported them
    (`request_trace`), for checking against llama-server's log (`specmoe.serving.server_log`)."""
    found = []
    for row in rows:
        for record in row.rounds_trace:
            if record.get("kind") != "request":
                continue
            drafted, accepted = record.get("response_drafted"), record.get("response_accepted")
            if drafted:  # None: no timings; 0: llama-server logs no line either
                found.append((int(accepted or 0), int(drafted)))
    return found
