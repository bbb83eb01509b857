"""The serving adapter against the engines as they stream today: field renames, per-request
spec-decode counts, and responses that end early. Each stub chunk follows the engine source that
tests/data/serving-results/README.md cites."""

from __future__ import annotations

import pytest
from serving_stub import StubConfig, StubServer

from specmoe.bench.server_engines import ENGINES
from specmoe.bench.server_spec import ServerSpec
from specmoe.serving import client
from specmoe.serving.load import request_body
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
