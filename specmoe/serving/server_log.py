"""llama-server's own draft counts, from its log, against the counts a suite stored from responses.

When a request that drafted ends, llama-server logs one line for it (`print_timings` in
tools/server/server-context.cpp):

    slot print_timing: id  0 | task 12 | draft acceptance = 0.25000 (   16 accepted /    64 generated),
        mean len =  2.00                                 (one line in the log)

and streams the same two numbers to the client as `timings.draft_n_accepted` and `timings.draft_n`,
which the llamacpp-server engine stores per request (`specmoe.serving.load.RequestRecord`). The log
also holds the warm-up requests, which the store does not, and has no line for a request that drafted
nothing. So the check is one of multisets: every stored request that drafted has a log line with the
same (accepted, drafted), and what the log holds beyond them is no more than the warm-ups sent.
The stored side comes in as plain (accepted, drafted) pairs, read from a suite's rows by
`specmoe.bench.served_rows.stored_counts`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_DRAFT_LINE = re.compile(
    r"\|\s*task\s+(?P<task>-?\d+)\s*\|\s*draft acceptance = [0-9.]+ "
    r"\(\s*(?P<accepted>\d+) accepted /\s*(?P<drafted>\d+) generated\)"
)

Counts = tuple[int, int]  # (accepted, drafted) draft tokens of one request


@dataclass(frozen=True)
class LoggedRequest:
    task: int  # llama-server's task id
    accepted: int  # draft tokens the target accepted
    drafted: int  # draft tokens proposed

    @property
    def counts(self) -> Counts:
        return (self.accepted, self.drafted)


def logged_requests(text: str) -> list[LoggedRequest]:
    """Every request's draft line in a llama-server log, in log order."""
    return [
        LoggedRequest(int(m["task"]), int(m["accepted"]), int(m["drafted"]))
        for m in _DRAFT_LINE.finditer(text)
    ]


@dataclass(frozen=True)
class CountCheck:
    """Stored per-request draft counts against one server's log."""

    stored: int  # stored requests that drafted
    logged: int  # draft lines in the log
    matched: int  # stored requests whose (accepted, drafted) the log holds
    missing: tuple[Counts, ...]  # stored counts the log does not hold: must be empty
    extra: int  # log lines beyond the matched ones (warm-ups)
    warmup_requests: int  # warm-up requests sent to the server, an upper bound for `extra`
    stored_accepted: int
    stored_drafted: int
    logged_accepted: int
    logged_drafted: int

    @property
    def agrees(self) -> bool:
        return not self.missing and self.extra <= self.warmup_requests

    def as_dict(self) -> dict[str, Any]:
        fields = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return {**fields, "missing": [list(c) for c in self.missing], "agrees": self.agrees}


def check_counts(
    logged: Iterable[LoggedRequest], stored: Iterable[Counts], warmup_requests: int
) -> CountCheck:
    """Match stored per-request counts to log lines as multisets (see the module docstring)."""
    log_counts = [r.counts for r in logged]
    stored_list = list(stored)
    unmatched_log = Counter(log_counts)
    unmatched_log.subtract(Counter(stored_list))
    missing = tuple(sorted(c for c, n in unmatched_log.items() for _ in range(-n) if n < 0))
    return CountCheck(
        stored=len(stored_list),
        logged=len(log_counts),
        matched=len(stored_list) - len(missing),
        missing=missing,
        extra=sum(n for n in unmatched_log.values() if n > 0),
        warmup_requests=warmup_requests,
        stored_accepted=sum(a for a, _ in stored_list),
        stored_drafted=sum(d for _, d in stored_list),
        logged_accepted=sum(a for a, _ in log_counts),
        logged_drafted=sum(d for _, d in log_counts),
    )
