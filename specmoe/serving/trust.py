"""What a response's token counts must satisfy before a run stores a number made of them.

A server's counts are claims: `usage.completion_tokens` is whatever it writes, and so is the number
of chunks it streams. Each response is checked against the request and against itself:

- usage.completion_tokens is >= 0 and <= the request's `max_tokens`, which the server must honour;
- it streamed no more token chunks than usage counts tokens (or, without usage, than `max_tokens`),
  give or take CHUNK_SLACK: a token chunk carries about one token (`specmoe.serving.sse`), but an
  engine may add a chunk that carries none (llama-cpp-python streams 25 chunks for 24 tokens when it
  flushes the held-back bytes of a partial character on their own);
- usage > 0 came with at least one token chunk: tokens the client never saw were not generated for it.

Usage may exceed the token chunks by any amount up to `max_tokens`: one chunk holds a whole verify
step of an SD server (up to γ + 1 tokens), and vLLM merges the tokens of several steps into one chunk
when the client reads slower than it decodes, so no per-chunk ratio holds for every engine.

While reading, a stream is cut off once it passes `chunk_cap(max_tokens)` token chunks, so a server
that streams without end fails with a reason instead of being read forever.
"""

from __future__ import annotations

# Token chunks a response may stream beyond the tokens it counts (see the module docstring): seen
# 1 with llama-cpp-python; 2 leaves room for an engine that also streams an empty first chunk.
CHUNK_SLACK = 2
# The cap on token chunks read from a request that sets no max_tokens (the harness always sets it).
UNBOUNDED_CAP = 1 << 20


class UntrustedResponse(ValueError):
    """A response's counts contradict its request or each other; the message says which."""


def chunk_count(token_chunks: int, max_tokens: int | None) -> int:
    """The tokens of a response without usage, from its token chunks: at most `max_tokens`, since
    the chunks past it (CHUNK_SLACK at most, else the response failed) carry no token."""
    return token_chunks if max_tokens is None else min(token_chunks, max_tokens)


def chunk_cap(max_tokens: int | None) -> int:
    """The most token chunks read from one response before it fails."""
    return UNBOUNDED_CAP if max_tokens is None else max_tokens + CHUNK_SLACK


def count_problem(usage_tokens: int | None, token_chunks: int, max_tokens: int | None) -> str:
    """Why a finished response's counts cannot be trusted, in words; "" when they can."""
    if usage_tokens is not None:
        if usage_tokens < 0:
            return f"usage.completion_tokens is {usage_tokens}, a negative count"
        if max_tokens is not None and usage_tokens > max_tokens:
            return f"usage.completion_tokens {usage_tokens} > max_tokens {max_tokens} of the request"
        if token_chunks > usage_tokens + CHUNK_SLACK:
            return f"{token_chunks} token chunks streamed but usage.completion_tokens is {usage_tokens}"
        if usage_tokens > 0 and token_chunks == 0:
            return f"usage.completion_tokens is {usage_tokens} but no token chunk was streamed"
    elif max_tokens is not None and token_chunks > max_tokens + CHUNK_SLACK:
        return f"{token_chunks} token chunks streamed for max_tokens {max_tokens} (no usage sent)"
    return ""
