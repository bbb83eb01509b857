"""Servers that break a response: a reset mid-stream, a chunk cut short, a stream without [DONE],
an HTTP 500 (never sent again), a redirect, an answer that is not HTTP, and answers that never end
(read up to a cap or the total deadline). Each is one line and stores nothing. More lying servers:
tests/test_served_trust.py.

Every fake server (tests/fake_servers.py) listens on 127.0.0.1 only, reads each request whole and
stops when its test ends.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import struct

import pytest
from fake_servers import EndlessServer, RawServer
from test_bad_input_cli import _served_suite, _stored_runs

from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.serving import client
from specmoe.serving.client import MAX_BODY_BYTES
from specmoe.serving.spec import ServerSpec

# --- servers -------------------------------------------------------------------------------------


def _models(conn: socket.socket) -> None:
    body = json.dumps({"data": [{"id": "m"}]}).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    conn.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)


def _event(data: dict | str) -> bytes:
    return b"data: " + (data if isinstance(data, str) else json.dumps(data)).encode() + b"\n\n"


TOKEN = _event({"choices": [{"index": 0, "text": " w", "finish_reason": None}]})
STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def _reset_mid_stream(conn: socket.socket, request: bytes) -> None:
    if request.startswith(b"GET"):
        return _models(conn)
    conn.sendall(STREAM_HEAD + b"Connection: close\r\n\r\n" + TOKEN + TOKEN)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close


def _chunk_cut_short(conn: socket.socket, request: bytes) -> None:
    if request.startswith(b"GET"):
        return _models(conn)
    data = TOKEN + TOKEN
    chunk = f"{len(data):x}\r\n".encode() + data + b"\r\n" + b"40\r\nabc"  # promises 64 bytes, sends 3
    conn.sendall(STREAM_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk)


def _ends_without_done(conn: socket.socket, request: bytes) -> None:
    if request.startswith(b"GET"):
        return _models(conn)
    conn.sendall(STREAM_HEAD + b"Connection: close\r\n\r\n" + TOKEN + TOKEN)


def _error_500(conn: socket.socket, request: bytes) -> None:
    if request.startswith(b"GET"):
        return _models(conn)
    body = b'{"error": {"message": "CUDA error: an illegal memory access", "code": 500}}'
    head = f"HTTP/1.1 500 Internal Server Error\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    conn.sendall(head.encode() + body)


def _redirect(conn: socket.socket, request: bytes) -> None:
    head = "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:9/v1/models\r\n"
    conn.sendall(head.encode() + b"Content-Length: 0\r\nConnection: close\r\n\r\n")


def _not_http(conn: socket.socket, request: bytes) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")  # url = names the SSH port by mistake


SERVERS = {
    "server-resets-mid-stream": (_reset_mid_stream, "/v1/completions: the connection broke mid-response"),
    # A short chunk then a close reads as IncompleteRead, or as a reset when the close races the read.
    "server-chunk-cut-short": (_chunk_cut_short, "/v1/completions: the connection broke mid-response ("),
    "server-http-500": (_error_500, "HTTP 500: CUDA error: an illegal memory access; the server failed"),
    "server-redirects": (_redirect, "HTTP 307, the server redirects to http://127.0.0.1:9/v1/models"),
    "server-not-http": (_not_http, "the server did not answer in HTTP (BadStatusLine: SSH-2.0-OpenSSH_9.6)"),
}


def _bench(argv: list[str], capsys) -> tuple[int, list[str], str]:
    """main's exit status, its stderr lines and its stdout."""
    status = main(argv)
    out, err = capsys.readouterr()
    return status, err.strip().splitlines(), out


@pytest.mark.parametrize("name", list(SERVERS))
def test_a_broken_server_is_one_line_and_stores_nothing(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    answer, expect = SERVERS[name]
    db = tmp_path / "served.db"
    with RawServer(answer) as server:
        status, lines, _ = _bench(
            ["bench", "run", _served_suite(tmp_path, server.url), "--db", str(db), "--quiet"], capsys
        )
    assert status == 2 and len(lines) == 1, lines
    assert "unexpected" not in lines[0] and "free disk space" not in lines[0], lines[0]
    assert expect in lines[0], lines[0]
    assert _stored_runs(db) == 0


def test_a_server_error_is_not_sent_again():
    """The server saw the request: a 500 is reported, not retried behind the user's back."""
    from specmoe.errors import SpecmoeError
    from specmoe.serving import client
    from specmoe.serving.spec import ServerSpec

    with RawServer(_error_500) as server, pytest.raises(SpecmoeError):
        client.stream(ServerSpec(url=server.url, model="m"), {"model": "m", "max_tokens": 4, "stream": True})
    assert server.posts == 1


def test_a_stream_that_ends_without_done_is_stored_only_as_a_failed_audit(tmp_path, capsys):
    db = tmp_path / "served.db"
    with RawServer(_ends_without_done) as server:
        status, lines, out = _bench(
            ["bench", "run", _served_suite(tmp_path, server.url), "--db", str(db), "--quiet"], capsys
        )
    assert status == 0, lines
    with sqlite3.connect(db) as conn:
        (verdict, reason), *others = conn.execute("SELECT audit_verdict, audit_reason FROM runs").fetchall()
    conn.close()
    assert others == [] and verdict == "fail" and reason.startswith("responses ended without a finish reason")
    assert "FAIL" in out  # and the summary says so


# --- /v1/models and /metrics answers are read with a bound -----------------------------------------


@pytest.mark.parametrize("path", ["/v1/models", "/metrics"])
def test_an_endless_answer_is_read_up_to_a_cap(path):
    read = client.served_models if path == "/v1/models" else client.metrics_text
    with EndlessServer(b"x" * 65536) as server, pytest.raises(SpecmoeError) as err:
        read(ServerSpec(url=server.url, model="m"))
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"{server.url}{path}: the response runs past {MAX_BODY_BYTES >> 20} MiB")


@pytest.mark.parametrize("path", ["/v1/models", "/metrics"])
def test_a_trickling_answer_ends_at_the_total_deadline(path):
    read = client.served_models if path == "/v1/models" else client.metrics_text
    bound = r"the response went on past .* \(10 x timeout_s\) without ending"
    with EndlessServer(b"x", gap_s=0.01) as server, pytest.raises(SpecmoeError, match=bound):
        read(
            ServerSpec(url=server.url, model="m", timeout_s=0.1)
        )  # each byte arrives within the idle timeout


def test_a_served_suite_against_an_endless_server_stores_nothing(tmp_path, capsys):
    db = tmp_path / "served.db"
    with EndlessServer(b"x" * 65536) as server:
        status = main(
            ["bench", "run", _served_suite(tmp_path, f"{server.url}/v1"), "--db", str(db), "--quiet"]
        )
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/v1/models: the response runs past" in err, err
    assert _stored_runs(db) == 0
