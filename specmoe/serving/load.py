"""One run against a server: N prompts at concurrency c, each response streamed and timed.

Concurrency is the serving analog of batch size: c client threads each keep one request in flight,
so the server batches up to c sequences (a closed loop). An open loop instead sends each request at
a time fixed in advance (`specmoe.serving.arrivals`), with c as a cap on requests in flight: a
request due while c are in flight waits for one to finish, and its time to first token counts from
when it was sent. Counters are read from `/metrics` just before the first request and just after the
last response, outside the timed window.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from specmoe.serving import client
from specmoe.serving.prometheus import UNKNOWN, Snapshot, SpecCounters, counter_delta, snapshot
from specmoe.serving.servers import EngineMetrics, engine_metrics
from specmoe.serving.spec import ServerSpec
from specmoe.serving.sse import dotted
from specmoe.serving.trust import chunk_count


@dataclass(frozen=True)
class RequestRecord:
    """One request of a run; times are seconds from the run's start on `time.perf_counter`."""

    index: int
    sent_s: float
    first_token_s: float | None  # first token chunk (specmoe.serving.sse)
    last_token_s: float | None  # last token chunk
    done_s: float  # the stream ended
    output_tokens: int  # usage.completion_tokens when sent, else the token chunks (<= max_tokens)
    counted_by: str  # "usage" or "chunks"
    token_chunks: int
    finish_reason: str | None
    retries: int  # connection attempts that failed before this one went out
    response_drafted: int | None  # from the response itself (llama-server's timings, SGLang's
    response_accepted: int | None  # sglext.spec_tokens_details), else None
    scheduled_s: float | None = None  # open loop: when the request was due; None in a closed loop
    response_rounds: int | None = None  # verify steps, from the response itself (SGLang)


@dataclass(frozen=True)
class ServedRun:
    requests: tuple[RequestRecord, ...]
    counters: SpecCounters
    gauges: dict[str, float] = field(default_factory=dict)  # engine averages read after the run
    notes: tuple[str, ...] = ()  # what could not be read, in words


def request_body(
    server: ServerSpec,
    engine: EngineMetrics,
    prompt: str | list[int],
    max_tokens: int,
    temperature: float,
    seed: int,
) -> dict[str, Any]:
    """A streaming request. A prompt of token ids goes to /v1/completions as is (the OpenAI API
    takes a list of ids as `prompt`), so the server decodes exactly those tokens."""
    body: dict[str, Any] = {
        "model": server.model,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        # The final chunk then carries usage.completion_tokens: an exact count even when one chunk
        # holds several tokens, as SD servers stream a whole verify step at once.
        "stream_options": {"include_usage": True},
    }
    if server.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if temperature > 0:
        body["seed"] = seed
    if engine.ignore_eos:
        body["ignore_eos"] = True  # both arms then decode max_tokens tokens, as local runs do
    body.update(engine.request_fields)  # such as SGLang's per-request spec-decode counts
    return body


def run_requests(
    server: ServerSpec,
    prompts: Sequence[str | list[int]],
    concurrency: int,
    max_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    arrivals: Sequence[float] | None = None,
) -> ServedRun:
    """Send every prompt once, at most `concurrency` at a time, and read the counters around it.
    arrivals: open loop, each prompt's send time in seconds from the start (non-decreasing); None
    sends the next prompt as soon as one of the `concurrency` slots is free (closed loop)."""
    engine = engine_metrics(server.engine)
    notes: list[str] = []
    before = _snapshot(server, engine, notes)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = []
        try:
            for index, prompt in enumerate(prompts):
                if arrivals is not None:
                    _sleep_until(start + arrivals[index])
                body = request_body(server, engine, prompt, max_tokens, temperature, seed)
                futures.append(pool.submit(client.stream, server, body))
            times = [f.result() for f in futures]
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    after = _snapshot(server, engine, notes)
    scheduled = list(arrivals) if arrivals is not None else [None] * len(times)
    records = tuple(_record(i, t, start, engine, scheduled[i], max_tokens) for i, t in enumerate(times))
    counters = _counters(engine, before, after, records, notes)
    gauges = after.gauges if after is not None else {}
    return ServedRun(records, counters, gauges, tuple(dict.fromkeys(notes)))


