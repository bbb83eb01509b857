"""The decode loop's stopwatch: one round's wall time split into the phases docs/metrics.md defines.

A round is timed at four marks: its start, after the drafter proposed (the drafter synchronised),
after the target verified (the target synchronised), and its end. At each mark the clock also reads
the two parts' running counters of compile seconds and state-rollback seconds, so that

- compiling a new shape (a one-off cost of the compiled path) is taken out of every phase and of
  decode time, and reported apart;
- rolling recurrent state back (hybrid models, target and drafter together) is its own phase,
  `state_s`, taken out of the phase it happened in;
- draft_s + verify_s + state_s + overhead_s is exactly the round's time less its compile seconds.

Plain decoding has no drafter: its draft phase is empty (0 seconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from specmoe.backends.base import Backend
from specmoe.decoding.drafters import Drafter


@dataclass(frozen=True)
class _Mark:
    at: float  # perf_counter seconds
    compile_s: float  # both parts' compile seconds so far
    state_s: float  # both parts' state-rollback seconds so far


@dataclass(frozen=True)
class RoundTimes:
    draft_s: float
    verify_s: float
    state_s: float
    overhead_s: float


class RoundClock:
    """Marks the phases of each round of one decode (see the module docstring)."""

    def __init__(self, target: Backend, drafter: Drafter | None) -> None:
        self._target, self._drafter = target, drafter
        self.compile_s = 0.0  # compile seconds inside rounds, summed over the decode
        self._start = self._drafted = self._verified = self._mark()
        self._decode_start = self._start.at

    def _mark(self) -> _Mark:
        parts = (self._target,) if self._drafter is None else (self._target, self._drafter)
        return _Mark(time.perf_counter(), sum(p.compile_s for p in parts), sum(p.state_s for p in parts))

    def start(self) -> None:
        self._start = self._mark()

    def drafted(self) -> None:
        if self._drafter is not None:
            self._drafter.synchronize()
        self._drafted = self._mark()

    def verified(self) -> None:
        self._target.synchronize()
        self._verified = self._mark()

    def stop(self) -> RoundTimes:
        start, drafted, verified, end = self._start, self._drafted, self._verified, self._mark()
        self.compile_s += end.compile_s - start.compile_s
        draft_s = _phase(start, drafted)
        verify_s = _phase(drafted, verified)
        state_s = end.state_s - start.state_s
        round_s = end.at - start.at - (end.compile_s - start.compile_s)
        return RoundTimes(draft_s, verify_s, state_s, round_s - draft_s - verify_s - state_s)

    @property
    def decode_s(self) -> float:
        """Seconds since the clock was made, less the compile seconds of its rounds."""
        return time.perf_counter() - self._decode_start - self.compile_s


def _phase(begin: _Mark, end: _Mark) -> float:
    """Wall seconds between two marks, less what was spent compiling or rolling state back."""
    return end.at - begin.at - (end.compile_s - begin.compile_s) - (end.state_s - begin.state_s)
