"""Which physical cache slots hold each row's live tokens, decided on the host.

Shape legend: B rows, W physical slots in use (the cache's width), C capacity of the host buffer,
t tokens in one block.

Both transformers backends keep a batch's tokens in physical slots shared by all rows: a block of t
new tokens goes to the same t slots of every row, and a row that drops tokens leaves invalid slots
(holes) that attention masks out (`hf.py`, `hf_static.py`). Everything the backends decide about
that layout between forwards — where the used slots begin and end, whether any row has a hole or
padding, each row's length, which rows dropped how many tokens, the order that compacts a row — is
computed here, from a boolean mask in host memory, so a step reads no value back from the device.
On a CUDA GPU each such read (`.item()`, `int(t)`, `.tolist()`, `.nonzero()`) waits for every
kernel launched before it, and the GPU then idles while Python prepares the next step; the device
holds a copy of the mask for attention, sent by `to_device` without waiting.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


class SlotMap:
    """The live slots of every row, [B, W], in a buffer that grows geometrically on the host."""

    def __init__(self) -> None:
        self.buffer = np.zeros((0, 0), dtype=bool)  # [B, C]; slots at or past `width` are unused
        self.width = 0  # W
        self.lengths = np.zeros(0, dtype=np.int64)  # [B] live tokens per row
        self.generation = 0  # bumped by every change but `append`: device copies are then sent again
        self._dense: bool | None = True  # `dense`, or None until asked after a change

    @property
    def valid(self) -> np.ndarray:
        """[B, W] whether each slot holds a live token of its row (a view of the buffer)."""
        return self.buffer[:, : self.width]

    @property
    def rows(self) -> int:
        return self.buffer.shape[0]

    def reset(self, lengths: Sequence[int], rows: int | None = None, capacity: int = 0) -> None:
        """A new batch of left-padded prompts: row r holds its lengths[r] tokens in the last slots of
        max(lengths). rows > len(lengths) adds empty rows (the static batch's padding)."""
        rows = len(lengths) if rows is None else rows
        width = max(lengths, default=0)
        self.buffer = np.zeros((rows, max(capacity, width)), dtype=bool)
        self.lengths = np.zeros(rows, dtype=np.int64)
        self.lengths[: len(lengths)] = lengths
        self.buffer[:, :width] = np.arange(width)[None, :] >= width - self.lengths[:, None]
        self.width = width
        self._changed()

    def append(self, t: int, capacity: int | None = None) -> int:
        """Every row's next t tokens go to slots [W, W + t); returns W. The buffer grows to
        `capacity` slots if given (the static cache's size), else to twice what is needed."""
        start = self.width
        if start + t > self.buffer.shape[1]:
            self._grow(capacity if capacity is not None else 2 * (start + t))
        self.buffer[:, start : start + t] = True
        self.width = start + t
        self.lengths += t
        return start

    def keep(self, lengths: Sequence[int]) -> np.ndarray:
        """Row r keeps its first lengths[r] live tokens (rows past len(lengths) keep none).
        Returns [B] how many tokens each row dropped."""
        keep = np.zeros(self.rows, dtype=np.int64)
        keep[: len(lengths)] = lengths
        np.minimum(keep, self.lengths, out=keep)
        dropped = self.lengths - keep
        if dropped.any():
            valid = self.valid
            valid &= np.cumsum(valid, axis=1) <= keep[:, None]
            self.lengths = keep
            self._changed()
        return dropped

    def used(self) -> tuple[int, int]:
        """(first, last + 1) slot that some row uses; (W, W) when none does."""
        used = np.flatnonzero(self.valid.any(axis=0))
        return (int(used[0]), int(used[-1]) + 1) if used.size else (self.width, self.width)

    def crop(self, lo: int, hi: int) -> None:
        """Keep slots [lo, hi) only (slots no row uses)."""
        if lo:
            self.buffer = np.ascontiguousarray(self.buffer[:, lo:])
        self.width = hi - lo
        self._changed()

    @property
    def longest(self) -> int:
        return int(self.lengths.max()) if self.lengths.size else 0

    def compaction(self, align: str) -> np.ndarray:
        """[B, longest] the slots of each row's live tokens in order, aligned to the "right" end
        (row r's tokens fill the last lengths[r] columns, the rest repeat an invalid slot) or the
        "left" (the first lengths[r]); afterwards the map says so."""
        longest = self.longest
        order = np.argsort(~self.valid if align == "left" else self.valid, axis=1, kind="stable")
        index = order[:, :longest] if align == "left" else order[:, self.width - longest :]
        columns = np.arange(longest)[None, :]  # [1, longest]
        first = np.zeros_like(self.lengths) if align == "left" else longest - self.lengths  # [B]
        live = (columns >= first[:, None]) & (columns < (first + self.lengths)[:, None])
        self.buffer = np.zeros((self.rows, max(self.buffer.shape[1], longest)), dtype=bool)
        self.buffer[:, :longest] = live
        self.width = longest
        self._changed()
        return index

    def retain(self, rows: Sequence[int], pad_to: int | None = None) -> None:
        """Keep these rows in this order; pad_to adds empty rows (the static batch's padding)."""
        index = list(rows) + [rows[0]] * ((pad_to or len(rows)) - len(rows))
        self.buffer = self.buffer[index]
        self.lengths = self.lengths[index]
        self.buffer[len(rows) :] = False
        self.lengths[len(rows) :] = 0
        self._changed()

    def positions(self, t: int) -> np.ndarray:
        """[B, t] rotary positions of the next block: each row's count of live tokens onwards."""
        return self.lengths[:, None] + np.arange(t)[None, :]

    @property
    def dense(self) -> bool:
        """No row has a hole or padding: every slot in use holds a live token of every row."""
        if self._dense is None:
            self._dense = bool((self.lengths == self.width).all())
        return self._dense

    def _changed(self) -> None:
        """After any change but an append (which keeps `dense` as it is)."""
        self.generation += 1
        self._dense = None

    def _grow(self, capacity: int) -> None:
        buffer = np.zeros((self.rows, capacity), dtype=bool)
        buffer[:, : self.width] = self.valid
        self.buffer = buffer
        self._changed()


def to_device(array: np.ndarray | Sequence, device: torch.device) -> torch.Tensor:
    """A device tensor of host values, queued without waiting for the device.

    On CPU the tensor shares the array's memory. On a GPU the values are copied to pinned memory
    first: a copy from ordinary (pageable) memory blocks the host until the GPU has run everything
    queued before it. The pinned block is not reused until its copy has run (torch's caching host
    allocator records the copy), so the caller may change the array at once.
    """
    if isinstance(array, np.ndarray):
        host = torch.from_numpy(np.ascontiguousarray(array))
    else:
        host = torch.tensor(array)
    if device.type == "cpu":
        return host
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def left_padded(rows: Sequence[torch.Tensor], width: int, device: torch.device) -> torch.Tensor:
    """[B, width, E] of per-row input vectors ([n_i, E] each, n_i <= width), each row's at its right
    end and zeros before them: a prompt's left padding, for backends fed vectors, not token ids."""
    dims = next((r.shape[1:] for r in rows if r.numel()), None)
    if dims is None:  # nothing to feed: no row has a vector (every width is 0)
        return torch.zeros(len(rows), width, 0, device=device)
    like = next(r for r in rows if r.numel())
    out = like.new_zeros(len(rows), width, *dims)
    for index, row in enumerate(rows):
        if len(row):
            out[index, width - len(row) :] = row
    return out
