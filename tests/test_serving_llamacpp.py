"""End to end against a real OpenAI-compatible server: llama-cpp-python's `llama_cpp.server`,
started on loopback with a tiny-zoo MoE exported to GGUF, measured at concurrency 1 and 4."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from audited import counts_pass
from fake_servers import free_port
from suite_files import write_suite

from specmoe.bench.suite_run import run_suite
from specmoe.errors import SpecmoeError
from specmoe.metrics import (
    RunCounts,
    RunTimes,
    served_decode_tokens_per_s,
    served_run_times,
    time_to_first_token,
)
from specmoe.results.store import Store
from specmoe.serving.client import check_model
from specmoe.serving.spec import ServerSpec
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite

ALIAS = "tiny-moe"
START_TIMEOUT_S = 120.0


def start_server(gguf: Path, log: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", ALIAS,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "1024", "--n_threads", "1",
        # By default a new request cuts off the one being streamed; a benchmark wants them queued.
        "--interrupt_requests", "False", *extra,
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            check_model(ServerSpec(url=url, model=ALIAS, timeout_s=5.0))
            return process, url
        except SpecmoeError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)


@pytest.fixture(scope="module")
def servers(tiny_zoo, tmp_path_factory):
    """One plain server and one with llama-cpp-python's prompt-lookup speculative decoding."""
    from specmoe.zoo.gguf import zoo_gguf

    gguf = zoo_gguf(tiny_zoo, "moe")
    logs = tmp_path_factory.mktemp("llama-server")
    plain, plain_url = start_server(gguf, logs / "plain.log")
    try:
        sd, sd_url = start_server(
            gguf,
            logs / "sd.log",
            "--draft_model",
            "prompt-lookup-decoding",
            "--draft_model_num_pred_tokens",
            "4",
        )
    except BaseException:
        plain.kill()
        raise
    yield plain_url, sd_url
    for process in (plain, sd):
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def test_llama_cpp_server_runs_land_in_the_store_like_local_runs(servers, tmp_path):
    plain_url, sd_url = servers
    models = {"plain": {"url": plain_url, "model": ALIAS}, "lookup": {"url": sd_url, "model": ALIAS}}
    group = {
        "name": "serve",
        "target": "plain",
        "draft": ["lookup"],
        "gamma": [4],
        "concurrency": [1, 4],
        "max_new_tokens": 24,
        "prompt_set": "code",
    }
    suite = load_suite(
        write_suite(tmp_path, "llama-server", file="llama.toml", models=models, groups=[group])
    )
    db = tmp_path / "r.db"
    rows = run_suite(suite, db, None, progress=False)
    assert sorted(r.run_id for r in rows) == sorted(s.run_id for s in expand(suite))
    with Store(db) as store:
        assert len(store) == 4
    ttft_by_concurrency: dict[int, list[float]] = {}
    for row in rows:
        assert isinstance(row.counts, RunCounts) and isinstance(row.times, RunTimes)
        requests = [r for r in row.rounds_trace if r["kind"] == "request"]
        concurrency = row.config["concurrency"]
        assert len(requests) == concurrency
        outputs = [r["output_tokens"] for r in requests]
        assert all(n >= 1 for n in outputs) and max(outputs) >= 2
        prefill_s, decode_s = served_run_times(
            0.0, [r["first_token_s"] for r in requests], [r["last_token_s"] for r in requests]
        )
        assert row.counts.emitted == sum(outputs)
        assert (row.times.prefill_s, row.times.decode_s) == (prefill_s, decode_s)
        assert row.tokens_per_s == served_decode_tokens_per_s(outputs, decode_s) > 0
        assert row.counts.drafted is None and row.acceptance_rate is None  # generic: no counters
        assert counts_pass(row), row.audit_reason
        for r in requests:
            assert r["ttft_s"] == time_to_first_token(r["sent_s"], r["first_token_s"]) > 0
            assert r["finish_reason"] in ("length", "stop")
            # This server sends no usage; it streams about one chunk per token (an empty one for a
            # token that completes no character), so the chunks are the 24 tokens give or take one;
            # a count never passes max_tokens (`specmoe.serving.trust`).
            assert r["counted_by"] == "chunks" and r["output_tokens"] == min(r["token_chunks"], 24)
            if r["finish_reason"] == "length":
                assert abs(r["token_chunks"] - 24) <= 1
        ttft_by_concurrency.setdefault(concurrency, []).extend(r["ttft_s"] for r in requests)
    # One time to first token per request, two arms (plain, lookup) at each concurrency. How they
    # compare (llama_cpp.server decodes one request at a time, so at concurrency 4 the last one
    # waits for the other three) is a timing, which a busy machine can blur: not a test's business.
    assert {c: len(t) for c, t in ttft_by_concurrency.items()} == {1: 2 * 1, 4: 2 * 4}
