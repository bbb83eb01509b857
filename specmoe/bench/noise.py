"""Is the machine quiet enough to trust a timing? The noise guard's measurements and its rules.

A decode on a CPU shares the cores with everything else the machine runs. When another process
holds a core that an OpenMP thread of ours wants, the thread spin-waits at every parallel region:
measured here, a forward with two threads and one busy core ran about 5× slower. Nothing in the
tokens/s shows this; only the machine's own accounting does. So every timed run records

- `other_cpu`: cores' worth of CPU time that other processes used, while it ran, on the cores this
  process may run on (their busy CPU seconds less this process's own, over the run's wall time): a
  run pinned to one core (`taskset -c 0`) is not disturbed by work pinned to another;
- `steal`: the share of CPU time the hypervisor gave to other guests (0 where the OS reports none);
- `load_avg`: the 1-minute load average when it ended;
- `step_spread`: how much its per-round verify times disagree ((p75 − p25) / median, among rounds
  over the same number of live rows), which rises when a run is interrupted part of the way through;

and a run that breaks a rule below (other processes using more than the cores its threads leave
free, plus a quarter core) is measured again (at most `RETRIES` times); if it is still
disturbed it is stored with `noisy` set and the reason, shown by every summary and export and left
out of every interval and verdict.

The rules above see only the machine's accounting; a process that slows the baseline arm between
two samples can slip past them. So the guard also checks each SD run against its own acceptance:
no round emits more than accepted + 1 tokens per target pass, so its speedup over the baseline
cannot exceed 1 + αγ (`specmoe.results.run_audit.impossible_speedup`, with that module's timing
tolerance). A run beyond the bound is measured once more with its block (its baseline included,
when the block holds it); if it is still beyond, it is stored flagged noisy with the reason (never
dropped), and summaries count such runs apart. Runs against a server get this check alone
(`specmoe.bench.served`), where the server reports its draft counts: the client's machine
accounting says nothing about the server's.

Before a suite starts, `choose_threads` looks at the machine once: it warns when other processes
use the CPU and runs with fewer threads so ours do not spin against them.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specmoe.metrics import decode_tokens_per_s, totals
from specmoe.results.noisy import GUARD_ENV, OTHER_CPU_LIMIT
from specmoe.results.run_audit import impossible_speedup

if TYPE_CHECKING:
    from specmoe.decoding.records import DecodeResult

log = logging.getLogger(__name__)

# The busy-core limit (OTHER_CPU_LIMIT) and the switch (GUARD_ENV) are `specmoe.results.noisy`'s,
# beside the advice on flagged runs: readers of results need them too.
STEAL_LIMIT = 0.05  # share of CPU time stolen by the hypervisor
STEP_SPREAD_LIMIT = 0.5  # (p75 − p25) / median of per-round verify times
STEP_SPREAD_MIN_ROUNDS = 8  # fewer rounds say too little about their spread
RETRIES = 2  # extra measurements of a disturbed run


def guard_on() -> bool:
    """The noise guard judges runs unless SPECMOE_NOISE_GUARD=0 (tests; a machine known to be quiet)."""
    return os.environ.get(GUARD_ENV, "1") != "0"


@dataclass(frozen=True)
class Load:
    """What the rest of the machine did during one interval."""

    other_cpu: float  # cores' worth (1.0 = one core fully busy), averaged over the interval
    steal: float  # share of all CPU time, 0..1
    load_avg: float  # 1-minute load average at the end of the interval


def _psutil():
    import psutil  # a dependency of specmoe; imported here so `import specmoe` stays light

    return psutil


def own_cores() -> list[int]:
    """The CPUs this process may run on (its affinity); every CPU where the OS does not say."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _core_times(psutil, cores: list[int]):
    """CPU times summed over `cores`, as one record with the fields psutil reports."""
    per_cpu = psutil.cpu_times(percpu=True)
    picked = [per_cpu[c] for c in cores if c < len(per_cpu)] or per_cpu
    return type(per_cpu[0])(*(sum(values) for values in zip(*picked, strict=True)))


class LoadMeter:
    """Measures other processes' CPU use, on this process's cores, between `start()` and `stop()`."""

    def start(self) -> None:
        psutil = _psutil()
        self._cores = own_cores()
        self._system = _core_times(psutil, self._cores)
        self._own = _own_cpu_s(psutil)
        self._wall = time.perf_counter()

    def stop(self) -> Load:
        psutil = _psutil()
        system, own, wall = _core_times(psutil, self._cores), _own_cpu_s(psutil), time.perf_counter()
        elapsed = max(wall - self._wall, 1e-9)
        busy = _busy_s(system) - _busy_s(self._system)
        total = _total_s(system) - _total_s(self._system)
        stolen = getattr(system, "steal", 0.0) - getattr(self._system, "steal", 0.0)
        return Load(
            other_cpu=max(0.0, (busy - (own - self._own)) / elapsed),
            steal=max(0.0, stolen / total) if total > 0 else 0.0,
            load_avg=os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0,
        )


