"""The forward-time model T(B, t): one formula, with constants either fitted or from first principles.

Shape legend: B sequences, t new tokens per sequence, n = B·t tokens in the pass, C cached tokens
per sequence, E routed experts per MoE layer, K experts per token, ρ = K/E.

    T(B, t) = c₀ + c_seq·B                                   fixed and per-sequence costs
            + W_d · G_μ(n)                                   dense weights (attention, lm_head, ...)
            + w_e · N(n) · G_μ(T_exp(n))                     routed experts
            + w_kv · B·C · G(t / λ_kv)                       KV-cache reads (first principles)
            + c_tok · n                                      interconnect traffic (first principles)

    N(n)      = E·(1 − (1 − ρ)^n)          experts a pass activates per layer (expected)
    T_exp(n)  = K·n / N(n)                  tokens each activated expert processes
    G(x; s)   = (1 + x^s)^(1/s)             smooth max(1, x): the roofline transition
    G_μ(m)    = (min(m, μ)^s + (m/λ)^s)^(1/s)  a matrix times m rows; μ = 1 is G(m/λ) (`weight_cost`)

Each weight-bearing term is "time to stream the weights once" times G: while a weight sees fewer
than λ tokens the pass is memory-bound (G ≈ 1, the cost does not grow with tokens); beyond λ it is
compute-bound (G ≈ x, the cost grows linearly). λ is the arithmetic intensity, in tokens per weight
read, at which compute time equals load time (λ = F·bytes_per_param / (2·BW) on a roofline with
bandwidth BW and FLOP rate F). The expert term is MoESD's decomposition: parameter loading grows
with the experts actually activated, N(n), and each expert's compute with its mean load T_exp(n),
which sparsity keeps small. A dense model is E = 0: no expert term.

Per-sequence work (each row's KV cache, attention, masks) does not depend on n but on B and C.
A fit sees one context, so it gets one constant c_seq per sequence at that context; the
first-principles model, which knows bytes, uses the explicit KV-cache term instead.

Units: every *_s constant is seconds (c_seq: per sequence; w_e: to stream one routed expert of
every MoE layer; w_kv: per cached token per sequence), λ's are tokens, s is dimensionless. See
docs/perf-model.md for why this form and what the fit leaves out.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields

import numpy as np

from specmoe.errors import SpecmoeError
from specmoe.theory import expected_active_experts, mean_expert_load

ArrayLike = float | np.ndarray


@dataclass(frozen=True)
class MoEShape:
    """E and K; (0, 0) is a dense model."""

    num_experts: int = 0
    top_k: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


# Constants that scale a token count (a knee, a sharpness): > 0. The rest are seconds: >= 0.
_POSITIVE_CONSTANTS = ("knee_tokens", "sharpness", "kv_knee_tokens", "reread_tokens")
# No pass of any model takes a million seconds (11 days); a time past it is an edited or broken
# file, and at 1e30 s the composed times overflow into speedups of NaN.
MAX_CONSTANT_S = 1e6


def _check_constant(name: str, value, where: str) -> None:
    """A fit file's constant a prediction can use: a number, finite (sharpness may be inf), not
    negative; a NaN or a negative time would make every predicted speedup a number physics rules out."""
    positive = name in _POSITIVE_CONSTANTS
    usable = (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and not math.isnan(value)
        and (math.isfinite(value) or (name == "sharpness" and value > 0))
        and (value > 0 if positive else 0 <= value <= MAX_CONSTANT_S)
    )
    if not usable:
        bound = "> 0" if positive else f">= 0 seconds, at most {MAX_CONSTANT_S:g}"
        raise SpecmoeError(
            f"{where}: constant {name} must be a finite number {bound}, got {value!r}; "
            "fit the profile again (`specmoe model fit PROFILE --out FIT`)"
        )


@dataclass(frozen=True)
class Constants:
    """The model's constants (see module docstring for symbols and units)."""

    overhead_s: float = 0.0  # c₀
    sequence_s: float = 0.0  # c_seq
    dense_s: float = 0.0  # W_d
    expert_s: float = 0.0  # w_e
    knee_tokens: float = 1.0  # λ
    sharpness: float = math.inf  # s; inf is the hard roofline max(1, x)
    kv_s: float = 0.0  # w_kv
    kv_knee_tokens: float = 1.0  # λ_kv
    reread_tokens: float = 1.0  # μ; 1 is the plain roofline
    token_s: float = 0.0  # c_tok, per token in the pass: interconnect traffic (first principles)

    def to_json(self) -> dict:
        return {f.name: (None if math.isinf(v := getattr(self, f.name)) else v) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict, where: str) -> Constants:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise SpecmoeError(f"{where}: unknown constant '{unknown[0]}'; known: {', '.join(sorted(names))}")
        values = {k: (math.inf if v is None and k == "sharpness" else v) for k, v in data.items()}
        for name, value in values.items():
            _check_constant(name, value, where)
        return cls(**{k: float(v) for k, v in values.items()})


