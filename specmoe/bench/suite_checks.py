"""The checks a suite file's values go through while it loads, and the one-line errors they raise
(file, key, what is wrong, the fix, a did-you-mean where a name is close to a valid one)."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, NoReturn

from specmoe.errors import SpecmoeError

_DEVICE_RE = re.compile(r"cpu|mps|cuda(:\d+)?")


def type_name(value: Any) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)


def suggest(value: str, options: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(value, options, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def leaf(key: str) -> str:
    return key.rsplit(".", 1)[-1]


class SuiteContext:
    """Where values come from, so every error names the file and the key: one line with what is
    wrong and how to fix it (raised as SpecmoeError). The checks return the value they accept."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, message: str) -> NoReturn:
        raise SpecmoeError(f"{self.path}: {key}: {message}")

    def check_keys(self, where: str, table: dict[str, Any], valid: tuple[str, ...]) -> None:
        """Refuse a key the table may not hold, with a did-you-mean or the valid keys."""
        for key in table:
            if key not in valid:
                close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
                hint = f"did you mean '{close[0]}'?" if close else f"valid keys: {', '.join(valid)}"
                self.fail(f"{where}.{key}" if where else key, f"unknown key '{key}'; {hint}")

    def table(self, key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(key, f"expected a table, got {type_name(value)}")
        return value

    def string(self, key: str, value: Any) -> str:
        if not isinstance(value, str):
            self.fail(key, f"expected a string, got {type_name(value)} {value!r}")
        return value

    def integer(self, key: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"expected an integer, got {type_name(value)} {value!r}")
        if value < minimum:
            self.fail(key, f"{leaf(key)} must be >= {minimum}, got {value}")
        return value

    def number(self, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(key, f"expected a number, got {type_name(value)} {value!r}")
        if not value >= 0.0:  # also rejects nan
            self.fail(key, f"{leaf(key)} must be >= 0, got {value}")
        return float(value)

    def choice(self, key: str, value: Any, options: tuple[str, ...]) -> str:
        text = self.string(key, value)
        if text not in options:
            self.fail(
                key, f"unknown {leaf(key)} '{text}'{suggest(text, options)}; choose from {', '.join(options)}"
            )
        return text

    def device(self, key: str, value: Any) -> str:
        text = self.string(key, value)
        if not _DEVICE_RE.fullmatch(text):
            self.fail(key, f"unknown device '{text}'; use cpu, mps, cuda or cuda:<index>")
        return text

    def axis(self, key: str, value: Any, check, allow_empty: bool = False) -> tuple:
        """A grid axis: one value or a list of values, each checked; duplicates dropped, order kept."""
        if value is None:
            return (None,)
        values = value if isinstance(value, list) else [value]
        if not values and not allow_empty:
            self.fail(key, f"{leaf(key)} must not be empty; give at least one value")
        return tuple(dict.fromkeys(check(key, v) for v in values))
