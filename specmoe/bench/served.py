"""Measuring one suite run against a server: check the server once, warm up, time, make the row."""

from __future__ import annotations

import platform
from datetime import UTC, datetime
from typing import Any

import specmoe
from specmoe.bench.batches import set_prompts
from specmoe.bench.served_rows import served_row
from specmoe.prompts import batch_prompts, synthetic_prompt
from specmoe.results.store import RunRow
from specmoe.serving import client
from specmoe.serving.arrivals import arrival_times
from specmoe.serving.load import run_requests
from specmoe.serving.spec import ServerSpec
from specmoe.suite.types import RunSpec


def run_server(spec: RunSpec) -> ServerSpec:
    """The server a run measures: the SD arm's own server, or the target's for the baseline arm."""
    model = spec.draft_model if spec.arm == "sd" else spec.target_model
    assert model is not None and model.server is not None, "not a server run"
    return model.server


class ServedRunner:
    """Measures server runs. Each server is checked (reachable, serves the model) once, and each
    configuration warms up `warmup` times before its first timed run, as local runs do."""

    def __init__(self) -> None:
        self._checked: set[tuple[str, str]] = set()
        self._warm: set[str] = set()

    def row(self, spec: RunSpec, baseline: RunRow | None) -> RunRow:
        server = run_server(spec)
        if (server.url, server.model) not in self._checked:
            client.check_model(server)
            self._checked.add((server.url, server.model))
        assert spec.concurrency is not None
        prompts = served_prompts(spec, server, spec.requests or spec.concurrency)

        # Open loop: the same seeded schedule for both arms of a pair; each repeat draws its own.
        arrivals = (
            None if spec.request_rate is None else arrival_times(len(prompts), spec.request_rate, spec.repeat)
        )

        def measure():
            return run_requests(
                server,
                prompts,
                spec.concurrency,
                spec.max_new_tokens,
                spec.temperature,
                seed=spec.repeat,
                arrivals=arrivals,
            )

        if spec.config_key not in self._warm:
            for _ in range(spec.warmup):
                measure()
            self._warm.add(spec.config_key)
        run = measure()
        created_at = datetime.now(UTC).isoformat(timespec="seconds")
        return served_row(spec, server, run, baseline, served_environment(server), created_at)


def served_prompts(spec: RunSpec, server: ServerSpec, count: int) -> list[str] | list[list[int]]:
    """The run's prompts: the first `count` texts of its set (cycling, as a local batch takes them),
    or for `prompt_length` the token ids of `count` synthetic prompts of exactly that many tokens,
    made with the server's tokenizer, request i from seed i (as row i of a local batch)."""
    if spec.prompt_length is None:
        assert spec.prompt_set is not None
        return batch_prompts([p.text for p in set_prompts(spec)], count)
    from specmoe.api import load_tokenizer

    assert server.tokenizer is not None, "checked when the suite was loaded"
    tokenizer = load_tokenizer(server.tokenizer)
    return [synthetic_prompt(tokenizer, spec.prompt_length, seed=i) for i in range(count)]


def served_environment(server: ServerSpec) -> dict[str, Any]:
    """Where a server run was measured: the client host and the server as the suite names it."""
    return {
        "python": platform.python_version(),
        "specmoe": specmoe.__version__,
        "client_host": platform.node(),
        "device": "server",
        "server_url": server.url,
        "engine": server.engine,
        "endpoint": server.endpoint,
        "served_model": server.model,
    }
