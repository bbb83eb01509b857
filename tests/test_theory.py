"""MoESD formulas: hand-computed values, limits, monotonicity and input errors."""

import math

import numpy as np
import pytest

from specmoe.errors import SpecmoeError
from specmoe.theory import (
    expected_active_experts,
    expected_tokens_per_round,
    full_activation_threshold,
    mean_emitted_per_round,
    mean_expert_load,
    sd_speedup,
    speedup_bound_no_timing,
    speedup_bound_timed,
    speedup_from_emitted,
    target_efficiency,
)

# --- expert activation ------------------------------------------------------------------------


def test_active_experts_hand_values():
    # E = 8, K = 2: N(2) = 8 · (1 − 0.75²) = 3.5; N(3) = 8 · (1 − 0.421875) = 4.625
    assert expected_active_experts(2, 8, 2) == pytest.approx(3.5)
    assert expected_active_experts(3, 8, 2) == pytest.approx(4.625)


def test_active_experts_one_token_is_top_k_and_zero_tokens_is_none():
    for experts, top_k in [(8, 2), (64, 6), (128, 8), (256, 8)]:
        assert expected_active_experts(1, experts, top_k) == pytest.approx(top_k)
        assert expected_active_experts(0, experts, top_k) == 0.0


def test_dense_layer_is_fully_active_from_one_token():
    assert expected_active_experts(0, 8, 8) == 0.0
    for t in [1, 2, 7.5, 1000]:
        assert expected_active_experts(t, 8, 8) == 8.0


def test_active_experts_accepts_arrays_and_is_monotone_towards_e():
    t = np.arange(0, 400)
    n = expected_active_experts(t, 128, 8)
    assert isinstance(n, np.ndarray) and n.shape == t.shape
    assert np.all(np.diff(n) > 0)
    assert n[-1] == pytest.approx(128, rel=1e-9)
    assert isinstance(expected_active_experts(4, 128, 8), float)


@pytest.mark.parametrize(
    "args",
    [
        (-1, 8, 2),
        (float("nan"), 8, 2),
        (4, 8, 0),
        (4, 8, 9),
        (4, 0, 0),
        (4, 8.0, 2),
        (np.array([1, -2]), 8, 2),
    ],
)
def test_active_experts_rejects_bad_input(args):
    with pytest.raises(SpecmoeError):
        expected_active_experts(*args)


def test_threshold_hand_values():
    # ρ = 0.5, τ = 0.75: 1 − 0.5^t ≥ 0.75 first at t = 2 exactly (guards against log round-off)
    assert full_activation_threshold(0.75, 0.5) == 2
    # ρ = 8/128, τ = 0.99: ln(0.01) / ln(0.9375) = 71.36… → 72
    assert full_activation_threshold(0.99, 8 / 128) == 72
    assert full_activation_threshold(0.99, 8 / 128) == math.ceil(math.log(0.01) / math.log(1 - 8 / 128))


def test_threshold_is_first_count_reaching_tau():
    for tau, rho in [(0.9, 0.1), (0.99, 0.0625), (0.5, 0.25), (0.999, 0.03125)]:
        t = full_activation_threshold(tau, rho)
        assert 1 - (1 - rho) ** t >= tau - 1e-12
        assert t == 1 or 1 - (1 - rho) ** (t - 1) < tau


def test_threshold_dense_is_one_and_sparser_needs_more_tokens():
    assert full_activation_threshold(0.99, 1.0) == 1
    assert full_activation_threshold(1.0, 1.0) == 1
    thresholds = [full_activation_threshold(0.95, rho) for rho in [0.5, 0.25, 0.125, 0.0625]]
    assert thresholds == sorted(thresholds) and len(set(thresholds)) == 4


@pytest.mark.parametrize(
    "tau, rho", [(0.0, 0.5), (1.0, 0.5), (1.2, 0.5), (0.9, 0.0), (0.9, 1.5), (0.9, -0.1)]
)
def test_threshold_rejects_bad_input(tau, rho):
    with pytest.raises(SpecmoeError):
        full_activation_threshold(tau, rho)


