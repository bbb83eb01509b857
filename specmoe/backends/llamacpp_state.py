"""Rolling back hybrid models in llama.cpp: per-position snapshots of the recurrent state where
llama.cpp keeps them, per-sequence checkpoints and a re-decode where it cannot.

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
  log would pass `LOG_CAPACITY` tokens, so the log and any re-decode stay bounded (without
  snapshots; with them, see below).

It is exact in the sense a KV cache is: the re-decoded tokens go through the same model at the
same positions after the same state, so the row holds what it would hold had it been fed only the
kept tokens, up to the float rounding that decoding a block instead of single tokens carries in
llama.cpp anyway (tests/test_llamacpp_hybrid.py checks greedy SD against plain decoding, token
for token). llama-server does the same for SD with a draft model.

Cost (`seconds`, the backend's `state_s`): a copy of every row's recurrent cell out per rollback
(and in, for rows that dropped tokens), and a decode of the kept tokens through the whole model
(attention, MLP and experts included) for those rows. The transformers backend replays only the
linear layers' state update from logged layer inputs instead (`hf_recurrent`).

*Snapshots* (`Snapshots`, llama.cpp's experimental `n_rs_seq`, on qwen35 and qwen35moe): a context
made with `n_rs_seq = S` keeps, besides each row's current recurrent state, its states after each of
the last min(n, S + 1) tokens of the row's last decode of n tokens, and `llama_memory_seq_rm(seq,
keep, -1)` then points the row at one of them instead of refusing. A rollback of d tokens is served
so only when 1 <= d <= min(n - 1, S): the state before a decode's first token is not kept, and
llama.cpp does not check it: asked to drop the one token of a 1-token decode, or tokens of an
earlier decode, it answers `true` and the next decode reads a stale state (checked: logits off by 3
on the hybrid zoo). So `Snapshots` counts each row's tokens in its last decode and only asks for
what they cover, once per decode (a second rollback before the next decode is refused by llama.cpp
too). A verify block of 1 + gamma tokens that drops at most gamma is always covered; a draft model
fed one token per decode never is. Rows a snapshot cannot serve fall back to their checkpoint, so
the checkpoints stay, but move less: a row a snapshot served keeps its checkpoint (its log loses
the dropped tokens) until the log passes `LOG_CAPACITY`, since its next rollbacks will be served
too; every other row is checkpointed after a rollback as before (a draft model's next rollback
falls back again, and a short log keeps its re-decode short). Plain decoding, which never rolls
back, leaves the log to grow; a later rollback then decodes more again, but stays exact.
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


ROLLBACK_METHODS = ("auto", "snapshots", "checkpoints")  # the backend's `recurrent_rollback` option


class Snapshots:
    """Which rows llama.cpp's per-position recurrent snapshots (`n_rs_seq` = depth) can roll back now:
    a row's tokens in its last decode, and whether that decode was rolled back already."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._fed: list[int] = []  # each row's tokens in its last decode; 0 once rolled back

    def begin(self, rows: int) -> None:
        self._fed = [0] * rows

    def record(self, entries: Sequence[tuple[int, int]]) -> None:
        """(row, token) pairs of one decode: each row present now has its snapshots from it."""
        counts: dict[int, int] = {}
        for row, _ in entries:
            counts[row] = counts.get(row, 0) + 1
        for row, count in counts.items():
            self._fed[row] = count

    def covers(self, row: int, drop: int) -> bool:
        return 1 <= drop <= min(self._fed[row] - 1, self.depth)

    def used(self, row: int) -> None:
        self._fed[row] = 0  # the snapshots of this decode are spent: llama.cpp takes one rollback

    def retain(self, rows: Sequence[int]) -> None:
        self._fed = [self._fed[r] for r in rows]


