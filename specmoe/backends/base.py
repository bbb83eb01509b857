"""The backend protocol: the few operations the decode loops need from a model runtime.

Shape legend: B sequences in the batch, t new tokens per sequence in one block, V vocabulary.

A backend holds one batch of sequences at a time and a cache of their past tokens. Each sequence has a
*cached length*: how many of its tokens the cache holds. The engine decides which tokens to feed;
the backend only caches, computes logits, and forgets what the engine tells it to forget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Backend(Protocol):
    """What the engine needs from a model runtime, and nothing more."""

    name: str
    vocab_size: int  # width of the logits, which must match between a draft and its target
    max_context: int  # the most positions one sequence may occupy (prompt + generated + lookahead)
    eos_token_ids: frozenset[int]
    device: torch.device

    def prefill(self, prompts: Sequence[Sequence[int]]) -> None:
        """Start a new batch: cache every token of each prompt (prompts may differ in length or be empty)."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Cache `tokens` after each sequence's cached tokens and return logits for every new position.

        tokens: [B, t] token ids, one row per live sequence.
        returns: [B, t, V] logits; position j predicts the token after tokens[:, j].
        """

    def rollback(self, lengths: Sequence[int]) -> None:
        """Forget cached tokens so that sequence i keeps exactly its first lengths[i] tokens."""

    def retain(self, rows: Sequence[int]) -> None:
        """Keep only these batch rows (in this order); finished sequences leave the batch."""

    def cached_lengths(self) -> list[int]:
        """How many tokens each live sequence has in the cache."""

    def synchronize(self) -> None:
        """Block until queued device work has finished, so a clock read afterwards is honest."""

    def router_trace(self) -> RouterTraceLike | None:
        """The MoE router trace of this model, or None for dense models and runtimes that cannot trace."""


class RouterTraceLike(Protocol):
    """Records the experts each MoE layer selects while entered as a context manager.

    records[forward][layer] is a [tokens, K] tensor of selected expert ids. Tracing hooks cost
    time: use it for expert-traffic measurements, never inside timed runs.
    """

    records: list

    def __enter__(self) -> RouterTraceLike: ...

    def __exit__(self, *exc) -> None: ...

    def clear(self) -> None: ...
