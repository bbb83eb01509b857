"""HTTP to an OpenAI-compatible server: timeouts, retries with backoff, and one-line errors.

Only the standard library: one connection per request (no pooling), so concurrent requests from
threads never share a socket. Connection errors before the server answers (refused, reset, name
resolution) are retried with exponential backoff; an HTTP error status is not retried, since the
server did answer. API keys come from the environment variable a model names and are sent as a
Bearer header; no message or stored value ever contains one.

A streamed response is bounded three ways, so no server can hold a request forever: `timeout_s` is
an idle timeout, the longest wait for the next event carrying data (SSE comments, the keep-alive
pings some servers send every second, do not reset it); TOTAL_TIMEOUT_FACTOR × `timeout_s` bounds
the whole response, whatever arrives; and `specmoe.serving.trust` caps the token chunks read.
GET /v1/models and /metrics are read within the same deadlines and at most MAX_BODY_BYTES.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from specmoe.errors import RunFailed, SpecmoeError
from specmoe.serving.spec import ServerSpec
from specmoe.serving.sse import MalformedResponse, StreamedError, event_data, parse_chunk
from specmoe.serving.trust import UntrustedResponse, chunk_cap, count_problem

RETRIES = 3  # extra attempts after a connection error
BACKOFF_S = 0.5  # wait before the first retry; doubled for each next one
# A whole response may take this many idle timeouts: at the default 600 s, 100 minutes, far beyond
# any benchmarked request, yet finite for a server that keeps sending without ever finishing.
TOTAL_TIMEOUT_FACTOR = 10
_ERROR_BODY_BYTES = 4096
_READ_BYTES = 1 << 16
_MAX_LINE_BYTES = 1 << 20  # a chunk object is a few hundred bytes; a longer line is no SSE a server means
# /v1/models and /metrics answers are kilobytes (a vLLM /metrics with every histogram, a few MB);
# the cap bounds the memory a server answering without end can take.
MAX_BODY_BYTES = 16 << 20


@dataclass(frozen=True)
class StreamTimes:
    """When one streamed response's parts arrived, in seconds of `time.perf_counter`."""

    sent: float  # the request went out (last attempt, after any retries)
    first: float | None  # first token chunk (specmoe.serving.sse)
    last: float | None  # last token chunk
    done: float  # the stream ended
    token_chunks: int
    usage_tokens: int | None  # usage.completion_tokens, when the server sent usage
    finish_reason: str | None
    final: dict[str, Any]  # top-level fields of every chunk but `choices`, later non-null ones
    # winning (where llama-server puts `timings`, SGLang `sglext`)
    retries: int


def api_key(server: ServerSpec) -> str | None:
    if server.api_key_env is None:
        return None
    key = os.environ.get(server.api_key_env)
    if not key:
        raise SpecmoeError(
            f"{server.url}: environment variable {server.api_key_env} (api_key_env) is not set; "
            "export the API key in it"
        )
    return key


def served_models(server: ServerSpec) -> list[str] | None:
    """Model ids from GET /v1/models; None when the server has no such route."""
    status, body = _get(server, "/v1/models")
    if status == 404:
        return None
    _raise_for_status(server, "/v1/models", status, body)
    try:
        data = json.loads(body)["data"]
        return [str(entry["id"]) for entry in data]
    except (ValueError, KeyError, TypeError):
        raise SpecmoeError(
            f"{server.url}/v1/models: malformed response (no data[].id list); "
            "is this an OpenAI-compatible server?"
        ) from None


def check_model(server: ServerSpec) -> None:
    """Raise a one-line error when the server is unreachable or does not serve `server.model`."""
    models = served_models(server)
    if models is not None and server.model not in models:
        served = ", ".join(models) if models else "none"
        raise SpecmoeError(
            f"{server.url} serves no model '{server.model}'; it serves: {served}; "
            "set the suite model's model = to one of these"
        )


def metrics_text(server: ServerSpec) -> str | None:
    """The server's Prometheus text from GET /metrics; None when it has no such route."""
    status, body = _get(server, "/metrics")
    if status == 404:
        return None
    _raise_for_status(server, "/metrics", status, body)
    return body.decode("utf-8", errors="replace")