class RecurrentCheckpoints:
    """One checkpoint (recurrent cell bytes, length) and one token log per live row, and llama.cpp's
    snapshots in front of them when the context keeps some (`snapshots`)."""

    def __init__(self, lib, snapshots: Snapshots | None = None) -> None:
        self._lib = lib
        self._flags = lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        self.snapshots = snapshots
        self.seconds = 0.0  # checkpoints, restores and re-decodes, summed over the backend's life
        self.redecode_s = 0.0  # of which decoding kept tokens again (the rest is copying states)
        self.by_snapshot = 0  # row rollbacks a snapshot served, over the backend's life
        self.by_checkpoint = 0  # row rollbacks that restored a checkpoint and decoded again
        self._saved: list[Saved] = []  # each row's recurrent cell at its checkpoint
        self._at: list[int] = []  # each row's length at its checkpoint
        self._log: list[list[int]] = []  # tokens each row was fed since its checkpoint

    @property
    def method(self) -> str:
        """How rows are rolled back: "snapshots" (checkpoints where they cannot) or "checkpoints"."""
        return "checkpoints" if self.snapshots is None else "snapshots"

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
        if self.snapshots is not None:  # only after prefill: its decodes are taken to cover none
            self.snapshots.begin(len(seqs))

    def clear(self) -> None:
        """A new batch is being prefilled: nothing is logged until `begin` checkpoints it."""
        self._saved, self._at, self._log = [], [], []

    def record(self, entries: Sequence[tuple[int, int]]) -> None:
        """(row, token) pairs of one decode llama.cpp has just taken, in order (none before `begin`)."""
        if not self._log:
            return
        for row, token in entries:
            self._log[row].append(token)
        if self.snapshots is not None:
            self.snapshots.record(entries)

    def reserve(self, ctx, seqs: Sequence[int], lengths: Sequence[int], t: int) -> None:
        """t tokens per row follow: rows whose log would pass the capacity are checkpointed now
        (without snapshots; with them a checkpoint moves only in `rollback`, where every row holds
        what its caller keeps: a draft model's cache may hold proposals here that it drops later)."""
        if self.snapshots is not None:
            return
        self.checkpoint(
            ctx, seqs, lengths, [r for r in range(len(seqs)) if len(self._log[r]) + t > LOG_CAPACITY]
        )

    def checkpoint(self, ctx, seqs: Sequence[int], lengths: Sequence[int], rows: Sequence[int]) -> None:
        """Move these rows' checkpoints to where they stand."""
        for row in rows:
            self._saved[row] = self.save(ctx, seqs[row], self._saved[row])
            self._at[row] = lengths[row]
            self._log[row] = []

    def rollback(
        self, ctx, memory, seqs: Sequence[int], lengths: list[int], keep: Sequence[int], feed
    ) -> None:
        """Row r goes back to keep[r] tokens: rows a snapshot covers step back to it (their logs lose
        the dropped tokens); other rows that drop some are rewound to their checkpoint and
        `feed(entries)` decodes their kept tokens again (one llama_decode for all of them, no
        outputs). Then every row is checkpointed where it stands, but, with snapshots, the rows
        that stepped back (unless their log passed the capacity) and those with nothing logged.
        `lengths` is the backend's list of cached lengths, which `step_back`, `rewind` and `feed`
        update."""
        with self.timed():
            kept = [min(k, n) for k, n in zip(keep, lengths, strict=True)]
            stepped = self.step_back(memory, seqs, lengths, kept)
            for row in stepped:
                self._log[row] = self._log[row][: kept[row] - self._at[row]]
            self.by_checkpoint += sum(k < n for k, n in zip(kept, lengths, strict=True))
            again = self.rewind(ctx, memory, seqs, lengths, kept)
            start = time.perf_counter()
            feed(again)
            self.redecode_s += time.perf_counter() - start
            if self.snapshots is None:
                self.begin(ctx, seqs, kept)
                return
            # a row a snapshot served needs no checkpoint (its next rollbacks are served too); any
            # other row falls back again next time, so its checkpoint moves up to keep that short
            moved = [
                r for r, log in enumerate(self._log) if (len(log) > LOG_CAPACITY if r in stepped else log)
            ]
            self.checkpoint(ctx, seqs, kept, moved)

    def step_back(self, memory, seqs: Sequence[int], lengths: list[int], kept: Sequence[int]) -> set[int]:
        """The rows whose dropped tokens a snapshot covers, rolled back by `llama_memory_seq_rm`
        (lengths updated in place)."""
        stepped: set[int] = set()
        if self.snapshots is None:
            return stepped
        for row, seq in enumerate(seqs):
            drop = lengths[row] - kept[row]
            if self.snapshots.covers(row, drop) and self._lib.llama_memory_seq_rm(memory, seq, kept[row], -1):
                self.snapshots.used(row)
                lengths[row] = kept[row]
                stepped.add(row)
        self.by_snapshot += len(stepped)
        return stepped

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
        if self.snapshots is not None:
            self.snapshots.retain(rows)

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
