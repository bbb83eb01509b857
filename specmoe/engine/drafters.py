"""Drafters propose up to gamma tokens per sequence; the verifier decides what stays.

A drafter is told the committed tokens of every live sequence and, after verification, how many of
its proposals each sequence kept. Proposals carry the distribution they were sampled from, or None
when the drafter has none (the verifier then treats each proposal as a point mass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specmoe.backends.base import Backend
from specmoe.engine.sampling import SamplingParams, pick


@dataclass(frozen=True)
class Proposal:
    tokens: torch.Tensor  # [B, G] proposed token ids
    probs: torch.Tensor | None  # [B, G, V] distribution each token was drawn from, or None


class Drafter(Protocol):
    vocab_size: int
    max_context: int

    def begin(self, prompts: Sequence[Sequence[int]]) -> None:
        """A new batch starts with these prompts."""

    def propose(
        self,
        sequences: Sequence[Sequence[int]],
        gamma: int,
        params: SamplingParams,
        generator: torch.Generator | None,
    ) -> Proposal:
        """Propose gamma tokens to follow each live sequence (prompt + committed tokens)."""

    def feedback(self, accepted: Sequence[int]) -> None:
        """How many proposals each live row kept in the round just verified."""

    def retain(self, rows: Sequence[int]) -> None:
        """Keep only these live rows, in this order."""

    def synchronize(self) -> None: ...


class ModelDrafter:
    """A smaller language model drafting autoregressively through any backend.

    Its cache holds all committed tokens but the last two at the start of every round after the
    first, so each row feeds the same two-token block: one cached token is recomputed when the
    verifier rejected something, which keeps the block rectangular (see docs/engine.md).
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.vocab_size = backend.vocab_size
        self.vocab_digest = getattr(backend, "vocab_digest", None)  # checked against the target's
        self.max_context = backend.max_context
        self._committed: list[int] = []  # committed length per live row at the last propose

    def begin(self, prompts: Sequence[Sequence[int]]) -> None:
        self.backend.prefill([p[:-1] for p in prompts])

    def propose(self, sequences, gamma, params, generator) -> Proposal:
        tokens, probs = self.run(sequences, gamma, lambda step, logits: pick(logits, params, generator))
        return Proposal(tokens, None if params.greedy else torch.stack(probs, 1))  # probs [B, G, V]

    def run(self, sequences, gamma: int, choose) -> tuple[torch.Tensor, list]:
        """Feed each row's pending tokens, then gamma - 1 chosen tokens; choose(step, logits [B, V])
        returns (tokens [B], probs [B, V] or None). Returns (tokens [B, G], per-step probs)."""
        widths = {len(s) - c for s, c in zip(sequences, self.backend.cached_lengths(), strict=True)}
        if len(widths) != 1:
            raise RuntimeError(f"draft cache out of step with the sequences: pending widths {sorted(widths)}")
        width = widths.pop()
        block = torch.tensor([s[len(s) - width :] for s in sequences], device=self.backend.device)  # [B, p]
        tokens, probs = [], []
        for step in range(gamma):
            logits = self.backend.forward(block)[:, -1]  # [B, V]
            token, prob = choose(step, logits)
            tokens.append(token)
            probs.append(prob)
            block = token[:, None]
        self._committed = [len(s) for s in sequences]
        return torch.stack(tokens, 1), probs

    def feedback(self, accepted: Sequence[int]) -> None:
        # Keep committed + accepted - 1 tokens: the next block is then [last accepted, next token].
        self.backend.rollback([n + a - 1 for n, a in zip(self._committed, accepted, strict=True)])

    def retain(self, rows: Sequence[int]) -> None:
        self.backend.retain(rows)
        self._committed = [self._committed[r] for r in rows]

    def synchronize(self) -> None:
        self.backend.synchronize()
