"""Canonical JSON and the digests taken of it, defined once: run keys and stored rows depend on them
byte for byte, so every writer and every key must use these functions. And the one reader of JSON
files a user hands over (`json_value`), which turns a hostile nesting into a parse error."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, no NaN: the same value always gives the same bytes (NaN is
    refused, not smuggled in)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_text(text: str) -> str:
    """The sha256 hex digest of a string's UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()


def short_key(value: Any) -> str:
    """16 hex digits of sha256 over `canonical_json(value)`: a key stable across processes."""
    return sha256_text(canonical_json(value))[:16]


def json_value(text: str) -> Any:
    """json.loads, with a value nested deeper than Python's parser can follow reported as the parse
    error it is (a JSONDecodeError at its start) instead of a RecursionError: a hostile file can nest
    thousands of arrays, which no file specmoe reads has, and each reader already explains a
    JSONDecodeError in one line. An integer too large for a float (10**400) is such an error too."""
    try:
        return json.loads(text, parse_int=_float_sized_int)
    except RecursionError:
        raise json.JSONDecodeError("arrays or objects nested too deeply to read", text, 0) from None
    except _TooLarge as err:
        raise json.JSONDecodeError(str(err), text, 0) from None


# No number a specmoe file holds comes near 1e300; past float's range (about 1.8e308) an integer
# cannot even be compared with a float limit, so it is a parse error, where every reader explains it.
_MAX_INT_DIGITS = 300


class _TooLarge(ValueError):
    pass


def _float_sized_int(digits: str) -> int:
    if len(digits.lstrip("-")) > _MAX_INT_DIGITS:
        raise _TooLarge(f"an integer of {len(digits.lstrip('-'))} digits, too large for any quantity")
    return int(digits)
