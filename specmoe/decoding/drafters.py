"""Drafters propose up to gamma tokens per sequence; the verifier decides what stays.

A drafter is told the committed tokens of every live sequence and, after verification, what the
verify pass decided (`Verified`): how many of its proposals each sequence kept, the token the target
committed after them, and, for a drafter that reads them (an MTP or EAGLE-3 head), the target's
hidden states over the verified block. Proposals carry the distribution they were sampled from, or
None when the drafter has none (the verifier then treats each proposal as a point mass).

Shape legend: B live rows, G proposals per row (gamma), V vocabulary, K target hidden-state layers
the drafter reads, H the target's hidden size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specmoe.backends.base import Backend
from specmoe.backends.slots import to_device
from specmoe.decoding.sampling import SamplingParams, pick


@dataclass(frozen=True)
class Proposal:
    tokens: torch.Tensor  # [B, G] proposed token ids
    probs: torch.Tensor | None  # [B, G, V] distribution each token was drawn from, or None


@dataclass(frozen=True)
class Verified:
    """What one verify pass decided, handed from the decode loop to the drafter (the part of vLLM's
    `SpecDecodeMetadata` a drafter needs).

    The target verified the block [last committed token, proposals...] of every live row. Row b kept
    its first accepted[b] proposals and then committed next_token[b]: the bonus token when every
    proposal was accepted, the correction otherwise. Block positions 0..accepted[b] are the kept ones;
    the target's state at position accepted[b] chose next_token[b].
    """

    accepted: tuple[int, ...]  # [B] proposals kept per row
    next_token: tuple[int, ...]  # [B] the token committed after them
    hidden: torch.Tensor | None = None  # [B, 1 + G, K, H] target hidden states per block position, or
    # None for a drafter with no `hidden_layers`


class Drafter(Protocol):
    vocab_size: int
    max_context: int
    # Declared abilities and counters (defaults in `DrafterBase`):
    vocab_digest: str | None  # compared with the target's (`Backend.vocab_digest`)
    tokenizer_digest: str | None
    hidden_layers: tuple[int, ...]  # the target hidden states this drafter reads (`HiddenAccess`); ()
    compile_s: float  # seconds the drafter's backend spent compiling shapes
    state_s: float  # seconds it spent rolling back recurrent state
    rollback_refused: str | None  # why its model cannot drop rejected proposals (`Backend`'s); None
    batch_refused: str | None  # why its model cannot decode B > 1 prompts exactly (`Backend`'s); None

    def reserve(self, tokens: int) -> None:
        """A row of the next batch may reach `tokens` tokens (for a backend that sizes its cache)."""

    def begin(self, prompts: Sequence[Sequence[int]], hidden: torch.Tensor | None) -> None:
        """A new batch starts with these prompts. hidden: the target's hidden states over its prefill
        of every prompt but its last token ([B, W, K, H], rows right-aligned, `Backend.hidden`), or
        None for a drafter with no `hidden_layers`."""

    def propose(
        self,
        sequences: Sequence[Sequence[int]],
        gamma: int,
        params: SamplingParams,
        generator: torch.Generator | None,
    ) -> Proposal:
        """Propose gamma tokens to follow each live sequence (prompt + committed tokens)."""

    def feedback(self, verified: Verified) -> None:
        """What the round just verified decided for each live row."""

    def retain(self, rows: Sequence[int]) -> None:
        """Keep only these live rows, in this order."""

    def synchronize(self) -> None: ...


class DrafterBase:
    """The declared abilities' defaults: no digest, no hidden states read, nothing compiled or rolled
    back, nothing to reserve, nothing queued on a device, no model that refuses rollback."""

    vocab_digest: str | None = None
    tokenizer_digest: str | None = None
    hidden_layers: tuple[int, ...] = ()
    compile_s: float = 0.0
    state_s: float = 0.0
    rollback_refused: str | None = None
    batch_refused: str | None = None

    def reserve(self, tokens: int) -> None:
        return None

    def synchronize(self) -> None:
        return None


class ModelDrafter(DrafterBase):
    """A smaller language model drafting autoregressively through any backend.

    After a round its cache keeps every token it computed that the verifier committed: all of a
    row's committed tokens but the correction (one pending token), or but the last proposal and the
    bonus when all G were accepted (two pending tokens, the last proposal never having been fed).
    The next round's first step consumes the pending tokens, so a round costs G forwards and no
    token is computed twice. A batch block is rectangular: a row with fewer pending tokens than the
    widest row re-feeds its last cached token, which costs nothing extra, because a padded slot
    would cost the same compute in a [B, 2] step (see docs/decoding.md).
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.vocab_size = backend.vocab_size
        self.vocab_digest = backend.vocab_digest  # checked against the target's
        self.tokenizer_digest = backend.tokenizer_digest  # likewise (HF models)
        self.max_context = backend.max_context
        self.rollback_refused = backend.rollback_refused  # SD is refused with it (`decode`)
        self.batch_refused = backend.batch_refused  # a batch is refused with it (`decode`)
        self._committed: list[int] = []  # committed length per live row at the last propose
        self._kept: list[int] = []  # cached tokens per live row that the verifier committed
        self._fed = 0  # proposals fed to the backend in the last round (G - 1)

    def begin(self, prompts: Sequence[Sequence[int]], hidden: torch.Tensor | None = None) -> None:
        self.backend.prefill([p[:-1] for p in prompts])
        self._kept = self.backend.cached_lengths()

    def reserve(self, tokens: int) -> None:
        self.backend.reserve(tokens)

    @property
    def compile_s(self) -> float:
        return self.backend.compile_s

    @property
    def state_s(self) -> float:
        return self.backend.state_s

    def propose(self, sequences, gamma, params, generator) -> Proposal:
        tokens, probs = self.run(sequences, gamma, lambda step, logits: pick(logits, params, generator))
        return Proposal(tokens, None if params.greedy else torch.stack(probs, 1))  # probs [B, G, V]

    def run(self, sequences, gamma: int, choose) -> tuple[torch.Tensor, list]:
        """Feed each row's pending tokens, then gamma - 1 chosen tokens; choose(step, logits [B, V])
        returns (tokens [B], probs [B, V] or None). Returns (tokens [B, G], per-step probs)."""
        pending = [len(s) - k for s, k in zip(sequences, self._kept, strict=True)]
        if min(pending) < 1:
            raise RuntimeError(f"draft cache out of step with the sequences: pending tokens {pending}")
        width = max(pending)
        self.backend.rollback([len(s) - width for s in sequences])
        block = to_device([s[len(s) - width :] for s in sequences], self.backend.device)  # [B, w]
        tokens, probs = [], []
        for step in range(gamma):
            logits = self.backend.forward(block)[:, -1]  # [B, V]
            token, prob = choose(step, logits)
            tokens.append(token)
            probs.append(prob)
            block = token[:, None]
        self._committed = [len(s) for s in sequences]
        self._fed = gamma - 1
        return torch.stack(tokens, 1), probs

    def feedback(self, verified: Verified) -> None:
        # The cache holds the G - 1 proposals fed after the pending tokens; the accepted ones stay.
        accepted = verified.accepted
        self._kept = [n + min(a, self._fed) for n, a in zip(self._committed, accepted, strict=True)]

    def retain(self, rows: Sequence[int]) -> None:
        self.backend.retain(rows)
        self._committed = [self._committed[r] for r in rows]
        self._kept = [self._kept[r] for r in rows]

    def synchronize(self) -> None:
        self.backend.synchronize()
