"""What a decode run records: raw per-round, per-sequence counts and times. Scalars are derived in
`specmoe.metrics`, never stored here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RoundRecord:
    """One draft-then-verify round (or one autoregressive step) over the live rows of the batch.

    Count tuples have one entry per live row, in the order of `rows` (original sequence indices).
    Times are seconds of wall clock, read after a device synchronise.
    """

    rows: tuple[int, ...]
    drafted: tuple[int, ...]  # proposals verified this round (0 for an autoregressive step)
    accepted: tuple[int, ...]  # leading proposals the verifier kept
    emitted: tuple[int, ...]  # tokens appended to the output (accepted + 1, less any truncation)
    draft_s: float  # the drafter's propose call: its forwards and its own sampling
    verify_s: float  # the target's forward over the block
    overhead_s: float  # the rest of the round: acceptance, bookkeeping, KV cache rollback
    # Rolling linear-attention state back to the committed tokens (hybrid models, target and draft;
    # `backends.hf_recurrent`), taken out of draft_s and overhead_s where it happened; 0 otherwise.
    state_s: float = 0.0


@dataclass(frozen=True)
class SequenceOutput:
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]  # generated tokens only
    finish_reason: str  # "eos" or "length"
    truncated: int  # committed tokens dropped after EOS or past max_new_tokens


@dataclass(frozen=True)
class DecodeResult:
    """Everything one `decode` call produced, for the whole batch."""

    outputs: tuple[SequenceOutput, ...]
    rounds: tuple[RoundRecord, ...]
    gamma: int  # 0 for autoregressive decoding
    prefill_s: float  # prompt processing by the target (and drafter), before the first round
    decode_s: float  # first round start to last round end, less compile_s
    compile_s: float = 0.0  # compiling new shapes during decode (compiled backends only), excluded

    @property
    def wall_s(self) -> float:
        return self.prefill_s + self.decode_s
