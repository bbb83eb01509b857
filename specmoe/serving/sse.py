"""Reading a streamed OpenAI-compatible response: server-sent events carrying chunk objects.

Pure functions over lines and JSON, so every format detail is tested without a server. A chunk
carries generated text in `choices[0].text` (/v1/completions) or `choices[0].delta.content`
(/v1/chat/completions). A reasoning model's thinking is generated text too: vLLM streams it as
`delta.reasoning` (with a deprecated copy in `reasoning_content` while both exist), older vLLM and
SGLang as `delta.reasoning_content`; either field makes a token chunk, and the text is taken once.
With `stream_options: {"include_usage": true}` the last chunk carries `usage.completion_tokens`.

A *token chunk* is one that carries generated tokens. Its text may be empty: a server that streams
about one chunk per token (llama-cpp-python's does) sends "" for a token that completes no character.
Not token chunks: a chat chunk that only opens the message (`role`), a usage-only chunk, and a
final chunk with empty text that only brings the finish reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

DONE = "[DONE]"


class MalformedResponse(ValueError):
    """The stream is not what an OpenAI-compatible server sends; the message says what is off."""


class StreamedError(ValueError):
    """The server reported an error inside the stream (`{"error": ...}`)."""


@dataclass(frozen=True)
class Chunk:
    text: str  # generated text this chunk carries
    token: bool  # a token chunk (see the module docstring), even when its text is ""
    usage_tokens: int | None  # usage.completion_tokens, when the chunk carries usage
    finish_reason: str | None
    payload: dict[str, Any]  # the whole chunk, for engine-specific fields such as `timings`


def event_data(lines: Iterable[bytes]) -> Iterator[str]:
    """The data of each server-sent event, in order, up to the `[DONE]` sentinel.

    Follows the SSE rules that matter here: an event ends at a blank line, its `data:` lines are
    joined with newlines, lines starting with ":" are comments (keep-alive pings), other fields are
    ignored.
    """
    data: list[str] = []
    for raw in lines:
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as err:  # SSE is UTF-8 by definition: this is no event stream
            raise MalformedResponse(
                f"a streamed line is not UTF-8 text ({err.reason}): {raw[:40]!r}"
            ) from None
        if not line:
            if data:
                joined, data = "\n".join(data), []
                if joined == DONE:
                    return
                yield joined
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data and "\n".join(data) != DONE:
        yield "\n".join(data)


def parse_chunk(data: str, endpoint: str) -> Chunk:
    """One chunk object of a stream from /v1/completions ("completions") or /v1/chat/completions
    ("chat")."""
    try:
        payload = json.loads(data)
    except json.JSONDecodeError:
        raise MalformedResponse(f"a streamed event is not JSON: {data[:80]!r}") from None
    if not isinstance(payload, dict):
        raise MalformedResponse(f"a streamed event is not a JSON object: {data[:80]!r}")
    if "error" in payload:
        error = payload["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise StreamedError(str(message))
    choices = payload.get("choices")
    if not isinstance(choices, list):
        raise MalformedResponse(f"a chunk has no 'choices' list: {data[:80]!r}")
    text, token, finish = "", False, None
    if choices:
        choice = choices[0]
        if not isinstance(choice, dict):
            raise MalformedResponse(f"a chunk's choice is not an object: {data[:80]!r}")
        finish = choice.get("finish_reason")
        text, token = _choice_text(choice, endpoint, finish, data)
    usage = _usage_tokens(payload)
    return Chunk(text=text, token=token, usage_tokens=usage, finish_reason=finish, payload=payload)


def _choice_text(choice: dict[str, Any], endpoint: str, finish: Any, data: str) -> tuple[str, bool]:
    """(text, whether the chunk carries a token) of one choice."""
    if endpoint == "chat":
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise MalformedResponse(f"a chat chunk's delta is not an object: {data[:80]!r}")
        parts = (_reasoning(delta), delta.get("content"))
        opens = "role" in delta  # the chunk that opens the message carries no token
    else:
        parts = (choice.get("text"),)
        opens = False
    if any(p is not None and not isinstance(p, str) for p in parts):
        raise MalformedResponse(f"a chunk's text is not a string: {data[:80]!r}")
    text = "".join(p for p in parts if p)
    carries_text_field = any(p is not None for p in parts)
    return text, bool(text) or (carries_text_field and finish is None and not opens)


# Where reasoning models stream their thinking: vLLM's current name first, then the older one.
REASONING_FIELDS = ("reasoning", "reasoning_content")


def _reasoning(delta: dict[str, Any]) -> Any:
    """The reasoning text of a chat delta, from the first of REASONING_FIELDS that is not null.
    vLLM fills both fields with the same text while the old name is deprecated, so they are never
    added up."""
    for field in REASONING_FIELDS:
        value = delta.get(field)
        if value is not None:
            return value
    return None


def _usage_tokens(payload: dict[str, Any]) -> int | None:
    usage = payload.get("usage")
    if not isinstance(usage, dict):
        return None
    tokens = usage.get("completion_tokens")
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def dotted(payload: dict[str, Any], path: str | None) -> Any:
    """payload["a"]["b"] for path "a.b"; None when any step is missing."""
    if path is None:
        return None
    value: Any = payload
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value
