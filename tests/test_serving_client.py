"""The streaming client: SSE and chunk parsing, timings, token counting, and one-line errors,
against a stub OpenAI-compatible server on loopback."""

from __future__ import annotations

import threading

import pytest
from fake_servers import StubConfig, StubServer, free_port

from specmoe.errors import SpecmoeError
from specmoe.metrics import time_per_output_token, time_to_first_token
from specmoe.serving import client
from specmoe.serving.load import request_body, run_requests
from specmoe.serving.servers import ENGINES
from specmoe.serving.spec import ServerSpec, normalize_url
from specmoe.serving.sse import MalformedResponse, StreamedError, event_data, parse_chunk


def server_for(stub: StubServer, **kw) -> ServerSpec:
    return ServerSpec(url=stub.url, model=stub.config.model, **{"timeout_s": 10.0, **kw})


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setattr(client, "BACKOFF_S", 0.05)


# --- pure parsing --------------------------------------------------------------------------------


def test_event_data_follows_the_sse_rules():
    lines = [
        b": ping - keep-alive\r\n",
        b"event: message\r\n",
        b'data: {"a":\r\n',
        b"data: 1}\r\n",
        b"\r\n",
        b"data: second\n",
        b"\n",
        b"data: [DONE]\n",
        b"\n",
        b"data: after done\n\n",
    ]
    assert list(event_data(lines)) == ['{"a":\n1}', "second"]


def test_chunks_of_both_endpoints():
    text = parse_chunk('{"choices":[{"index":0,"text":" Paris","finish_reason":null}]}', "completions")
    assert (text.text, text.token, text.usage_tokens, text.finish_reason) == (" Paris", True, None, None)
    # One chunk per token, and this token completes no character yet: still a token.
    partial = parse_chunk('{"choices":[{"index":0,"text":"","finish_reason":null}]}', "completions")
    assert (partial.text, partial.token) == ("", True)
    last = parse_chunk('{"choices":[{"index":0,"text":" x","finish_reason":"length"}]}', "completions")
    assert last.token and last.finish_reason == "length"
    closing = parse_chunk('{"choices":[{"index":0,"text":"","finish_reason":"stop"}]}', "completions")
    assert not closing.token
    role = parse_chunk('{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}', "chat")
    assert (role.text, role.token) == ("", False)
    thought = parse_chunk('{"choices":[{"delta":{"reasoning_content":"hm","content":null}}]}', "chat")
    assert (thought.text, thought.token) == ("hm", True)
    usage = parse_chunk('{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":17}}', "chat")
    assert (usage.text, usage.token, usage.usage_tokens) == ("", False, 17)


def test_malformed_chunks_and_streamed_errors_are_told_apart():
    with pytest.raises(MalformedResponse, match="not JSON"):
        parse_chunk("hello", "completions")
    with pytest.raises(MalformedResponse, match="no 'choices' list"):
        parse_chunk('{"id": "x"}', "completions")
    with pytest.raises(MalformedResponse, match="not a string"):
        parse_chunk('{"choices":[{"text": 5}]}', "completions")
    with pytest.raises(StreamedError, match="out of memory"):
        parse_chunk('{"error":{"message":"out of memory","code":500}}', "chat")


def test_request_body_asks_for_usage_and_ignore_eos_only_where_the_engine_takes_it():
    server = ServerSpec(url="http://h:1", model="m", endpoint="chat")
    body = request_body(server, ENGINES["vllm"], "Hi", 16, 0.0, 0)
    assert body["messages"] == [{"role": "user", "content": "Hi"}] and "prompt" not in body
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and "seed" not in body
    plain = request_body(ServerSpec(url="http://h:1", model="m"), ENGINES["generic"], "Hi", 16, 0.7, 3)
    assert plain["prompt"] == "Hi" and "ignore_eos" not in plain and plain["seed"] == 3


def test_urls_are_normalised_to_the_server_base():
    assert normalize_url("http://h:8000/v1/") == "http://h:8000"
    assert normalize_url("https://api.example.com/openai/v1") == "https://api.example.com/openai"
    assert normalize_url("h:8000") is None and normalize_url("ftp://h") is None


# --- against a stub server -----------------------------------------------------------------------


def test_stream_times_each_token_and_counts_from_usage():
    with StubServer(StubConfig(step_s=0.01)) as stub:
        body = request_body(server_for(stub), ENGINES["vllm"], "Hello", 8, 0.0, 0)
        times = client.stream(server_for(stub), body)
    assert times.usage_tokens == 8 and times.token_chunks == 8 and times.retries == 0
    assert times.sent < times.first < times.last <= times.done
    ttft = time_to_first_token(times.sent, times.first)
    tpot = time_per_output_token(times.first, times.last, times.usage_tokens)
    assert ttft > 0 and tpot > 0
    assert stub.config.requests[0]["ignore_eos"] is True


def test_tokens_fall_back_to_counted_chunks_without_usage():
    with StubServer(StubConfig(usage=False)) as stub:
        run = run_requests(server_for(stub, endpoint="chat"), ["a", "b"], 2, 6)
    assert [r.counted_by for r in run.requests] == ["chunks", "chunks"]
    assert [r.output_tokens for r in run.requests] == [6, 6]


def test_usage_counts_every_token_when_one_chunk_carries_several():
    # An SD server streams a whole verify step at once: after the prefill token, 1 + 3 accepted
    # tokens per chunk (the last step is cut at max_tokens).
    with StubServer(StubConfig(gamma=3, accepted=3)) as stub:
        run = run_requests(server_for(stub, engine="vllm"), ["a"], 1, 12)
    record = run.requests[0]
    assert (record.output_tokens, record.counted_by, record.token_chunks) == (12, "usage", 4)
    assert (run.counters.rounds, run.counters.drafted, run.counters.accepted) == (3, 9, 8)


