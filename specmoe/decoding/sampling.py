"""Turning logits into the distribution both draft and target sample from.

The same transform must be applied to draft and target logits, otherwise rejection sampling would
preserve the wrong distribution. Temperature 0 means greedy and never reaches these functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specmoe.errors import SpecmoeError

MIN_TEMPERATURE = 1e-3  # float32 logits up to ~1e35 stay finite when divided by it


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 is greedy; top_k 0 and top_p 1.0 disable those filters."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        # `nan < 0` is False, so finiteness is checked first; a positive temperature below
        # MIN_TEMPERATURE overflows logits / temperature to inf and the softmax to nan.
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise SpecmoeError(
                f"temperature must be a finite number >= 0 (0 is greedy), got {self.temperature}"
            )
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise SpecmoeError(
                f"temperature {self.temperature} is too small to sample with (logits overflow); "
                f"use 0 for greedy or >= {MIN_TEMPERATURE}"
            )
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise SpecmoeError(f"top-k must be an integer >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise SpecmoeError(f"top-p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Softmax of logits / temperature after top-k and top-p filtering.

    logits: [..., V]; returns [..., V] probabilities in float32 (float64 if the logits are float64).
    """
    work_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    scores = logits.to(work_dtype) / params.temperature
    if params.top_k and params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k, dim=-1).values[..., -1:]  # [..., 1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        sorted_probs = sorted_scores.softmax(-1)
        # Drop a token when the tokens ranked above it already hold top_p of the mass; the first stays.
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores.softmax(-1)


def pick(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None):
    """Choose one token per row from logits [B, V]: argmax when greedy, else a sample.

    Returns (tokens [B], probs [B, V] or None when greedy).
    """
    if params.greedy:
        return logits.argmax(-1), None
    probs = probabilities(logits, params)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1), probs