def stream(
    server: ServerSpec, body: dict[str, Any], clock: Callable[[], float] = time.perf_counter
) -> StreamTimes:
    """POST one streaming request and time its chunks as they arrive."""
    path = server.path
    conn, response, sent, retries, sock = _send(server, "POST", path, body, clock)
    watch = _Watch(server.timeout_s, sent, clock, sock)
    max_tokens = body.get("max_tokens")
    try:
        _refuse_redirect(server, path, response)
        if response.status >= 400:
            _raise_for_status(server, path, response.status, response.read(_ERROR_BODY_BYTES))
        kind = response.getheader("Content-Type", "")
        if not kind.startswith("text/event-stream"):
            raise MalformedResponse(f"asked to stream, the server answered with Content-Type {kind!r}")
        times = _read_stream(server, response, sent, retries, watch, max_tokens)
        problem = count_problem(times.usage_tokens, times.token_chunks, max_tokens)
        if problem:
            raise UntrustedResponse(problem)
        return times
    except MalformedResponse as err:
        raise SpecmoeError(
            f"{server.url}{path}: malformed response: {err}; is this an OpenAI-compatible server?"
        ) from None
    except StreamedError as err:
        raise SpecmoeError(f"{server.url}{path}: the server reported an error: {err}") from None
    except UntrustedResponse as err:
        raise RunFailed(
            f"{server.url}{path}: untrustworthy response: {err}; no number is stored for the run, "
            "check that the server honours max_tokens and counts usage truthfully"
        ) from None
    except TimeoutError:
        if watch.over_total():
            raise RunFailed(
                f"{server.url}{path}: the response went on past {watch.total_s:g} s "
                f"({TOTAL_TIMEOUT_FACTOR} x timeout_s) without ending; check the server"
            ) from None
        raise SpecmoeError(
            f"{server.url}{path}: no data for {server.timeout_s:g} s mid-response; "
            "raise timeout_s of the suite model or check the server"
        ) from None
    except (OSError, http.client.HTTPException) as err:
        raise broken_connection(server, path, err) from None
    finally:
        conn.close()


def broken_connection(server: ServerSpec, path: str, err: Exception) -> SpecmoeError:
    """The connection failed after the server began to answer (reset, or closed inside a chunk):
    nothing of the response is kept, and the request is not sent again, since the server has seen it."""
    return SpecmoeError(
        f"{server.url}{path}: the connection broke mid-response ({_reason(err)}); check the server's "
        "log, then run the suite again (its finished runs are kept)"
    )


class _Watch:
    """The deadlines of one streamed response (see the module docstring), on `clock`'s seconds."""

    def __init__(self, idle_s: float, sent: float, clock: Callable[[], float], sock) -> None:
        self.idle_s, self.total_s = idle_s, idle_s * TOTAL_TIMEOUT_FACTOR
        self.sent, self.last_data, self.clock, self.sock = sent, sent, clock, sock

    def data(self) -> None:
        """An event carrying data arrived: the idle timeout starts again."""
        self.last_data = self.clock()

    def over_total(self) -> bool:
        return self.clock() - self.sent >= self.total_s

    def arm(self) -> None:
        """Let the next read wait no longer than the nearer deadline; TimeoutError when one passed.
        One read is one system call (`read1`), so a server trickling bytes cannot outwait it."""
        now = self.clock()
        left = min(self.last_data + self.idle_s, self.sent + self.total_s) - now
        if left <= 0:
            raise TimeoutError
        if self.sock is not None:
            self.sock.settimeout(left)


def _read_stream(
    server, response, sent: float, retries: int, watch: _Watch, max_tokens: int | None
) -> StreamTimes:
    first = last = None
    token_chunks, usage, finish, final, chunks = 0, None, None, {}, 0
    cap = chunk_cap(max_tokens)
    for data in event_data(_lines(response, watch)):
        watch.data()
        chunk = parse_chunk(data, server.endpoint)
        now = watch.clock()
        if chunk.token:
            token_chunks += 1
            first = now if first is None else first
            last = now
            if token_chunks > cap:
                raise UntrustedResponse(
                    f"over {cap} token chunks streamed for max_tokens {max_tokens}; stopped reading"
                )
        usage = chunk.usage_tokens if chunk.usage_tokens is not None else usage
        finish = chunk.finish_reason or finish
        # null never overwrites a value: SGLang sends `sglext` in a chunk of its own, and a later
        # chunk of a model with the field unset may carry it as null
        final.update((k, v) for k, v in chunk.payload.items() if k != "choices" and v is not None)
        chunks += 1
    if not chunks:
        raise MalformedResponse("the stream ended without a single chunk")
    return StreamTimes(sent, first, last, watch.clock(), token_chunks, usage, finish, final, retries)


def _lines(response: http.client.HTTPResponse, watch: _Watch) -> Iterator[bytes]:
    """The response's lines, each read within the watch's deadlines."""
    pending = b""
    while True:
        watch.arm()
        data = response.read1(_READ_BYTES)
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        yield from (line + b"\n" for line in lines)
        if len(pending) > _MAX_LINE_BYTES:
            raise MalformedResponse(f"a streamed line runs past {_MAX_LINE_BYTES} bytes without ending")
    if pending:
        yield pending