def test_expert_load_hand_values():
    # ρ = 0.5, t = 2: 0.5·2 / (1 − 0.25) = 4/3 tokens per activated expert
    assert mean_expert_load(2, 0.5) == pytest.approx(4 / 3)
    # consistent with K·t / N(t) for E = 128, K = 8, t = 64
    assert mean_expert_load(64, 8 / 128) == pytest.approx(8 * 64 / expected_active_experts(64, 128, 8))


def test_expert_load_one_token_is_one_and_dense_is_t():
    for rho in [0.01, 0.0625, 0.5, 0.9]:
        assert mean_expert_load(1, rho) == pytest.approx(1.0)
    for t in [0.5, 1, 3, 512]:
        assert mean_expert_load(t, 1.0) == t


def test_expert_load_zero_tokens_takes_the_continuous_limit():
    for rho in [0.001, 0.0625, 0.5]:
        limit = rho / -math.log(1 - rho)
        assert mean_expert_load(0, rho) == pytest.approx(limit)
        assert mean_expert_load(1e-7, rho) == pytest.approx(limit, rel=1e-5)
    assert mean_expert_load(0, 0.001) == pytest.approx(1.0, abs=1e-3)  # small ρ: the limit is ≈ 1


def test_expert_load_grows_with_t_and_with_rho():
    t = np.linspace(0, 2000, 201)
    load = mean_expert_load(t, 8 / 128)
    assert np.all(np.diff(load) > 0)
    assert load[-1] == pytest.approx(8 / 128 * 2000, rel=1e-6)  # large t: ≈ ρ·t
    at_256 = [mean_expert_load(256, rho) for rho in [1 / 64, 1 / 16, 1 / 4, 1.0]]
    assert at_256 == sorted(at_256)


@pytest.mark.parametrize("t, rho", [(-1, 0.5), (4, 0.0), (4, 1.01), (float("inf"), 0.5)])
def test_expert_load_rejects_bad_input(t, rho):
    with pytest.raises(SpecmoeError):
        mean_expert_load(t, rho)


# --- speedup algebra --------------------------------------------------------------------------


