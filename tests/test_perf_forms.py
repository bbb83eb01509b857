"""The forward-time model's two forms (roofline, and re-reading weights over the first rows), the
choice between them, and expert counts traced from runs in place of N(n)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from synthetic_profiles import synthetic_profile

from specmoe.perf.fit import fit_profile, load_fit
from specmoe.perf.model import Constants, MoEShape, forward_time, roofline, weight_cost
from specmoe.theory import expected_active_experts

GRID = [(b, t) for b in (1, 2, 4) for t in (1, 2, 3, 5, 9)]
DENSE = MoEShape()
MOE = MoEShape(num_experts=64, top_k=4)


def _profile(constants: Constants, shape: MoEShape) -> dict:
    return synthetic_profile(constants, shape, GRID)


def test_one_reread_row_is_the_roofline():
    m = np.array([1.0, 2.0, 3.0, 7.0, 40.0])
    for s in (1.0, 3.0, np.inf):
        assert np.allclose(weight_cost(m, 6.0, 1.0, s), roofline(m / 6.0, s))


def test_rereading_climbs_a_load_per_row_then_only_by_compute():
    cost = weight_cost(np.array([1.0, 2.0, 3.0, 4.0, 9.0]), 2.0, 3.0, np.inf)  # hard max
    assert list(cost) == [1.0, 2.0, 3.0, 3.0, 4.5]  # max(min(m, 3), m / 2)


def test_a_roofline_profile_keeps_the_roofline_form():
    true = Constants(overhead_s=1e-3, sequence_s=2e-4, dense_s=9e-3, knee_tokens=5.0, sharpness=2.5)
    fit = fit_profile(_profile(true, DENSE))
    assert fit["constants"]["reread_tokens"] == 1.0 and "reread_tokens" not in fit["parameters"]
    assert fit["quality"]["fit_worst_abs_rel"] < 1e-6


def test_a_profile_that_rereads_its_weights_gets_the_second_form():
    # llama.cpp's dense-l at Q8_0 on this CPU: 18, 36, 50, 62, 88 ms at t = 1, 2, 3, 5, 9 (B = 1)
    true = Constants(overhead_s=1e-3, dense_s=1.2e-2, knee_tokens=2.0, sharpness=1.0, reread_tokens=2.7)
    fit = fit_profile(_profile(true, DENSE))
    assert fit["constants"]["reread_tokens"] == pytest.approx(2.7, rel=1e-3)
    assert fit["quality"]["fit_worst_abs_rel"] < 1e-4


def test_a_first_form_fit_still_reads_as_the_roofline(tmp_path):
    constants = {"overhead_s": 1e-3, "sequence_s": 0.0, "dense_s": 9e-3, "expert_s": 0.0, "knee_tokens": 5.0,
                 "sharpness": 2.0, "kv_s": 0.0, "kv_knee_tokens": 1.0}  # fmt: skip
    fit = {"schema": 1, "kind": "specmoe-fit", "form": "moesd-roofline-v1", "constants": constants,
           "shape": {"num_experts": 0, "top_k": 0}}  # fmt: skip
    (tmp_path / "v1.json").write_text(json.dumps(fit))
    loaded = load_fit(tmp_path / "v1.json")
    c = Constants.from_json(loaded["constants"], "v1")
    assert c.reread_tokens == 1.0
    assert forward_time(c, DENSE, 1, 5) == pytest.approx(1e-3 + 9e-3 * float(roofline(1.0, 2.0)))


def test_traced_experts_replace_the_independent_routing_expectation():
    c = Constants(overhead_s=1e-3, dense_s=2e-3, expert_s=4e-4, knee_tokens=8.0, sharpness=2.0)
    n = 5
    expected = expected_active_experts(n, MOE.num_experts, MOE.top_k)
    assert forward_time(c, MOE, 1, n, active=expected) == pytest.approx(forward_time(c, MOE, 1, n))
    # five copies of one token: K experts, each multiplying all five tokens
    copies = forward_time(c, MOE, 1, n, active=MOE.top_k)
    dense = 1e-3 + 2e-3 * float(roofline(n / 8.0, 2.0))
    assert copies == pytest.approx(dense + 4e-4 * MOE.top_k * float(roofline(n / 8.0, 2.0)))
    assert copies < forward_time(c, MOE, 1, n)
    # a count outside [K, E] is clipped to what a pass can activate
    assert forward_time(c, MOE, 1, n, active=1.0) == pytest.approx(copies)


def test_more_passes_keep_each_points_faster_measurement(tiny_zoo):
    from specmoe.perf.profile import faster, profile_model

    profile = profile_model(
        tiny_zoo / "draft-xs", [1, 2], [1, 2], context=8, dtype="float32", repeats=2, passes=2
    )
    assert profile["passes"] == 2 and [(p["batch"], p["tokens"]) for p in profile["points"]] == [
        (1, 1), (1, 2), (2, 1), (2, 2)
    ]  # fmt: skip
    for point in profile["points"]:
        assert point["attempts"] >= 2 and len(point["discarded_times_s"]) >= 2  # the other pass, kept
    slow = {"median_s": 2.0, "times_s": [2.0], "discarded_times_s": [], "attempts": 1}
    fast = {"median_s": 1.0, "times_s": [1.0], "discarded_times_s": [3.0], "attempts": 2}
    assert faster(slow, fast) == {
        "median_s": 1.0,
        "times_s": [1.0],
        "discarded_times_s": [3.0, 2.0],
        "attempts": 3,
    }
