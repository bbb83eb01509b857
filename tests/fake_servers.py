"""The tests' fake servers, all on 127.0.0.1 and all stopped when their test leaves the `with` block.

- `LoopbackHTTP`: an http.server on a free port for a handler class a test writes.
- `StubServer` (with `StubConfig`): an OpenAI-compatible server that streams words and counts like
  vLLM. Each step of a response emits `1 + accepted` words in one chunk (an SD server's verify step)
  and sleeps `step_s`; `/metrics` exposes vLLM's spec-decode counters in Prometheus text. Modes break
  it on purpose: a malformed stream, an error inside the stream, or a JSON answer to a streaming
  request.
- `RawServer`: answers each connection with bytes a test writes by hand (a reset, a cut chunk, a
  reply that is not HTTP); `EndlessServer`: a body that never ends. Both read the whole request
  first (`read_request`).
- `free_port`: a port nothing listens on, for a server a test starts or a client that must fail.

Reading one HTTP/1.1 request off a raw socket: a fake server must read the whole request before it
answers and closes. http.client sends the headers and the body in two writes, so on a loaded machine
one `recv` can return the headers alone. A socket closed with bytes still unread makes the kernel
reset the connection (RST) instead of closing it (FIN), and the client then loses the answer it had
not yet read: it reports "the connection broke mid-response", a fault of the fake server, not of the
code under test.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD_BYTES = 1 << 16


def read_request(conn: socket.socket) -> bytes:
    """The request's head and its Content-Length body, however the bytes arrive; b"" when the client
    hangs up first. Raises OSError (a socket timeout included) as the socket does."""
    data = b""
    while _HEAD_END not in data:
        part = conn.recv(65536)
        if not part or len(data) > _MAX_HEAD_BYTES:
            return data
        data += part
    head, _, body = data.partition(_HEAD_END)
    length = _content_length(head)
    while len(body) < length:
        part = conn.recv(65536)
        if not part:
            break
        body += part
    return head + _HEAD_END + body


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on (the kernel's pick, closed again at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LoopbackHTTP:
    """`handler` served on 127.0.0.1 (a free port unless `port` is given) from a daemon thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class RawServer:
    """Answers each connection on 127.0.0.1 with `answer(connection, request bytes)` until the test
    leaves its `with` block; `url` is the root followed by `path`. The whole request is read first
    (`read_request`: answering after a partial read resets the connection). A connection waits at
    most CONN_TIMEOUT_S for its request, so a client that never sends one holds no thread for long;
    the server's life is the test's, never a wall-clock allowance a loaded machine could outlast."""

    CONN_TIMEOUT_S = 60.0

    def __init__(self, answer: Callable[[socket.socket, bytes], None], path: str = "/v1") -> None:
        self.answer, self.path, self.stopped = answer, path, threading.Event()
        self.posts = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}{self.path}"

    def _accept(self) -> None:
        with self.sock:
            while not self.stopped.is_set():
                try:
                    conn, _ = self.sock.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(self.CONN_TIMEOUT_S)
            try:
                request = read_request(conn)
                self.posts += request.startswith(b"POST")
                self.answer(conn, request)
            except OSError:  # the client hung up
                pass


class EndlessServer(RawServer):
    """Answers every request with 200 and a body that never ends: `chunk` bytes every `gap_s`
    seconds, until the client hangs up or the test leaves the server's `with` block."""

    def __init__(self, chunk: bytes, gap_s: float = 0.0) -> None:
        self.chunk, self.gap_s = chunk, gap_s
        super().__init__(self._endless, path="")

    def _endless(self, conn: socket.socket, request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        while not self.stopped.is_set():  # an OSError here is the client hanging up: the bound worked
            conn.sendall(self.chunk)
            time.sleep(self.gap_s)


@dataclass
class StubConfig:
    model: str = "stub-model"
    step_s: float = 0.002  # seconds per decode step
    accepted: int = 0  # draft tokens accepted per step; with gamma > 0 the server "speculates"
    gamma: int = 0
    usage: bool = True  # honour stream_options.include_usage
    llama_timings: bool = False  # llama-server's `timings` with draft counts in the last chunk
    mode: str = "ok"  # "ok", "malformed", "stream_error", "no_stream", "cut"; after 2 tokens:
    # "abort" ends with finish_reason "abort", "stop" with "stop" (ignore_eos not honoured)
    # chat: the first `reasoning_tokens` words stream as thinking, in these delta fields (vLLM now
    # sends `reasoning` with a deprecated copy in `reasoning_content`; older servers the latter only)
    reasoning_fields: tuple[str, ...] = ()
    reasoning_tokens: int = 0
    # SGLang's per-request counts when the request sets return_spec_tokens_details: "" never,
    # "honest", or "zero_accepted" (claims no draft was accepted while it streams as if they were)
    sglang_details: str = ""
    api_key: str | None = None  # require "Authorization: Bearer <key>"
    requests: list[dict] = field(default_factory=list)  # bodies received
    headers: list[dict] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=lambda: {"drafts": 0, "draft_tokens": 0, "accepted": 0})
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0  # responses being streamed now
    max_in_flight: int = 0


class StubServer(LoopbackHTTP):
    def __init__(self, config: StubConfig | None = None, port: int = 0) -> None:
        self.config = config or StubConfig()
        super().__init__(type("Handler", (_Handler,), {"config": self.config}), port)


