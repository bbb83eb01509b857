"""When each request of an open-loop run is sent: Poisson arrivals at a set rate, from a seeded
generator.

A closed loop (concurrency c) sends the next request when one finishes, so the server never sees
more than c requests and its load adapts to its speed. An open loop sends requests at times fixed in
advance, whatever the server does, as independent users would: arrivals of a Poisson process at
`rate` requests/s, whose gaps are independent exponential draws with mean 1 / rate (vLLM's
`benchmark_serving --request-rate` draws them the same way). A rate of infinity sends every
request at once. The same seed gives the same schedule, so both arms of a pair (and every rerun)
face the same arrivals.
"""

from __future__ import annotations

import math

import numpy as np


def arrival_times(requests: int, rate: float, seed: int) -> list[float]:
    """Send times in seconds from the run's start, one per request, non-decreasing; the first
    request goes at 0. rate: requests/s (> 0; math.inf sends all at 0)."""
    if requests < 1:
        return []
    if math.isinf(rate):
        return [0.0] * requests
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=requests - 1)  # [requests - 1]
    return [0.0, *np.cumsum(gaps).tolist()]