def test_llama_server_draft_counts_come_from_the_responses():
    config = StubConfig(gamma=4, accepted=3, llama_timings=True)
    with StubServer(config) as stub:
        run = run_requests(server_for(stub, engine="llamacpp-server"), ["a", "b"], 2, 9)
    assert [(r.response_drafted, r.response_accepted) for r in run.requests] == [(8, 6), (8, 6)]
    assert (run.counters.source, run.counters.drafted, run.counters.accepted) == ("responses", 16, 12)
    assert run.counters.rounds is None


def test_concurrency_bounds_the_requests_in_flight():
    with StubServer(StubConfig(step_s=0.02)) as stub:
        run = run_requests(server_for(stub), ["p"] * 4, 2, 5)
    starts = sorted(r.sent_s for r in run.requests)
    ends = sorted(r.done_s for r in run.requests)
    # Two go out at once; the next two wait for a free slot.
    assert starts[1] < ends[0] <= starts[2]


# --- one clear line for each way it goes wrong -----------------------------------------------------


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_server_down():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SpecmoeError) as err:
        client.check_model(ServerSpec(url=url, model="m", timeout_s=2.0))
    assert one_line(err).startswith(f"cannot reach {url} (")
    assert "after 4 attempts; is the server running?" in str(err.value)


def test_a_server_that_comes_up_late_is_reached_by_a_retry():
    port = free_port()
    config = StubConfig()
    late: list[StubServer] = []
    starter = threading.Timer(0.12, lambda: late.append(StubServer(config, port=port).__enter__()))
    starter.start()
    try:
        times = client.stream(
            ServerSpec(url=f"http://127.0.0.1:{port}", model=config.model, timeout_s=5.0),
            {"model": config.model, "prompt": "x", "max_tokens": 3, "stream": True},
        )
    finally:
        starter.join()
        for server in late:
            server.__exit__()
    assert times.retries >= 1 and times.token_chunks == 3


def test_wrong_model_name_lists_the_served_models():
    with StubServer() as stub:
        with pytest.raises(SpecmoeError) as err:
            client.check_model(ServerSpec(url=stub.url, model="Qwen3-235B"))
        assert one_line(err) == (
            f"{stub.url} serves no model 'Qwen3-235B'; it serves: stub-model; "
            "set the suite model's model = to one of these"
        )
        with pytest.raises(SpecmoeError) as err:  # a request skips the check: the server's own words
            client.stream(ServerSpec(url=stub.url, model="nope"), {"model": "nope", "stream": True})
        assert one_line(err) == (
            f"{stub.url}/v1/completions: HTTP 404: The model `nope` does not exist; check the request "
            "the suite sends (model =, endpoint =) against the server's API"
        )


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("malformed", "malformed response: a streamed event is not JSON: 'this is not json'"),
        ("no_stream", "malformed response: asked to stream, the server answered with Content-Type"),
        ("stream_error", "the server reported an error: out of KV cache"),
    ],
)
def test_malformed_or_failing_responses(mode, message):
    with StubServer(StubConfig(mode=mode)) as stub, pytest.raises(SpecmoeError) as err:
        run_requests(server_for(stub), ["a"], 1, 8)
    assert message in one_line(err)
    assert one_line(err).startswith(f"{stub.url}/v1/completions: ")


def test_api_key_comes_from_the_environment_and_is_never_shown(monkeypatch):
    secret = "sk-test-do-not-print-0123456789"
    with StubServer(StubConfig(api_key=secret)) as stub:
        server = server_for(stub, api_key_env="SPECMOE_TEST_KEY")
        monkeypatch.delenv("SPECMOE_TEST_KEY", raising=False)
        with pytest.raises(SpecmoeError, match=r"SPECMOE_TEST_KEY \(api_key_env\) is not set"):
            run_requests(server, ["a"], 1, 4)
        monkeypatch.setenv("SPECMOE_TEST_KEY", "sk-wrong-key-9876543210")
        with pytest.raises(SpecmoeError) as err:
            run_requests(server, ["a"], 1, 4)
        assert "HTTP 401, the server refused the request (Invalid API key)" in one_line(err)
        assert "sk-wrong" not in str(err.value) and "check the key in SPECMOE_TEST_KEY" in str(err.value)
        monkeypatch.setenv("SPECMOE_TEST_KEY", secret)
        run = run_requests(server, ["a"], 1, 4)
    assert run.requests[0].output_tokens == 4
    assert stub.config.headers[-1]["Authorization"] == f"Bearer {secret}"


def test_a_stalled_stream_times_out_with_one_line():
    with StubServer(StubConfig(step_s=1.0)) as stub, pytest.raises(SpecmoeError) as err:
        run_requests(server_for(stub, timeout_s=0.3), ["a"], 1, 3)
    # Without the timeout the stub's three 1 s steps would finish and nothing would raise.
    assert "no data for 0.3 s mid-response; raise timeout_s" in one_line(err)


def test_credentials_in_a_url_are_never_kept():
    # A password pasted into url = ... is dropped from the stored and shown URL; keys come from
    # the environment (api_key_env) only.
    assert normalize_url("http://alice:s3cret@h:8000/v1") == "http://h:8000"
    assert normalize_url("https://token@api.example.com/openai/") == "https://api.example.com/openai"
    assert normalize_url("http://h:99999") is None and normalize_url("http://[::1") is None


def test_a_server_spec_never_holds_credentials():
    spec = ServerSpec(url="http://alice:s3cret@h:8000", model="m")
    assert spec.url == "http://h:8000" and "s3cret" not in repr(spec) + str(spec.identity)
