"""Rolling back hybrid models in llama.cpp: per-sequence checkpoints of the recurrent state.

Shape legend: B live rows, n a row's cached tokens, c its tokens at the checkpoint, k the tokens
it keeps after a rollback (c <= k <= n).

A hybrid model (Qwen3.5, Qwen3-Next) keeps two memories per sequence in llama.cpp: attention
layers keep a KV cache, one cell per position; gated-DeltaNet layers keep one recurrent cell, each
linear layer's conv window and delta-rule state after every token so far, and the position of the
last one. `llama_memory_seq_rm` can drop a suffix of the KV cells but not of a recurrent state:
asked to, it refuses (`false`), unless the context keeps per-token state snapshots (`n_rs_seq`,
marked experimental in llama.h). So SD rolls back through a checkpoint:

- *checkpoint*: after prefill and after every rollback, each row's recurrent cell is copied out
  (`llama_state_seq_get_data_ext` with `LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY`: the recurrent part
  only, no KV cells), with the row's length c;
- *log*: every token a row is fed afterwards is appended to its log;
- *rollback*: a row that keeps all n tokens keeps its state. A row that keeps k < n gets its
  checkpoint written back (`llama_state_seq_set_data_ext`, the same flag), which also puts its
  recurrent position back at c - 1, so `llama_memory_seq_rm(seq, c, -1)` then drops its KV cells
  from c on; its logged tokens c..k-1 are decoded again, every such row in one `llama_decode`
  without outputs. Then every row's checkpoint moves to its current state and the logs empty;
- a long run of forwards without a rollback (plain decoding) moves the checkpoint once a row's
  log would pass `LOG_CAPACITY` tokens, so the log and any re-decode stay bounded.

It is exact in the sense a KV cache is: the re-decoded tokens go through the same model at the
same positions after the same state, so the row holds what it would hold had it been fed only the
kept tokens, up to the float rounding that decoding a block instead of single tokens carries in
llama.cpp anyway (tests/test_llamacpp_hybrid.py checks greedy SD against plain decoding, token
for token). llama-server does the same for SD with a draft model.

Cost (`seconds`, the backend's `state_s`): a copy of every row's recurrent cell out per rollback
(and in, for rows that dropped tokens), and a decode of the kept tokens through the whole model
(attention, MLP and experts included) for those rows. The transformers backend replays only the
linear layers' state update from logged layer inputs instead (`hf_recurrent`).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

# Hybrid architectures whose rollback through checkpoints is checked against plain decoding
# (llama.cpp's names). Another hybrid may keep caches this does not restore (sliding-window
# attention drops old cells by position), and pure recurrent models are left out: they are refused.
ROLLBACK_HYBRIDS = frozenset({"qwen35", "qwen35moe", "qwen3next"})
LOG_CAPACITY = 64  # tokens logged per row before the checkpoint moves without a rollback


@dataclass(frozen=True)
class Saved:
    """One sequence's serialised recurrent cell: the first `size` bytes of `buffer`."""

    buffer: ctypes.Array
    size: int


