"""A model served over HTTP: where it is, what the server calls it, and how to read its counters."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

ENDPOINTS = ("completions", "chat")  # /v1/completions or /v1/chat/completions
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ServerSpec:
    """One OpenAI-compatible endpoint serving one model.

    `api_key_env` names the environment variable holding the API key; the key itself is read when a
    request is sent and is never stored, logged or part of a run's identity.
    """

    url: str  # base URL without /v1, e.g. "http://10.0.0.5:8000"
    model: str  # the served model name requests carry (vLLM's --served-model-name)
    engine: str = "generic"  # a key of specmoe.serving.servers.ENGINES
    endpoint: str = "completions"  # one of ENDPOINTS
    api_key_env: str | None = None
    # Per request: connect, and the longest wait for data (SSE comments do not count); the whole
    # response gets a multiple of it (specmoe.serving.client.TOTAL_TIMEOUT_FACTOR).
    timeout_s: float = DEFAULT_TIMEOUT_S
    tokenizer: str | None = None  # the served model's tokenizer (a directory): synthetic prompts only

    def __post_init__(self) -> None:
        # However the spec was made, no credential reaches a run's key, the store or a message.
        object.__setattr__(self, "url", without_userinfo(self.url))

    @property
    def identity(self) -> dict[str, Any]:
        """What decides the measured work: part of every run's key (timeouts and keys are not)."""
        identity = {"url": self.url, "model": self.model, "engine": self.engine, "endpoint": self.endpoint}
        # Only when set (synthetic prompts are made with it), so other server runs keep their keys.
        return identity if self.tokenizer is None else {**identity, "tokenizer": self.tokenizer}

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"


_USERINFO_RE = re.compile(r"(//)[^/@?#]*@")


def without_userinfo(url: str) -> str:
    """`url` with any "user:password@" removed, for storing and showing (any text, parsable or not)."""
    return _USERINFO_RE.sub(r"\1", url)


def normalize_url(url: str) -> str | None:
    """The base URL of a server ("http://host:port[/prefix]"), or None when `url` is not one.

    A trailing "/" or "/v1" is dropped, so "http://h:8000/v1/" and "http://h:8000" are one server.
    User info ("user:password@") is dropped too: the URL is stored in every run's key and shown in
    reports and errors, and credentials come only from the environment (`api_key_env`).
    """
    text = without_userinfo(url.strip()).rstrip("/")
    if text.endswith("/v1"):
        text = text[: -len("/v1")]
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        return None
    return text