def _get(server: ServerSpec, path: str) -> tuple[int, bytes]:
    """GET a small document (/v1/models, /metrics): its status and body, the body read within
    the stream's deadlines (`_Watch`) and at most MAX_BODY_BYTES, so an endless answer ends."""
    conn, response, sent, _, sock = _send(server, "GET", path, None, time.perf_counter)
    watch = _Watch(server.timeout_s, sent, time.perf_counter, sock)
    try:
        _refuse_redirect(server, path, response)
        return response.status, _read_body(server, path, response, watch)
    except TimeoutError:
        if watch.over_total():
            raise SpecmoeError(
                f"{server.url}{path}: the response went on past {watch.total_s:g} s "
                f"({TOTAL_TIMEOUT_FACTOR} x timeout_s) without ending; check the server"
            ) from None
        raise SpecmoeError(f"{server.url}{path}: no response within {server.timeout_s:g} s") from None
    except (OSError, http.client.HTTPException) as err:
        raise broken_connection(server, path, err) from None
    finally:
        conn.close()


def _read_body(server: ServerSpec, path: str, response: http.client.HTTPResponse, watch: _Watch) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        watch.arm()
        data = response.read1(_READ_BYTES)
        if not data:
            return b"".join(parts)
        watch.data()
        size += len(data)
        if size > MAX_BODY_BYTES:
            raise SpecmoeError(
                f"{server.url}{path}: the response runs past {MAX_BODY_BYTES >> 20} MiB, far beyond "
                "any real one; stopped reading; check that this is an OpenAI-compatible server"
            )
        parts.append(data)


def _send(server: ServerSpec, method: str, path: str, body: dict[str, Any] | None, clock):
    """Send one request, retrying connection errors; returns (connection, response, sent, retries,
    socket). The socket is kept here: http.client drops it from the connection of a response that
    closes the connection at its end, yet reads go through it."""
    parts = urlsplit(server.url)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
    key = api_key(server)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    payload = None if body is None else json.dumps(body).encode()
    connection = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    for attempt in range(RETRIES + 1):
        conn = connection(parts.hostname, parts.port, timeout=server.timeout_s)
        sent = clock()
        try:
            conn.request(method, parts.path + path, body=payload, headers=headers)
            sock = conn.sock
            return conn, conn.getresponse(), sent, attempt, sock
        except TimeoutError:
            conn.close()
            raise SpecmoeError(
                f"{server.url}{path}: no response within {server.timeout_s:g} s; "
                "raise timeout_s of the suite model or check the server"
            ) from None
        except OSError as err:  # refused, reset, unreachable, name resolution (http.client's too)
            conn.close()
            if attempt == RETRIES:
                raise SpecmoeError(
                    f"cannot reach {server.url} ({_reason(err)}) after {RETRIES + 1} attempts; "
                    "is the server running?"
                ) from None
            time.sleep(BACKOFF_S * 2**attempt)
        except http.client.HTTPException as err:  # an answer, not in HTTP/1.x: another service
            conn.close()
            raise SpecmoeError(
                f"{server.url}{path}: the server did not answer in HTTP ({_reason(err)}); "
                "is url = the address of the model server's HTTP port?"
            ) from None
    raise AssertionError("unreachable")


def _reason(err: Exception) -> str:
    """An OS error's reason, or an HTTP parsing error's name and what the server sent (printable
    characters only, cut short: it is another program's bytes)."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    text = "".join(c if c.isprintable() else " " for c in str(err))
    text = " ".join(text.split())[:80]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _refuse_redirect(server: ServerSpec, path: str, response: http.client.HTTPResponse) -> None:
    """A redirect is not followed: the request would go to an address the suite does not name (and
    a POST's body, or its API key, with it)."""
    if 300 <= response.status < 400:
        location = "".join(c for c in response.getheader("Location", "") if c.isprintable())[:200]
        raise SpecmoeError(
            f"{server.url}{path}: HTTP {response.status}, the server redirects to {location or 'nowhere'}; "
            "specmoe follows no redirect: set url = to the address the model server answers at"
        )


def _raise_for_status(server: ServerSpec, path: str, status: int, body: bytes) -> None:
    if status < 400:
        return
    message = _error_message(body)
    if status in (401, 403):
        fix = (
            f"check the key in {server.api_key_env}"
            if server.api_key_env
            else "set api_key_env to the variable holding the key"
        )
        raise SpecmoeError(
            f"{server.url}{path}: HTTP {status}, the server refused the request ({message}); {fix}"
        )
    fix = (
        "the server failed; check its log, then run the suite again (its finished runs are kept)"
        if status >= 500
        else "check the request the suite sends (model =, endpoint =) against the server's API"
    )
    raise SpecmoeError(f"{server.url}{path}: HTTP {status}: {message.rstrip('.')}; {fix}")


def _error_message(body: bytes) -> str:
    """The server's own words: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or the text."""
    text = body[:_ERROR_BODY_BYTES].decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:200] or "no message"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and "message" in error:
            return " ".join(str(error["message"]).split())[:200]
        for key in ("error", "detail", "message"):
            if key in data:
                return " ".join(str(data[key]).split())[:200]
    return " ".join(text.split())[:200]