def roofline(x: ArrayLike, sharpness: float) -> ArrayLike:
    """G(x; s) = (1 + x^s)^(1/s): ≈ 1 for x ≪ 1 (memory-bound), ≈ x for x ≫ 1 (compute-bound).

    Written as max(1, x)·(1 + r^s)^(1/s) with r = min(x, 1/x) ≤ 1 so that large s cannot overflow.
    s = inf is the hard roofline max(1, x); s = 1 adds load and compute time with no overlap.
    """
    x = np.asarray(x, dtype=float)
    big = np.maximum(1.0, x)
    if math.isinf(sharpness):
        return big
    ratio = np.minimum(x, 1.0) / big
    return big * (1.0 + ratio**sharpness) ** (1.0 / sharpness)


def weight_cost(rows: ArrayLike, knee: float, reread: float, sharpness: float) -> ArrayLike:
    """Cost of one weight matrix multiplied with `rows` tokens, in units of streaming it once:
    G_μ(m) = (min(m, μ)^s + (m/λ)^s)^(1/s) = r·G(m / (λ·r)), r = min(m, μ).

    μ = 1 is the roofline G(m/λ). μ > 1 is a kernel that streams the weights again for each of its
    first μ rows (a matrix-vector product per row, or tiles narrower than the rows), so the cost
    climbs by one load per row up to μ rows and then only by compute: concave over a few rows,
    where the roofline is flat and then linear.
    """
    m = np.asarray(rows, dtype=float)
    r = np.minimum(m, reread)
    return r * roofline(m / (knee * r), sharpness)


def check_counts(batch: ArrayLike, tokens: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    b = np.asarray(batch, dtype=float)
    t = np.asarray(tokens, dtype=float)
    if not (np.all(np.isfinite(b)) and np.all(b >= 1)):
        raise SpecmoeError(f"batch size must be >= 1, got {batch!r}; pass a positive number of sequences")
    if not (np.all(np.isfinite(t)) and np.all(t >= 1)):
        raise SpecmoeError(f"tokens per sequence must be >= 1, got {tokens!r}; a verify pass has γ + 1")
    return b, t


def forward_time(
    constants: Constants,
    shape: MoEShape,
    batch: ArrayLike,
    tokens: ArrayLike,
    context: float = 0.0,
    active: ArrayLike | None = None,
) -> ArrayLike:
    """T(B, t) in seconds for B sequences of t new tokens each over `context` cached tokens.

    `active`: experts per MoE layer the pass activates, when known (traced from a run's own
    tokens); it replaces N(n), the expectation for tokens that route independently, and each
    activated expert then multiplies K·n/active tokens."""
    c = constants
    b, t = check_counts(batch, tokens)
    n = b * t
    mu, knee, s = c.reread_tokens, c.knee_tokens, c.sharpness
    time = c.overhead_s + c.sequence_s * b + c.dense_s * weight_cost(n, knee, mu, s)
    if shape.is_moe:
        if active is None:
            active = expected_active_experts(n, shape.num_experts, shape.top_k)
            load = mean_expert_load(n, shape.top_k / shape.num_experts)
        else:
            active = np.clip(np.asarray(active, dtype=float), shape.top_k, shape.num_experts)
            load = shape.top_k * n / active
        time = time + c.expert_s * active * weight_cost(load, knee, mu, s)
    if c.kv_s:
        time = time + c.kv_s * b * context * roofline(t / c.kv_knee_tokens, c.sharpness)
    if c.token_s:
        time = time + c.token_s * n
    return float(time) if np.ndim(time) == 0 else time