def _snapshot(server: ServerSpec, engine: EngineMetrics, notes: list[str]) -> Snapshot | None:
    if not engine.reads_metrics:
        return None
    text = client.metrics_text(server)
    if text is None:
        notes.append(f"no /metrics at {server.url}, so no {engine.name} counters")
        return None
    return snapshot(text, engine)


def _sleep_until(deadline: float) -> None:
    delay = deadline - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


def _record(
    index: int,
    times: client.StreamTimes,
    start: float,
    engine: EngineMetrics,
    scheduled_s: float | None,
    max_tokens: int,
) -> RequestRecord:
    # The client checked the counts against max_tokens and each other (`specmoe.serving.trust`).
    counted_by = "usage" if times.usage_tokens is not None else "chunks"
    return RequestRecord(
        index=index,
        sent_s=times.sent - start,
        first_token_s=None if times.first is None else times.first - start,
        last_token_s=None if times.last is None else times.last - start,
        done_s=times.done - start,
        output_tokens=times.usage_tokens
        if times.usage_tokens is not None
        else chunk_count(times.token_chunks, max_tokens),
        counted_by=counted_by,
        token_chunks=times.token_chunks,
        finish_reason=times.finish_reason,
        retries=times.retries,
        response_drafted=_response_count(times.final, engine.response_drafted),
        response_accepted=_response_count(times.final, engine.response_accepted),
        scheduled_s=scheduled_s,
        response_rounds=_response_count(times.final, engine.response_rounds),
    )


# Finish reasons of a request the engine gave up on: vLLM's FINISH_REASON_STRINGS name "abort" (by
# the client or the engine) and "error" (a request-level failure); SGLang streams "abort" too.
ABORTED = ("abort", "error")


def unfinished(record: RequestRecord, max_tokens: int, ignore_eos: bool) -> str | None:
    """Why a response did not finish the work its request named, in words; None when it did.

    "cut off": the stream ended without a finish reason. "aborted": a finish reason of ABORTED.
    "stopped early": any other reason than "length" before `max_tokens` although the request asked
    the engine to ignore EOS (a stop string, vLLM's "repetition" detector, an engine that does not
    honour `ignore_eos`), so the two arms of a pair would decode different lengths.
    """
    if record.finish_reason is None:
        return "cut off"
    if record.finish_reason in ABORTED:
        return "aborted"
    if ignore_eos and record.finish_reason != "length" and record.output_tokens < max_tokens:
        return "stopped early"
    return None


def _response_count(payload: dict[str, Any], path: str | None) -> int | None:
    """An integer field of the response; 0 when its parent object is there without it (llama-server
    leaves draft fields out of `timings` when nothing was drafted); None when neither is there."""
    if path is None:
        return None
    value = dotted(payload, path)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    parent = path.rpartition(".")[0]
    return 0 if parent and isinstance(dotted(payload, parent), dict) else None


def _counters(
    engine: EngineMetrics,
    before: Snapshot | None,
    after: Snapshot | None,
    records: tuple[RequestRecord, ...],
    notes: list[str],
) -> SpecCounters:
    if before is not None and after is not None and engine.counters:
        return counter_delta(before, after, engine)
    if engine.response_drafted is not None:
        drafted = _total([r.response_drafted for r in records])
        accepted = _total([r.response_accepted for r in records])
        if drafted is not None and accepted is not None:
            rounds = _total([r.response_rounds for r in records]) if engine.response_rounds else None
            return SpecCounters(rounds, drafted, accepted, None, "responses")
        notes.append(f"responses carry no {engine.response_drafted}, so no draft counts")
    return UNKNOWN


def _total(counts: list[int | None]) -> int | None:
    """The sum over a run's responses; None unless every response carried the count."""
    return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)
