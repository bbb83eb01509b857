"""What rolling back a hybrid model's linear-attention state adds to an SD round, by engine method.

Shape and symbols: B live sequences, γ proposals per round, α per-position acceptance, S bytes of
one sequence's linear-attention state over all linear layers (`Architecture.state_bytes`), W bytes
of the linear-attention layers' weights (`Architecture.linear_bytes`), BW the engine's bandwidth.

A hybrid model (Qwen3-Next, Qwen3.5) folds every token into its linear layers' states, so after a
verify pass a row that rejected proposals must get back the state after exactly its kept tokens.
Engines do this in one of three ways (`HybridRollback`), each costed by the bytes it moves:

    readvance     specmoe's transformers backends (`backends/hf_recurrent.py`): a checkpoint copy
                  of every row's state per round (2·S per row: read and write), and for a row that
                  rejected, its checkpoint read back and its linear layers run again over its kept
                  tokens: W once per group of rows keeping the same count (at most γ groups) and
                  2·S per kept token and row.
    per_position  vLLM and SGLang: the verify kernel writes the state after each of the γ + 1
                  positions ((γ + 1)·S per row) and the next step reads the kept one: no recompute.
    redecode      llama.cpp: each row's recurrent state saved and restored (2·S), and a row that
                  rejected decodes its kept tokens again through the whole model: a forward of the
                  rejecting rows over their kept tokens, T(B·p, k).
    none          the engine cannot roll a hybrid back, so it runs no SD on one (mlx-lm needs a
                  trimmable cache); advise says so rather than pricing it.

Expectations under i.i.d. acceptance: a row rejects in a round with p = 1 − α^γ and then keeps
k = 1 + E[accepted | some rejected] tokens of the verified block. The same rollback runs on a hybrid
draft model, with its own S and W and the same p; its redecode replays the draft's kept tokens.
Constant per-round host work (bookkeeping) is the engine profile's `round_s`; this is the part
that scales with the state's bytes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from specmoe.perf.structure import Architecture


class HybridRollback(StrEnum):
    READVANCE = "readvance"
    PER_POSITION = "per_position"
    REDECODE = "redecode"
    NONE = "none"


class Forward(Protocol):
    def time(self, batch: float, tokens: float) -> float: ...


def rejection_share(alpha: float, gamma: int) -> float:
    """p: the share of rows that reject at least one of γ proposals in a round."""
    return 1.0 - alpha**gamma


def kept_after_rejection(alpha: float, gamma: int) -> float:
    """k: tokens of the verified block a row keeps when it rejected (its last committed token and
    the proposals it accepted before the first rejection), under i.i.d. acceptance α."""
    p = rejection_share(alpha, gamma)
    if p <= 0.0:
        return float(gamma + 1)
    # P(exactly j accepted) = α^j (1 − α), j < γ
    accepted = sum(j * alpha**j * (1.0 - alpha) for j in range(gamma)) / p
    return 1.0 + accepted


def rollback_s(
    arch: Architecture | None,
    method: HybridRollback,
    bandwidth: float,
    alpha: float,
    gamma: int,
    batch: float,
    times: Forward | None = None,
) -> float:
    """Expected seconds one round spends rolling back this model's linear-attention state (0 for
    a model without any). `times` prices redecode's extra forward; bandwidth in bytes/s."""
    if arch is None or not arch.state_bytes or method is HybridRollback.NONE:
        return 0.0
    state, p = arch.state_bytes, rejection_share(alpha, gamma)
    k = kept_after_rejection(alpha, gamma)
    rejecting = p * batch
    if method is HybridRollback.PER_POSITION:
        return (gamma + 1) * state * batch / bandwidth
    if method is HybridRollback.REDECODE:
        save_restore = 2 * state * batch / bandwidth
        any_rejects = 1.0 - (1.0 - p) ** batch  # a round replays when some row rejected
        if times is None or any_rejects <= 0.0:
            return save_restore
        return save_restore + any_rejects * times.time(rejecting / any_rejects, k)
    groups = min(rejecting, float(gamma))  # rows keeping the same count re-advance together
    moved = 2 * state * batch + groups * arch.linear_bytes + 2 * state * k * rejecting
    return moved / bandwidth
