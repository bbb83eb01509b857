"""The attention mask of the eager backend's next block, handed to transformers ready to use.

Shape legend: B rows, W physical slots after the block, t new tokens per row.

Given a 2D padding mask, transformers rebuilds the 4D mask on every forward, and on a one-token
step it first asks whether the mask is all true (`fast_all`), which reads a device value back: on
a CUDA GPU, a wait for every queued kernel, in every draft and decode step. The host already knows
the answer (`SlotMap.dense`), so:

- no row has padding or a hole (B = 1, equal prompts): no mask at all, transformers' own causal
  default, which also lets SDPA pick its unmasked kernels;
- otherwise a 4D mask [B, 1, t, W] built from a device copy of the slot map (one op on a
  one-token step, three on a verify block): boolean for SDPA, additive for eager attention, as
  transformers' own mask functions would make it; another attention implementation gets the 2D
  mask as before.

A model with sliding-window layers gets each block's window applied here too, counted in tokens,
not slots (`hf_sliding`): one mask for the full-attention layers and one for the sliding ones.

The device copy is sent whole after the map changed by anything but an append (`generation`),
and extended in place by one op otherwise; on CPU it shares the host's memory.
"""

from __future__ import annotations

import torch

from specmoe.backends.hf_sliding import SlidingWindow, key_positions, windowed
from specmoe.backends.slots import SlotMap, to_device
from specmoe.errors import SpecmoeError


class DeviceMask:
    """The device copy of a slot map's mask and the attention masks made from it."""

    def __init__(
        self, slots: SlotMap, model, device: torch.device, window: SlidingWindow | None = None
    ) -> None:
        self._slots = slots
        self._device = device
        self._window = window
        impl = getattr(model.config, "_attn_implementation", None) or "sdpa"  # a dict for composite models
        self._kind = {"sdpa": "bool", "eager": "additive"}.get(impl, "2d") if isinstance(impl, str) else "2d"
        if window is not None and self._kind == "2d":  # transformers would slide over slots, not tokens
            raise SpecmoeError(
                f"a sliding-window model runs with sdpa or eager attention here, not {impl}; "
                "load it with attn_implementation='sdpa' or 'eager'"
            )
        self._dtype = next(model.parameters()).dtype
        self._copy = torch.zeros(0, 0, dtype=torch.bool, device=device)  # [B, C]
        self._generation = -1  # the slot map's generation the copy was sent at
        self._sent = 0  # slots [0, sent) of the copy are up to date
        self._tril: dict[int, torch.Tensor] = {}  # t -> [t, t] causal block

    def for_block(self, start: int, t: int) -> torch.Tensor | dict[str, torch.Tensor] | None:
        """The mask for a block of t tokens at slots [start, start + t), after `SlotMap.append`
        (one per layer type for a model that mixes sliding and full attention)."""
        if self._slots.dense:
            return None
        valid = self.valid()  # [B, W]
        if self._kind == "2d":
            return valid
        allowed = valid[:, None, None, :]  # [B, 1, 1, W]
        if t > 1:
            allowed = allowed.repeat(1, 1, t, 1)  # [B, 1, t, W]
            allowed[..., start:] &= self._causal(t)
        if self._window is None:
            return self._typed(allowed)
        keys = key_positions(valid)  # [B, W]
        sliding = windowed(allowed, keys, keys[:, start : start + t], self._window.size)
        return self._window.masks(self._typed(allowed), self._typed(sliding))

    def _typed(self, allowed: torch.Tensor) -> torch.Tensor:
        """A boolean mask as the attention implementation takes it: boolean, or additive."""
        if self._kind == "bool":
            return allowed
        zero = torch.zeros((), dtype=self._dtype, device=self._device)
        return torch.where(allowed, zero, torch.finfo(self._dtype).min)

    def valid(self) -> torch.Tensor:
        """[B, W] the slot map's mask on the device."""
        slots = self._slots
        if self._generation != slots.generation:
            self._copy = to_device(slots.buffer, self._device)
            self._generation, self._sent = slots.generation, slots.width
        elif self._sent < slots.width:  # appended since: every row's new slots are live
            if self._device.type != "cpu":  # on CPU the copy is the host buffer itself
                self._copy[:, self._sent : slots.width] = True
            self._sent = slots.width
        return self._copy[:, : slots.width]

    def _causal(self, t: int) -> torch.Tensor:
        if t not in self._tril:
            self._tril[t] = torch.ones(t, t, dtype=torch.bool, device=self._device).tril()
        return self._tril[t]
