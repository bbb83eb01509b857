"""Expert activation under top-K routing, as analysed in MoESD (arXiv 2505.19645, §3).

Legend (the paper's symbols):
    E    number of routed experts in one MoE layer
    K    experts each token is routed to (top-K)
    rho  sparsity ratio K / E; rho = 1 is a dense FFN
    t    tokens in one forward pass of the layer (batch size × tokens per sequence)
    tau  fraction of the E experts that counts as "all experts active"

Every formula assumes each token picks its K experts uniformly and independently of other tokens.
Real routers are skewed, so these are the balanced-load reference curves, not predictions of a
particular checkpoint. Token counts may be real numbers (expected counts are used when fitting),
which is why the functions accept floats and numpy arrays, not only integers.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from specmoe.errors import SpecmoeError

ArrayLike = float | np.ndarray

# log round-off can turn an exact integer ratio such as log(0.25)/log(0.5) = 2 into 2.0000000000000004,
# which ceil() would push to 3; anything this close to an integer is taken to be that integer.
_CEIL_SLACK = 1e-9


def _tokens(t: ArrayLike) -> np.ndarray:
    """`t` as a float array, or SpecmoeError when any entry is negative or not finite."""
    arr = np.asarray(t, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise SpecmoeError(f"token count t must be finite and >= 0, got {t!r}; pass a count of tokens")
    return arr


def _rho(rho: float) -> float:
    if not isinstance(rho, Real) or not 0.0 < float(rho) <= 1.0:
        raise SpecmoeError(f"sparsity ratio rho must be in (0, 1], got {rho!r}; pass top_k / num_experts")
    return float(rho)


def _out(value: np.ndarray, like: ArrayLike) -> ArrayLike:
    """A Python float for scalar input, an array for array input."""
    return float(value) if np.ndim(like) == 0 else value


def _activated_fraction(t: np.ndarray, rho: float) -> np.ndarray:
    """1 − (1 − rho)^t: the expected fraction of experts hit by at least one of t tokens."""
    if rho == 1.0:
        # dense: one token already touches the whole FFN; 0**0 would wrongly give 0 at t = 0.
        return np.where(t > 0, 1.0, 0.0)
    # expm1/log1p keep precision when rho or t is small (1 − (1 − rho)^t suffers cancellation).
    return -np.expm1(t * math.log1p(-rho))


def expected_active_experts(t: ArrayLike, num_experts: int, top_k: int) -> ArrayLike:
    """Expected number of distinct experts a layer loads for a forward pass over t tokens.

        N(t) = E · (1 − (1 − K/E)^t)            [experts]

    N(0) = 0, N(1) = K, and N(t) → E as t grows; a dense layer (K = E) gives N(t) = E for t ≥ 1.
    This drives the weight bytes a decode step must read: verifying γ draft tokens for B sequences
    costs N(B·(γ+1)) expert loads instead of N(B).

    Args:
        t: tokens in the forward pass (B × tokens per sequence); float or array, ≥ 0.
        num_experts: E, routed experts per layer, integer ≥ 1.
        top_k: K, experts per token, integer with 0 < K ≤ E.
    """
    if isinstance(num_experts, bool) or not isinstance(num_experts, Integral) or num_experts < 1:
        raise SpecmoeError(f"num_experts must be an integer >= 1, got {num_experts!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, Integral) or not 0 < top_k <= num_experts:
        raise SpecmoeError(
            f"top_k must be an integer with 0 < top_k <= num_experts ({num_experts}), got {top_k!r}"
        )
    tokens = _tokens(t)
    return _out(num_experts * _activated_fraction(tokens, top_k / num_experts), t)


def full_activation_threshold(tau: float, rho: float) -> int:
    """Smallest token count t whose expected activated fraction reaches tau.

        T_thres = ceil( log_{1−ρ}(1 − τ) ) = ceil( ln(1 − τ) / ln(1 − ρ) )     [tokens]

    Beyond T_thres every expert is (in expectation, up to tau) already loaded, so the extra tokens of
    a verify pass add compute but almost no weight traffic: the regime where MoESD finds SD pays off.
    A dense layer (ρ = 1) is fully active from the first token, so the threshold is 1.

    Args:
        tau: target active fraction, 0 < τ < 1 (τ = 1 is allowed only for ρ = 1: with ρ < 1 the
            expected fraction approaches 1 but never reaches it).
        rho: sparsity ratio K / E, 0 < ρ ≤ 1.
    """
    rho = _rho(rho)
    if not isinstance(tau, Real) or not 0.0 < float(tau) <= 1.0:
        raise SpecmoeError(f"tau must be in (0, 1), got {tau!r}; 0.99 asks for 99% of experts active")
    if rho == 1.0:
        return 1
    if tau == 1.0:
        raise SpecmoeError(f"tau = 1 is never reached when rho = {rho} < 1; use a tau below 1 such as 0.99")
    ratio = math.log1p(-float(tau)) / math.log1p(-rho)
    return max(1, math.ceil(ratio - _CEIL_SLACK))


def mean_expert_load(t: ArrayLike, rho: float) -> ArrayLike:
    """Expected tokens processed by each activated expert when t tokens pass through the layer.

        T_exp(t; ρ) = ρ·t / (1 − (1 − ρ)^t)        [tokens per activated expert]

    It is the FFN's arithmetic intensity in tokens: total routed token-slots K·t spread over the
    N(t) activated experts (K·t / N(t) = ρ·t / fraction). Sparser layers (smaller ρ) keep it lower
    for longer, so they stay memory-bound at batch sizes where a dense layer is already compute-bound.

    Reference values: T_exp(1; ρ) = 1 for every ρ; dense (ρ = 1) gives T_exp = t; for large t it
    approaches ρ·t. At t = 0 the ratio is 0/0 and the function returns its limit
    ρ / (−ln(1 − ρ)), which is ≈ 1 only for small ρ (0.72 at ρ = 0.5) and 0 for a dense layer,
    so the curve stays continuous when it is fitted over real-valued t.

    Args:
        t: tokens in the forward pass; float or array, ≥ 0.
        rho: sparsity ratio K / E, 0 < ρ ≤ 1.
    """
    rho = _rho(rho)
    tokens = _tokens(t)
    if rho == 1.0:
        return _out(tokens.copy(), t)
    limit_at_zero = rho / -math.log1p(-rho)
    fraction = _activated_fraction(tokens, rho)
    safe = np.where(tokens > 0, fraction, 1.0)  # avoids 0/0 warnings; t = 0 takes the limit below
    load = np.where(tokens > 0, rho * tokens / safe, limit_at_zero)
    return _out(load, t)