class RecurrentCheckpoints:
    """One checkpoint (recurrent cell bytes, length) and one token log per live row."""

    def __init__(self, lib) -> None:
        self._lib = lib
        self._flags = lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        self.seconds = 0.0  # checkpoints, restores and re-decodes, summed over the backend's life
        self.redecode_s = 0.0  # of which decoding kept tokens again (the rest is copying states)
        self._saved: list[Saved] = []  # each row's recurrent cell at its checkpoint
        self._at: list[int] = []  # each row's length at its checkpoint
        self._log: list[list[int]] = []  # tokens each row was fed since its checkpoint

    # -- what the backend calls -------------------------------------------------------------------
    @contextmanager
    def timed(self) -> Iterator[None]:
        """Count the block's wall time as state time. Copying a state out waits for the decodes
        before it, so a block that ends with `begin` has its GPU work inside it too."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    def begin(self, ctx, seqs: Sequence[int], lengths: Sequence[int]) -> None:
        """Checkpoint every row as it stands (after prefill, after a rollback)."""
        old = self._saved + [None] * (len(seqs) - len(self._saved))
        self._saved = [self.save(ctx, seq, into) for seq, into in zip(seqs, old, strict=False)]
        self._at = list(lengths)
        self._log = [[] for _ in seqs]

    def clear(self) -> None:
        """A new batch is being prefilled: nothing is logged until `begin` checkpoints it."""
        self._saved, self._at, self._log = [], [], []

    def record(self, entries: Sequence[tuple[int, int]]) -> None:
        """(row, token) pairs llama.cpp has just taken, in order (none before `begin`)."""
        if not self._log:
            return
        for row, token in entries:
            self._log[row].append(token)

    def reserve(self, ctx, seqs: Sequence[int], lengths: Sequence[int], t: int) -> None:
        """t tokens per row follow: rows whose log would pass the capacity are checkpointed now."""
        for row, seq in enumerate(seqs):
            if len(self._log[row]) + t > LOG_CAPACITY:
                self._saved[row] = self.save(ctx, seq, self._saved[row])
                self._at[row] = lengths[row]
                self._log[row] = []

    def rollback(
        self, ctx, memory, seqs: Sequence[int], lengths: list[int], keep: Sequence[int], feed
    ) -> None:
        """Row r goes back to keep[r] tokens: rows that drop some are rewound to their checkpoint
        and `feed(entries)` decodes their kept tokens again (one llama_decode for all of them, no
        outputs); then every row is checkpointed where it stands. `lengths` is the backend's list
        of cached lengths, which `rewind` and `feed` update."""
        with self.timed():
            kept = [min(k, n) for k, n in zip(keep, lengths, strict=True)]
            again = self.rewind(ctx, memory, seqs, lengths, keep)
            start = time.perf_counter()
            feed(again)
            self.redecode_s += time.perf_counter() - start
            self.begin(ctx, seqs, kept)

    def rewind(self, ctx, memory, seqs: Sequence[int], lengths: list[int], keep: Sequence[int]):
        """Put every row that keeps fewer tokens than it has back at its checkpoint (recurrent cell
        restored, KV cells from the checkpoint on dropped; lengths updated in place) and return the
        (row, token) entries to decode again so each reaches its kept length."""
        again = []
        for row, seq in enumerate(seqs):
            if keep[row] >= lengths[row]:
                continue
            at = self._at[row]
            if keep[row] < at:
                raise RuntimeError(
                    f"rollback of row {row} to {keep[row]} tokens, before its checkpoint at {at}"
                )
            self.load(ctx, seq, self._saved[row])
            if not self._lib.llama_memory_seq_rm(memory, seq, at, -1):
                raise RuntimeError(
                    f"llama.cpp refused to drop positions >= {at} of row {row} after a restore"
                )
            lengths[row] = at
            again += [(row, token) for token in self._log[row][: keep[row] - at]]
        return again

    def logged(self) -> list[int]:
        """Tokens each row was fed since its checkpoint."""
        return [len(log) for log in self._log]

    def retain(self, rows: Sequence[int]) -> None:
        self._saved = [self._saved[r] for r in rows]
        self._at = [self._at[r] for r in rows]
        self._log = [self._log[r] for r in rows]

    # -- llama.cpp's sequence state ---------------------------------------------------------------
    def save(self, ctx, seq: int, into: Saved | None = None) -> Saved:
        """The sequence's recurrent cell as llama.cpp serialises it (no cell when it saw no token),
        written into `into`'s buffer when it is large enough: one copy, no allocation."""
        size = self._lib.llama_state_seq_get_size_ext(ctx, seq, self._flags)
        buffer = into.buffer if into is not None and len(into.buffer) >= size else (ctypes.c_uint8 * size)()
        written = self._lib.llama_state_seq_get_data_ext(ctx, buffer, size, seq, self._flags)
        if written == 0:
            raise RuntimeError(f"llama.cpp could not save the recurrent state of sequence {seq}")
        return Saved(buffer, written)

    def load(self, ctx, seq: int, saved: Saved) -> None:
        if self._lib.llama_state_seq_set_data_ext(ctx, saved.buffer, saved.size, seq, self._flags) == 0:
            raise RuntimeError(f"llama.cpp could not restore the recurrent state of sequence {seq}")