def _total_s(times) -> float:
    """All CPU seconds over all cores; guest time is already inside user time on Linux."""
    return sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _busy_s(times) -> float:
    """CPU seconds spent running something, over all cores (idle, I/O wait and steal excluded)."""
    return _total_s(times) - times.idle - getattr(times, "iowait", 0.0) - getattr(times, "steal", 0.0)


def _own_cpu_s(psutil) -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def step_spread(verify_s: Sequence[float], live: Sequence[int] | None = None) -> float | None:
    """(p75 − p25) / median of per-round verify times, each over the median of the rounds at the
    same live batch size (`live`, one count per round): a batch shrinks as its rows finish, and a
    round over fewer rows is faster by design, not disturbed. Rounds whose live size occurs once
    say nothing about spread; None with fewer than STEP_SPREAD_MIN_ROUNDS left."""
    sizes = list(live) if live is not None else [0] * len(verify_s)
    groups: dict[int, list[float]] = {}
    for size, seconds in zip(sizes, verify_s, strict=True):
        groups.setdefault(size, []).append(float(seconds))
    ratios = []
    for times in groups.values():
        middle = float(np.median(times))
        if len(times) > 1 and middle > 0:
            ratios += [t / middle for t in times]
    if len(ratios) < STEP_SPREAD_MIN_ROUNDS:
        return None
    p25, p50, p75 = np.percentile(np.asarray(ratios), [25, 50, 75])
    return float((p75 - p25) / p50)


def disturbance(load: Load, spread: float | None, spare_cores: int = 0) -> str:
    """Why a run's timing cannot be trusted, in a few words; "" when nothing says so (or the guard
    is off). `spare_cores`: cores of this process's set that its threads leave to others (a run with
    one thread on two cores is not disturbed by one busy core)."""
    if not guard_on():
        return ""
    reasons = []
    if load.other_cpu > spare_cores + OTHER_CPU_LIMIT:
        reasons.append(f"other processes used {load.other_cpu:.2f} cores while it ran")
    if load.steal > STEAL_LIMIT:
        reasons.append(f"the hypervisor stole {load.steal:.0%} of CPU time")
    if spread is not None and spread > STEP_SPREAD_LIMIT:
        reasons.append(f"its verify times spread {spread:.0%} (p75 - p25 over median)")
    return "; ".join(reasons)


def speedup_beyond_bound(
    tokens_per_s: float, baseline_tokens_per_s: float, gamma: int, accepted: int, drafted: int
) -> str:
    """Why an SD run's speedup over its baseline is physically impossible given its own acceptance
    (speedup > (1 + αγ) × (1 + tolerance), α = accepted / drafted), in words; "" when it is
    possible, the baseline has no usable rate, or the guard is off. Local and served runs alike."""
    if not guard_on() or not (math.isfinite(baseline_tokens_per_s) and baseline_tokens_per_s > 0):
        return ""
    why = impossible_speedup(tokens_per_s / baseline_tokens_per_s, gamma, accepted, drafted)
    return f"{why} of its own acceptance: its baseline was likely disturbed" if why else ""


def beyond_bound(sd: DecodeResult, gamma: int, baseline_tokens_per_s: float) -> str:
    """`speedup_beyond_bound` of a local SD run. Pure: the run's counts and seconds decide."""
    counts = totals(sd)
    tokens_per_s = decode_tokens_per_s(counts.emitted, sd.decode_s)
    return speedup_beyond_bound(tokens_per_s, baseline_tokens_per_s, gamma, counts.accepted, counts.drafted)


def flagged_beyond_bound(measure: dict, why: str) -> dict:
    """A run's `measure` once it stayed beyond its bound (`why`): the reason joins any other noise
    reason in `noise`, and stands alone in `beyond_bound`, which summaries count."""
    noise = "; ".join(filter(None, [measure.get("noise"), why]))
    return {**measure, "noise": noise, "beyond_bound": why}


def machine_load(seconds: float = 0.5) -> Load:
    """Other processes' CPU use over the next `seconds`, this process idle meanwhile."""
    meter = LoadMeter()
    meter.start()
    time.sleep(seconds)
    return meter.stop()


def choose_threads(requested: int | None = None, load: Load | None = None) -> int:
    """Threads for the suite's forwards: `requested`, or the cores other processes leave free.

    Sets torch's thread count (llama.cpp models take the same count), and warns in one line when
    other processes are using the CPU.
    """
    import torch

    cores = len(own_cores())
    if requested is None and load is None and not guard_on():
        return torch.get_num_threads()
    load = load if load is not None else machine_load()
    busy = round(load.other_cpu)
    threads = requested if requested is not None else max(1, min(torch.get_num_threads(), cores - busy))
    if load.other_cpu > OTHER_CPU_LIMIT:
        log.warning(
            "other processes are using %.1f of the %d CPU cores this run may use: measuring with %d "
            "thread(s); runs they disturb are measured again, then flagged noisy",
            load.other_cpu,
            cores,
            threads,
        )
    torch.set_num_threads(threads)
    return threads