def vllm_metrics(counters: dict[str, int], model: str) -> str:
    labels = f'engine="0",model_name="{model}"'
    lines = []
    for name, key in (
        ("vllm:spec_decode_num_drafts", "drafts"),
        ("vllm:spec_decode_num_draft_tokens", "draft_tokens"),
        ("vllm:spec_decode_num_accepted_tokens", "accepted"),
    ):
        lines += [f"# HELP {name}_total {name}", f"# TYPE {name}_total counter"]
        lines.append(f"{name}_total{{{labels}}} {float(counters[key])}")
    return "\n".join(lines) + "\n"


def sglext_chunk(c: StubConfig, chat: bool, steps: int, emitted: int) -> dict:
    """SGLang's chunk of per-request spec-decode counts, sent before the usage chunk with empty
    choices. Its counts keep SGLang's identity completion_tokens = accepted drafts + verify steps
    (the step that made the first token included), and proposed = verify steps x draft length."""
    correct = 0 if c.sglang_details == "zero_accepted" else emitted - steps
    details = {
        "spec_accept_rate": correct / (steps * c.gamma),
        "spec_accept_length": emitted / steps,
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": steps * c.gamma,
        "spec_verify_ct": steps,
        "spec_correct_drafts_histogram": [],
        "spec_cap_lens_histogram": [],
    }
    kind = "chat.completion.chunk" if chat else "text_completion"
    return {
        "id": "1",
        "object": kind,
        "model": c.model,
        "choices": [],
        "sglext": {"spec_tokens_details": details},
    }


class _Handler(BaseHTTPRequestHandler):
    config: StubConfig

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.config.model, "object": "model"}]})
        elif self.path == "/metrics" and self.config.gamma:
            body = vllm_metrics(self.config.counters, self.config.model).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.config.requests.append(body)
        self.config.headers.append(dict(self.headers))
        if self.config.api_key and self.headers.get("Authorization") != f"Bearer {self.config.api_key}":
            self._json(401, {"error": {"message": "Invalid API key", "type": "auth", "code": 401}})
            return
        if body.get("model") != self.config.model:
            message = f"The model `{body.get('model')}` does not exist."
            self._json(404, {"object": "error", "message": message, "type": "NotFoundError", "code": 404})
            return
        if self.config.mode == "no_stream":
            self._json(200, {"choices": [{"text": "whole answer", "index": 0}]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        with self.config.lock:
            self.config.in_flight += 1
            self.config.max_in_flight = max(self.config.max_in_flight, self.config.in_flight)
        self._counted = True
        try:
            self._stream(body)
        finally:
            self._leave()

    def _leave(self) -> None:
        """The request stops counting as in flight, once. Called before the stream's last write:
        a client that has read [DONE] may send its next request before this thread runs again."""
        if getattr(self, "_counted", False):
            self._counted = False
            with self.config.lock:
                self.config.in_flight -= 1

    def _stream(self, body: dict) -> None:
        c = self.config
        chat = self.path.endswith("/chat/completions")
        if c.mode == "malformed":
            self._event("this is not json")
            return
        if chat:
            self._event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        remaining, emitted, drafted, accepted, steps = body["max_tokens"], 0, 0, 0, 0
        while remaining > 0:
            steps += 1
            time.sleep(c.step_s)
            words = min(1 + c.accepted, remaining) if c.gamma and emitted else 1
            text = "".join(f" w{emitted + i}" for i in range(words))
            thinking = chat and c.reasoning_fields and emitted < c.reasoning_tokens
            fields = c.reasoning_fields if thinking else ("content",)
            delta = {"delta": dict.fromkeys(fields, text)} if chat else {"text": text}
            self._event({"choices": [{"index": 0, **delta, "finish_reason": None}]})
            if c.gamma and emitted > 0:  # the first token comes from prefill, as in a real server
                drafted += c.gamma
                accepted += words - 1
                with c.lock:
                    c.counters["drafts"] += 1
                    c.counters["draft_tokens"] += c.gamma
                    c.counters["accepted"] += words - 1
            emitted += words
            remaining -= words
            if c.mode == "stream_error" and emitted >= 2:
                self._event({"error": {"message": "out of KV cache", "code": 500}})
                return
            if c.mode == "cut" and emitted >= 2:  # ends the stream as if another request took over
                self._event("[DONE]")
                return
            if c.mode in ("abort", "stop") and emitted >= 2:
                break
        finish = c.mode if c.mode in ("abort", "stop") else "length"
        last: dict = {
            "choices": [{"index": 0, "finish_reason": finish, **({"delta": {}} if chat else {"text": ""})}]
        }
        if c.llama_timings:
            last["timings"] = {
                "predicted_n": emitted,
                **({"draft_n": drafted, "draft_n_accepted": accepted} if drafted else {}),
            }
        self._event(last)
        if c.sglang_details and c.gamma and body.get("return_spec_tokens_details"):
            self._event(sglext_chunk(c, chat, steps, emitted))
        if c.usage and body.get("stream_options", {}).get("include_usage"):
            self._event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": emitted}})
        self._event("[DONE]")

    def _event(self, data) -> None:
        if data == "[DONE]":
            self._leave()
        text = data if isinstance(data, str) else json.dumps(data)
        self.wfile.write(f"data: {text}\n\n".encode())
        self.wfile.flush()

    def _json(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
