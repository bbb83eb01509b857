"""Where two decodes of the same prompt part, and how close the target's call was there.

In float64 greedy SD and greedy decoding agree exactly. In bf16 a t-token verify pass and a 1-token
step round differently, so where the target's top two logits nearly tie they may pick different
tokens. The top-2 margin at the first divergent position tells such a near-tie from a bug.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specmoe.backends.base import Backend


@dataclass(frozen=True)
class Divergence:
    sequence: int
    position: int  # index into the generated tokens where the two outputs first differ
    margin: float  # target's top-1 minus top-2 logit there, from a fresh forward pass


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def top2_margin(target: Backend, context: Sequence[int]) -> float:
    """Top-1 minus top-2 logit of the target's prediction for the token after `context`."""
    target.prefill([context[:-1]])
    logits = target.forward(torch.tensor([[context[-1]]], device=target.device))[0, -1]  # [V]
    top = torch.topk(logits.double(), 2).values
    return float(top[0] - top[1])


def find_divergences(
    target: Backend,
    prompts: Sequence[Sequence[int]],
    outputs_a: Sequence[Sequence[int]],
    outputs_b: Sequence[Sequence[int]],
) -> list[Divergence]:
    found = []
    for index, (prompt, a, b) in enumerate(zip(prompts, outputs_a, outputs_b, strict=True)):
        position = first_difference(a, b)
        if position is None or position >= min(len(a), len(b)):
            continue
        margin = top2_margin(target, [*prompt, *a[:position]])
        found.append(Divergence(index, position, margin))
    return found
