"""Servers that lie, stall or never stop: each fails its request with one line and no stored number.

A hostile OpenAI-compatible server on loopback streams what each mode says. Every loop in it is
bounded, so a client that failed to stop reading would end the test with a wrong answer, not hang.
"""

from __future__ import annotations

import contextlib
import json
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from fake_servers import LoopbackHTTP, StubConfig, StubServer
from suite_files import suite_toml

from specmoe.bench.suite_run import run_suite
from specmoe.cli import main
from specmoe.errors import RunFailed, SpecmoeError
from specmoe.results.store import Store
from specmoe.serving import client
from specmoe.serving.load import request_body, run_requests
from specmoe.serving.servers import ENGINES
from specmoe.serving.spec import ServerSpec
from specmoe.serving.trust import CHUNK_SLACK, count_problem
from specmoe.suite.load import load_suite

MODEL = "stub-model"
MAX_EVENTS = 2000  # the most events any mode sends: a bound on the server, not a claim on the client


def _token(text: str = " w") -> dict:
    return {"choices": [{"index": 0, "text": text, "finish_reason": None}]}


def _finish(usage: int | None) -> list[dict]:
    last: list[dict] = [{"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}]
    if usage is not None:
        last.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": usage}})
    return last


class _Hostile(BaseHTTPRequestHandler):
    mode = "ok"
    pause_s = 0.01  # between events of the slow modes

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"data": [{"id": MODEL}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        wanted = int(request["max_tokens"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        with contextlib.suppress(OSError):  # the client hung up, as it should on a lying stream
            self._stream(wanted)

    def _send(self, data: dict | str) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        self.wfile.write(f"data: {text}\n\n".encode())
        self.wfile.flush()

    def _stream(self, wanted: int) -> None:
        mode = self.mode
        if mode == "comments":  # keep-alive pings and nothing else, for a bounded while
            for _ in range(MAX_EVENTS):
                self.wfile.write(b": ping\n\n")
                self.wfile.flush()
                time.sleep(self.pause_s)
            return
        if mode == "busy":  # data events carrying no token, for a bounded while
            for _ in range(MAX_EVENTS):
                self._send({"choices": []})
                time.sleep(self.pause_s)
            return
        if mode == "bad_utf8":
            self.wfile.write(b'data: {"choices": [{"text": "\xff\xfe"}]}\n\n')
            self.wfile.flush()
            return
        tokens = MAX_EVENTS if mode == "endless" else wanted
        for _ in range(tokens):
            self._send(_token())
        usage = {
            "over_usage": 10**9,
            "negative_usage": -100,
            "under_usage": 3,
            "endless": None,
            "no_usage": None,
        }
        for event in _finish(usage.get(mode, tokens)):
            self._send(event)
        self._send("[DONE]")


class Hostile(LoopbackHTTP):
    def __init__(self, mode: str) -> None:
        super().__init__(type("Handler", (_Hostile,), {"mode": mode}))


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def fetch(mode: str, max_tokens: int = 8, timeout_s: float = 10.0) -> client.StreamTimes:
    with Hostile(mode) as server:
        spec = ServerSpec(url=server.url, model=MODEL, timeout_s=timeout_s)
        return client.stream(spec, request_body(spec, ENGINES["generic"], "x", max_tokens, 0.0, 0))


# --- counts checked against the request and each other (fault: servers trusted blindly) ---------


def test_count_rules():
    assert count_problem(8, 8, 8) == "" and count_problem(12, 4, 12) == ""  # SD: several per chunk
    assert count_problem(None, 8 + CHUNK_SLACK, 8) == ""  # llama-cpp-python's extra chunk
    assert "negative" in count_problem(-100, 8, 8)
    assert "> max_tokens 8" in count_problem(9, 8, 8)
    assert "usage.completion_tokens is 3" in count_problem(3, 3 + CHUNK_SLACK + 1, 8)
    assert "no token chunk" in count_problem(5, 0, 8)
    assert "(no usage sent)" in count_problem(None, 8 + CHUNK_SLACK + 1, 8)


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("over_usage", "usage.completion_tokens 1000000000 > max_tokens 8 of the request"),
        ("negative_usage", "usage.completion_tokens is -100, a negative count"),
        ("under_usage", "8 token chunks streamed but usage.completion_tokens is 3"),
        ("endless", f"over {8 + CHUNK_SLACK} token chunks streamed for max_tokens 8; stopped reading"),
    ],
)
def test_a_response_whose_counts_lie_fails_with_its_reason(mode, reason):
    with pytest.raises(RunFailed) as err:
        fetch(mode)
    assert reason in one_line(err)
    assert "untrustworthy response" in str(err.value) and "no number is stored" in str(err.value)


def test_an_honest_response_passes_and_counts_never_exceed_max_tokens():
    assert fetch("ok").usage_tokens == 8
    with Hostile("no_usage") as server:
        run = run_requests(ServerSpec(url=server.url, model=MODEL, timeout_s=10.0), ["a"], 1, 8)
    assert run.requests[0].output_tokens == 8 and run.requests[0].counted_by == "chunks"


def write_suite(tmp_path: Path, plain_url: str, sd_url: str, **plain: Any) -> Path:
    """Suite "serve" of an honest baseline group and an SD group; `plain` adds keys to the plain server."""
    models = {"plain": {"url": plain_url, "model": MODEL} | plain, "spec": {"url": sd_url, "model": MODEL}}
    honest = {"name": "honest", "target": "plain", "max_new_tokens": 6, "warmup": 0}
    lying = {
        "name": "lying",
        "target": "plain",
        "draft": ["spec"],
        "gamma": [3],
        "max_new_tokens": 8,
        "warmup": 0,
    }
    path = tmp_path / "serve.toml"
    path.write_text(suite_toml("serve", models=models, groups=[honest, lying]), encoding="utf-8")
    return path


def test_a_lying_server_fails_its_runs_records_why_and_stores_no_number(tmp_path, capsys):
    db = tmp_path / "r.db"
    with StubServer(StubConfig(model=MODEL)) as plain, Hostile("over_usage") as liar:
        suite = write_suite(tmp_path, plain.url, liar.url)
        with pytest.raises(SpecmoeError) as err:
            run_suite(load_suite(suite), db, None, progress=False)
        assert "runs failed every attempt" in one_line(err) and "> max_tokens 8" in str(err.value)
        assert main(["bench", "run", str(suite), "--db", str(db), "--quiet"]) == 2
    # Each failed attempt is logged as it happens (a warning line); the error itself is one line.
    errors = [line for line in capsys.readouterr().err.splitlines() if "specmoe: error:" in line]
    assert len(errors) == 1 and "runs failed every attempt" in errors[0] and "Traceback" not in errors[0]
    with Store(db) as store:
        rows, failures = store.rows(), store.failures()
    # The honest run is stored; the lying block (its SD arm and the baseline measured with it) is not.
    assert [r.group for r in rows] == ["honest"] and len({f.run_id for f in failures}) == 2
    assert failures and all(f.final and "> max_tokens 8" in f.error for f in failures)
    assert {f.run_id for f in failures}.isdisjoint(r.run_id for r in rows)


# --- no hang: idle and total timeouts, a token cap, one line for bytes that are not text ---------


def test_keep_alive_comments_do_not_reset_the_idle_timeout():
    # The server pings every 0.01 s for 20 s; a timeout that pings reset would wait that long.
    with pytest.raises(SpecmoeError) as err:
        fetch("comments", timeout_s=0.3)
    assert "no data for 0.3 s mid-response; raise timeout_s" in one_line(err)


def test_a_response_that_never_ends_hits_the_total_limit(monkeypatch):
    # Data every 0.01 s keeps the idle timeout from firing; the total limit (2 x 0.3 s here) ends it.
    monkeypatch.setattr(client, "TOTAL_TIMEOUT_FACTOR", 2)
    with pytest.raises(RunFailed) as err:
        fetch("busy", timeout_s=0.3)
    assert "the response went on past 0.6 s (2 x timeout_s) without ending" in one_line(err)


def test_invalid_utf8_in_a_stream_is_a_malformed_response():
    with pytest.raises(SpecmoeError) as err:
        fetch("bad_utf8")
    assert "malformed response: a streamed line is not UTF-8 text" in one_line(err)
    assert type(err.value) is SpecmoeError


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_a_timeout_that_is_not_finite_is_refused_at_load(tmp_path, value):
    path = write_suite(tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9", timeout_s=float(value))
    with pytest.raises(SpecmoeError) as err:
        load_suite(path)
    assert "models.plain.timeout_s: timeout_s must be" in one_line(err)
