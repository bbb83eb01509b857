"""The serving adapter against the engines as they stream today: field renames, per-request
spec-decode counts, and responses that end early. Each stub chunk follows the engine source that
tests/data/serving-results/README.md cites."""

from __future__ import annotations

import re

import pytest
from serving_stub import StubConfig, StubServer
from test_serving_run import MODEL, write_suite

from specmoe.bench.server_engines import ENGINES
from specmoe.bench.server_spec import ServerSpec
from specmoe.bench.suite_load import load_suite
from specmoe.bench.suite_run import run_suite
from specmoe.serving import client
from specmoe.serving.load import RequestRecord, request_body, unfinished
from specmoe.serving.sse import parse_chunk


def server_for(stub: StubServer, **kw) -> ServerSpec:
    return ServerSpec(url=stub.url, model=stub.config.model, **{"timeout_s": 10.0, **kw})


# --- vLLM reasoning models: `delta.reasoning` -----------------------------------------------------

# A thinking chunk as vLLM's DeltaMessage serialises it now: `reasoning`, plus the deprecated
# `reasoning_content` that its validator copies from it; older servers send the latter alone.
VLLM_THINKING = '{"choices":[{"index":0,"delta":{"reasoning":" Let","reasoning_content":" Let"}}]}'
VLLM_THINKING_NEW_ONLY = '{"choices":[{"index":0,"delta":{"reasoning":" me"},"finish_reason":null}]}'
VLLM_THINKING_OLD = '{"choices":[{"index":0,"delta":{"reasoning_content":" see"}}]}'


def test_reasoning_chunks_are_token_chunks_under_both_names():
    both = parse_chunk(VLLM_THINKING, "chat")
    assert both.token and both.text == " Let"  # the deprecated copy is not counted twice
    new = parse_chunk(VLLM_THINKING_NEW_ONLY, "chat")
    assert new.token and new.text == " me"
    old = parse_chunk(VLLM_THINKING_OLD, "chat")
    assert old.token and old.text == " see"
    empty = parse_chunk('{"choices":[{"index":0,"delta":{"reasoning":""}}]}', "chat")
    assert empty.token and empty.text == ""  # a token that completes no character


REASONING_SPELLINGS = [("reasoning",), ("reasoning", "reasoning_content"), ("reasoning_content",)]


@pytest.mark.parametrize("fields", REASONING_SPELLINGS)
def test_thinking_counts_from_the_first_reasoning_token(fields):
    # 4 thinking words, then 4 answer words: every one is a token chunk, so the first token is the
    # first thinking word (TTFT) and the decode spans all 8 (TPOT).
    config = StubConfig(step_s=0.002, reasoning_fields=fields, reasoning_tokens=4)
    with StubServer(config) as stub:
        server = server_for(stub, endpoint="chat", engine="vllm")
        times = client.stream(server, request_body(server, ENGINES["vllm"], "Hi", 8, 0.0, 0))
    assert times.token_chunks == 8 and times.usage_tokens == 8
    assert times.first is not None and times.last is not None and times.first < times.last


# --- responses that end before the work their request named -------------------------------------


def record(finish: str | None, tokens: int) -> RequestRecord:
    return RequestRecord(0, 0.0, 0.1, 0.2, 0.3, tokens, "usage", tokens, finish, 0, None, None)


def test_how_a_response_ended():
    assert unfinished(record("length", 8), 8, ignore_eos=True) is None
    assert unfinished(record("stop", 8), 8, ignore_eos=True) is None  # EOS on the last token
    assert unfinished(record(None, 3), 8, ignore_eos=True) == "cut off"
    assert unfinished(record("abort", 3), 8, ignore_eos=True) == "aborted"
    assert unfinished(record("error", 3), 8, ignore_eos=False) == "aborted"  # vLLM's request error
    assert unfinished(record("stop", 3), 8, ignore_eos=True) == "stopped early"
    assert unfinished(record("repetition", 3), 8, ignore_eos=True) == "stopped early"
    assert unfinished(record("stop", 3), 8, ignore_eos=False) is None  # EOS is a normal end then


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("abort", r"responses aborted by the server \([14], finish_reason abort or error\)"),
        ("stop", r"responses stopped before max_tokens although ignore_eos was sent \([14]\)"),
    ],
)
def test_responses_that_end_early_fail_the_audit(tmp_path, mode, reason):
    with StubServer(StubConfig(model=MODEL, mode=mode)) as plain, StubServer(StubConfig(model=MODEL)) as sd:
        rows = run_suite(load_suite(write_suite(tmp_path, plain.url, sd.url)), tmp_path / "r.db", None, False)
    early = [r for r in rows if r.arm == "baseline"]
    assert early and all(r.audit_verdict == "fail" for r in early)
    assert all(re.match(reason, r.audit_reason) for r in early)  # 1 or 4: each request of the run
    assert all(r.audit_verdict == "pass" for r in rows if r.arm == "sd")
