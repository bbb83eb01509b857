"""Sliding-window attention layers (gpt-oss, Mistral, Gemma 2/3, Cohere 2) in the transformers backends.

Shape legend: B rows, t tokens in one block, W physical cache slots.

A sliding-window layer lets the query at position q see the keys at positions q - window + 1 .. q.
transformers' own caches for such a layer (`DynamicSlidingWindowLayer`, `StaticSlidingWindowLayer`)
keep only the last window keys and discard older ones as new tokens arrive: once a verify block has
pushed keys out, a rejected suffix cannot be taken back, because the keys it displaced are gone.

The method here: keep the whole past for those layers too (a plain `DynamicLayer` / `StaticLayer`,
the layer full attention uses), so a rejected suffix is masked or cropped exactly as in a full
attention layer, and apply the window in the attention mask instead. The window must be counted
in *logical* positions: the backends' physical slots hold left padding and rollback holes
(`slots.py`), so slot distance is not token distance. Each key's position is its row's count of
live slots before it; `windowed` keeps a key when the query is less than `window` positions past it,
which is transformers' own rule (`masking_utils.sliding_window_overlay`: kv > q - window). Where
no row has padding or a hole the backends pass no mask and transformers builds the window itself
from slot indices, which are then the positions shifted by a constant.

Cost: the sliding layers keep every token of a row, as full-attention layers do, where
transformers' sliding caches keep `window`; and their attention reads the whole past with the
keys outside the window masked, so a step's work in those layers grows with the context instead of
stopping at `window`. gpt-oss's attention sinks live inside its attention function, which receives
the same mask, so they need nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SLIDING = "sliding_attention"  # transformers' layer type of a sliding-window layer
FULL = "full_attention"


def layer_types(config) -> list[str]:
    """Each decoder layer's attention kind as transformers' caches read it (`layer_types`, or
    inferred from a per-layer `sliding_window` / `attention_chunk_size`)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    return list(get_layer_types_and_kwargs(config.get_text_config(decoder=True))[0])


@dataclass(frozen=True)
class SlidingWindow:
    """A model's sliding-window attention: its window in tokens, and whether full-attention layers
    sit beside the sliding ones."""

    size: int
    mixed: bool

    def masks(self, full: torch.Tensor, sliding: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """What to pass as `attention_mask`: a model whose attention layers all slide (Mistral)
        takes one tensor, which its mask builder hands unchanged to every layer; a model that mixes
        kinds (gpt-oss, Gemma 2, Cohere 2) takes one mask per layer type."""
        return {FULL: full, SLIDING: sliding} if self.mixed else sliding


def sliding_window(config) -> SlidingWindow | None:
    """The model's sliding-window attention; None when no layer slides."""
    kinds = layer_types(config)
    if SLIDING not in kinds:
        return None
    return SlidingWindow(int(config.get_text_config(decoder=True).sliding_window), FULL in kinds)


def sliding_layers(config) -> tuple[int, ...]:
    """The indices of the decoder layers that slide."""
    return tuple(index for index, kind in enumerate(layer_types(config)) if kind == SLIDING)


def keep_whole_past(cache, layers: tuple[int, ...], max_cache_len: int | None = None):
    """Replace these sliding-window layers of a transformers cache by the full-attention layer of
    the same kind (dynamic, or static max_cache_len slots long), in place, so no key is ever
    discarded and a suffix can always be dropped. Returns the cache."""
    from transformers.cache_utils import (
        DynamicLayer,
        DynamicSlidingWindowLayer,
        StaticLayer,
        StaticSlidingWindowLayer,
    )

    for index in layers:
        layer = cache.layers[index]
        if type(layer) is DynamicSlidingWindowLayer:
            cache.layers[index] = DynamicLayer()
        elif type(layer) is StaticSlidingWindowLayer:
            cache.layers[index] = StaticLayer(max_cache_len=max_cache_len)
    return cache


def key_positions(valid: torch.Tensor) -> torch.Tensor:
    """[B, W] each slot's logical position in its row (its count of live slots before it); the
    value at an invalid slot is meaningless and masked anyway."""
    return valid.long().cumsum(dim=-1) - 1


def windowed(allowed: torch.Tensor, keys: torch.Tensor, queries: torch.Tensor, window: int) -> torch.Tensor:
    """The sliding-window mask from the full-attention one.

    allowed [B, 1, t, W] bool (live and causal); keys [B, W] each slot's logical position;
    queries [B, t] each query's logical position. A key stays visible when the query is fewer
    than `window` positions past it."""
    distance = queries[:, None, :, None] - keys[:, None, None, :]  # [B, 1, t, W]
    return allowed & (distance < window)
