"""Plain decoding of a transformers model that keeps its past outside transformers' Cache.

Shape legend: B sequences in the batch, t new tokens per sequence in one block, V vocabulary.

Mamba, Mamba-2, RWKV, xLSTM and a few older models (GPT-1, XLM) carry their past in their own
objects (`cache_params`, `state`, `mems`) or not at all; specmoe's cache backends can neither mask
nor roll those back. This backend keeps no past: it holds each row's tokens on the host and every
forward runs each row's whole sequence alone, unpadded. That is exactly what the model computes
for the sequence, at a cost quadratic in its length, which is acceptable for checking and
comparing outputs, never for timing. Speculative decoding on it is refused (`rollback_refused`):
its verify pass would recompute the whole sequence, so its measurements would mean nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specmoe.backends.base import BackendBase
from specmoe.backends.hf_model import set_model_facts
from specmoe.backends.hf_recurrent import refused_sd


class UncachedHFBackend(BackendBase):
    """A transformers model run on each row's full sequence at every step: no cache to roll back."""

    def __init__(self, model, name: str, device: torch.device) -> None:
        set_model_facts(self, model, name, device)
        model_type = getattr(model.config, "model_type", "?")
        self.rollback_refused = refused_sd(
            name,
            model_type,
            "that keeps its past outside transformers' Cache (specmoe decodes it without a cache)",
            "use a transformer or a supported hybrid, or its GGUF through llama.cpp",
        )
        self._rows: list[list[int]] = []

    def prefill(self, prompts: Sequence[Sequence[int]]) -> None:
        self._rows = [list(p) for p in prompts]

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, t] -> logits [B, t, V], each row computed from its whole sequence."""
        t = tokens.shape[1]
        logits = []
        for row, new in zip(self._rows, tokens.tolist(), strict=True):
            row.extend(new)
            ids = torch.tensor([row], dtype=torch.long, device=self.device)  # [1, n]
            logits.append(self.model(input_ids=ids).logits[0, -t:])  # [t, V]
        return torch.stack(logits)

    def rollback(self, lengths: Sequence[int]) -> None:
        for row, length in zip(self._rows, lengths, strict=True):
            del row[length:]

    def retain(self, rows: Sequence[int]) -> None:
        self._rows = [self._rows[r] for r in rows]

    def cached_lengths(self) -> list[int]:
        return [len(row) for row in self._rows]

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def router_trace(self):
        return None
