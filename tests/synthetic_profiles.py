"""Profiles timed by the model itself, for tests of the fit: known constants in, known times out."""

from __future__ import annotations

import numpy as np

from specmoe.perf.model import Constants, MoEShape, forward_time


def synthetic_profile(
    constants: Constants, shape: MoEShape, grid: list[tuple[int, int]], noise: float = 0.0, seed: int = 0
) -> dict:
    """A `specmoe profile` JSON whose points are T(B, t) from `constants`, times (1 + noise·N(0, 1))."""
    rng = np.random.default_rng(seed)
    points = []
    for b, t in grid:
        seconds = forward_time(constants, shape, b, t) * (1 + noise * rng.standard_normal())
        points.append({"batch": b, "tokens": t, "median_s": seconds, "times_s": [seconds]})
    model = {
        "name": "synthetic",
        "is_moe": shape.is_moe,
        "num_experts": shape.num_experts,
        "top_k": shape.top_k,
    }
    return {"schema": 1, "kind": "specmoe-profile", "model": model, "context": 64, "points": points}
