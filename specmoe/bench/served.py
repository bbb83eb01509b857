"""Measuring suite runs against a server: check the server once, warm up, time, make the row, and
hold each SD row to its own acceptance's bound (the noise guard's check that needs no machine
accounting, `specmoe.bench.noise.speedup_beyond_bound`)."""

from __future__ import annotations

import logging
import platform
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import specmoe
from specmoe.bench.batches import set_prompts
from specmoe.bench.noise import flagged_beyond_bound, guard_on, speedup_beyond_bound
from specmoe.bench.served_rows import served_row
from specmoe.prompts import batch_prompts, synthetic_prompt
from specmoe.results.store import RunRow
from specmoe.serving import client
from specmoe.serving.arrivals import arrival_times
from specmoe.serving.load import run_requests
from specmoe.serving.spec import ServerSpec
from specmoe.suite.types import RunSpec

log = logging.getLogger(__name__)


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

    def block(self, specs: Sequence[RunSpec], stored_baseline: RunRow | None) -> list[RunRow]:
        """A block's rows, baseline first (a served SD row is made against its baseline's row).

        SD rows whose speedup breaks their own acceptance's bound (`_beyond_bound`) are measured once
        more with the whole block, its baseline first (the likelier disturbed arm), and the second
        measurement's rows are kept; with a baseline stored by an earlier run of the suite, which
        cannot be measured again, only those SD arms. Still beyond, they are stored flagged noisy
        with the reason (`noise.flagged_beyond_bound`), as local runs are.
        """
        ordered = sorted(specs, key=lambda s: s.arm != "baseline")
        rows = self._rows(ordered, stored_baseline)
        attempts = dict.fromkeys(rows, 1)
        beyond = _beyond_bound(ordered, rows, stored_baseline)
        if beyond:
            whole_block = any(spec.arm == "baseline" for spec in ordered)
            again = [spec for spec in ordered if whole_block or spec.run_id in beyond]
            for spec in again:
                log.debug("%s: %s; measuring again", spec.run_id, beyond.get(spec.run_id, "its SD arm"))
                attempts[spec.run_id] += 1
            rows |= self._rows(again, stored_baseline)
            beyond = _beyond_bound(ordered, rows, stored_baseline)
        kept = []
        for spec in ordered:
            measure = {"attempts": attempts[spec.run_id], "noise": None, "noise_guard": guard_on()}
            why = beyond.get(spec.run_id)
            if why:
                measure = flagged_beyond_bound(measure, why)
            kept.append(replace(rows[spec.run_id], measure=measure, noisy=bool(why)))
        return kept

    def _rows(self, ordered: Sequence[RunSpec], stored_baseline: RunRow | None) -> dict[str, RunRow]:
        """One timed measurement of each run, in order, by run id; each SD row against the baseline
        row measured before it, else the stored one."""
        rows, baseline = {}, stored_baseline
        for spec in ordered:
            row = self.row(spec, baseline if spec.arm == "sd" else None)
            baseline = row if spec.arm == "baseline" else baseline
            rows[spec.run_id] = row
        return rows

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


def _beyond_bound(
    specs: Sequence[RunSpec], rows: dict[str, RunRow], stored_baseline: RunRow | None
) -> dict[str, str]:
    """Why each SD row of the block is beyond its own acceptance's bound, by run id; only such rows.
    A server that reports no draft counts gives no acceptance to judge by: its rows are left alone
    (the audit still holds them to 1 + γ)."""
    baseline = next((rows[s.run_id] for s in specs if s.arm == "baseline"), stored_baseline)
    if baseline is None:
        return {}
    found = {}
    for spec in specs:
        counts = rows[spec.run_id].counts
        if spec.arm != "sd" or not spec.gamma or not counts.drafted or counts.accepted is None:
            continue
        rate = rows[spec.run_id].tokens_per_s
        why = speedup_beyond_bound(rate, baseline.tokens_per_s, spec.gamma, counts.accepted, counts.drafted)
        if why:
            found[spec.run_id] = why
    return found


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