def test_tokens_per_round_hand_values_and_limits():
    assert expected_tokens_per_round(0.5, 3) == pytest.approx(1.875)  # 1 + .5 + .25 + .125
    assert expected_tokens_per_round(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert expected_tokens_per_round(0.0, 16) == 1.0  # the correction token only
    assert expected_tokens_per_round(1.0, 16) == 17.0  # every draft plus the bonus token
    assert expected_tokens_per_round(1 - 1e-12, 4) == pytest.approx(5.0)


def test_tokens_per_round_is_monotone_and_below_the_linear_bound():
    alpha = np.linspace(0, 1, 101)
    for gamma in [1, 4, 16]:
        tokens = expected_tokens_per_round(alpha, gamma)
        assert np.all(np.diff(tokens) > 0)
        assert np.all(tokens <= speedup_bound_no_timing(alpha, gamma) + 1e-12)
    assert expected_tokens_per_round(0.7, 8) > expected_tokens_per_round(0.7, 4)


def test_sd_speedup_hand_value():
    # α = 0.8, γ = 4: E = 3.3616; T1 = 10 ms, T_verify = 12 ms, T_D = 1 ms → 3.3616 · 10 / 16
    assert sd_speedup(0.8, 4, 10.0, 12.0, 1.0) == pytest.approx(3.3616 * 10 / 16)


def test_sd_speedup_at_zero_acceptance_is_a_slowdown():
    # α = 0: one token per round that costs at least a plain step
    assert sd_speedup(0.0, 16, 18.0, 18.0, 0.0) == pytest.approx(1.0)
    assert sd_speedup(0.0, 16, 18.0, 25.0, 2.0) < 1.0


def test_sd_speedup_perfect_draft_and_free_verify_reaches_gamma_plus_one():
    assert sd_speedup(1.0, 4, 10.0, 10.0, 0.0) == pytest.approx(5.0)


def test_sd_speedup_broadcasts_over_alpha():
    speedups = sd_speedup(np.array([0.2, 0.5, 0.9]), 4, 10.0, 12.0, 1.0)
    assert speedups.shape == (3,) and np.all(np.diff(speedups) > 0)


def test_target_efficiency():
    assert target_efficiency(18.0, 18.0) == 1.0
    assert target_efficiency(10.0, 40.0) == pytest.approx(0.25)


def test_bound_no_timing_values():
    assert speedup_bound_no_timing(0.002, 16) == pytest.approx(1.032)
    assert speedup_bound_no_timing(0.0, 8) == 1.0
    assert speedup_bound_no_timing(1.0, 4) == 5.0
    assert speedup_bound_no_timing(0.6, 4) == pytest.approx(3.4)


def test_bound_holds_against_the_predicted_speedup():
    rng = np.random.default_rng(0)
    for _ in range(200):
        alpha, gamma = rng.uniform(0, 1), int(rng.integers(1, 17))
        t1 = rng.uniform(1, 50)
        verify = t1 * rng.uniform(1, gamma + 1)  # a verify pass costs at least a plain step
        draft = rng.uniform(0, t1)
        assert sd_speedup(alpha, gamma, t1, verify, draft) <= speedup_bound_no_timing(alpha, gamma) + 1e-12
        assert speedup_bound_timed(alpha, gamma, t1, verify, draft) <= speedup_bound_no_timing(alpha, gamma)


def test_timed_bound_and_emitted_form():
    # α = 0.25, γ = 4 → 2 tokens per round; T1 = 10, verify 12, draft 2 → 2 · 10 / 20 = 1.0
    assert speedup_bound_timed(0.25, 4, 10.0, 12.0, 2.0) == pytest.approx(1.0)
    assert speedup_from_emitted(2.0, 4, 10.0, 12.0, 2.0) == pytest.approx(1.0)
    assert speedup_from_emitted(1.0, 16, 18.0, 18.0, 0.0) == pytest.approx(1.0)


def test_mean_emitted_per_round_from_counts():
    assert mean_emitted_per_round(257, 3) == pytest.approx(257 / 254)
    assert mean_emitted_per_round(100, 0) == 1.0
    # never above 1 + αγ: 40 rounds drafting 4 each, 30 accepted → α = 30/160
    assert mean_emitted_per_round(70, 30) <= speedup_bound_no_timing(30 / 160, 4)


@pytest.mark.parametrize(
    "call",
    [
        lambda: expected_tokens_per_round(-0.1, 4),
        lambda: expected_tokens_per_round(2.6, 4),  # a percent passed as a fraction
        lambda: expected_tokens_per_round(0.5, 0),
        lambda: expected_tokens_per_round(0.5, 2.0),
        lambda: speedup_bound_no_timing(0.5, True),
        lambda: sd_speedup(0.5, 4, 0.0, 12.0, 1.0),
        lambda: sd_speedup(0.5, 4, 10.0, -1.0, 1.0),
        lambda: sd_speedup(0.5, 4, 10.0, 12.0, -1.0),
        lambda: target_efficiency(1.0, 0.0),
        lambda: speedup_from_emitted(0.5, 4, 10.0, 12.0, 1.0),
        lambda: speedup_from_emitted(6.0, 4, 10.0, 12.0, 1.0),
        lambda: mean_emitted_per_round(10, 10),
        lambda: mean_emitted_per_round(10, -1),
    ],
)
def test_speedup_rejects_bad_input(call):
    with pytest.raises(SpecmoeError):
        call()


@pytest.mark.parametrize("gamma", [1, 4, 16])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.9, 1.0])
def test_per_token_alpha_inverts_the_acceptance_rate(alpha, gamma):
    from specmoe.theory import per_token_alpha

    rate = (float(expected_tokens_per_round(alpha, gamma)) - 1) / gamma  # accepted / drafted
    assert per_token_alpha(rate, gamma) == pytest.approx(alpha, abs=1e-9)
    assert rate <= alpha + 1e-12  # a round stops at its first rejection: the rate never exceeds α
