"""The decode loops: draft-then-verify and plain autoregressive, through the same backend calls.

Both arms share prefill, commit, truncation and clocks, so their timings differ only by what the
algorithm does. The target's cache always holds every committed token but the last one; each round
feeds [last committed token, proposals...] and keeps what was accepted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from specmoe.backends.base import Backend
from specmoe.backends.slots import to_device
from specmoe.backends.tokenizer_digest import tokenizer_mismatch
from specmoe.engine.acceptance import greedy_accept, rejection_accept
from specmoe.engine.drafters import Drafter
from specmoe.engine.records import DecodeResult, RoundRecord, SequenceOutput
from specmoe.engine.sampling import SamplingParams, pick, probabilities
from specmoe.errors import SpecmoeError


@dataclass(frozen=True)
class DecodeConfig:
    max_new_tokens: int = 64
    gamma: int = 4  # proposals per round; ignored without a drafter
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    ignore_eos: bool = False  # benchmarks decode a fixed number of tokens, as llama-bench does


def decode(
    target: Backend,
    prompts: Sequence[Sequence[int]],
    config: DecodeConfig,
    drafter: Drafter | None = None,
) -> DecodeResult:
    """Decode a batch of prompts (token ids) with the target, speculatively when a drafter is given."""
    _validate(target, prompts, config, drafter)
    gamma = config.gamma if drafter is not None else 0
    generator = torch.Generator(device=target.device).manual_seed(config.seed)
    eos = frozenset() if config.ignore_eos else target.eos_token_ids

    horizon = max(len(p) for p in prompts) + config.max_new_tokens + gamma + 1  # tokens a row may reach
    start = time.perf_counter()
    _reserve(target, horizon)
    target.prefill([p[:-1] for p in prompts])
    if drafter is not None:
        _reserve(drafter, horizon)
        drafter.begin(prompts)
        drafter.synchronize()
    target.synchronize()
    prefill_s = time.perf_counter() - start

    batch = _Batch(prompts, config.max_new_tokens, eos)
    rounds: list[RoundRecord] = []
    compile_total = 0.0
    decode_start = time.perf_counter()
    while batch.live:
        round_start = time.perf_counter()
        draft_state, target_state = _state_s(drafter), _state_s(target)
        draft_compile = _compile_s(drafter)
        if drafter is not None:
            proposal = drafter.propose(batch.live_sequences(), gamma, config.sampling, generator)
            drafter.synchronize()
        draft_end = time.perf_counter()
        draft_compile = _compile_s(drafter) - draft_compile
        draft_state = _state_s(drafter) - draft_state
        verify_compile = _compile_s(target)
        verify_state = _state_s(target)

        last = to_device([[s[-1]] for s in batch.live_sequences()], target.device)  # [B, 1]
        block = last if drafter is None else torch.cat([last, proposal.tokens], 1)  # [B, 1 + G]
        logits = target.forward(block)  # [B, 1 + G, V]
        target.synchronize()
        verify_end = time.perf_counter()
        verify_compile = _compile_s(target) - verify_compile
        verify_state = _state_s(target) - verify_state  # a checkpoint made to log a long block

        if drafter is None:
            next_token = pick(logits[:, 0], config.sampling, generator)[0].tolist()  # [B]
            accepted = [0] * len(batch.live)
            proposed: list[list[int]] = [[] for _ in batch.live]
        else:
            accepted, next_token, proposed = _verify(proposal, logits, config.sampling, generator)
        rows = tuple(batch.live)
        emitted = batch.commit(proposed, accepted, next_token)
        if drafter is not None:
            target.rollback([len(s) - 1 for s in batch.live_sequences()])
            drafter.feedback(accepted)
        keep = batch.drop_finished()
        if keep is not None:
            target.retain(keep)
            if drafter is not None:
                drafter.retain(keep)
        round_end = time.perf_counter()
        target_state = _state_s(target) - target_state
        # Compiling a new shape is a one-off cost, reported apart and kept out of every decode time.
        compile_total += draft_compile + verify_compile
        # The round's seconds are draft_s + verify_s + state_s + overhead_s exactly.
        round_s = round_end - round_start - draft_compile - verify_compile
        draft_s = draft_end - round_start - draft_compile - draft_state
        verify_s = verify_end - draft_end - verify_compile - verify_state
        state_s = draft_state + target_state
        rounds.append(
            RoundRecord(
                rows=rows,
                drafted=(gamma,) * len(rows),
                accepted=tuple(accepted),
                emitted=tuple(emitted),
                draft_s=draft_s,
                verify_s=verify_s,
                overhead_s=round_s - draft_s - verify_s - state_s,
                state_s=state_s,
            )
        )
    decode_s = time.perf_counter() - decode_start - compile_total
    return DecodeResult(batch.outputs(), tuple(rounds), gamma, prefill_s, decode_s, compile_total)


def _reserve(part: Backend | Drafter, tokens: int) -> None:
    """Tell a backend that sizes its cache ahead (the compiled path), or a drafter's, how long a
    row may get, so it compiles its graphs for one cache size; others have no `reserve`."""
    reserve = getattr(part, "reserve", None)
    if reserve is not None:
        reserve(tokens)


def _compile_s(part: Backend | Drafter | None) -> float:
    """Seconds a backend (or a drafter's backend) has spent compiling shapes; 0 for eager ones."""
    return getattr(part, "compile_s", 0.0) if part is not None else 0.0


def _state_s(part: Backend | Drafter | None) -> float:
    """Seconds a backend (or a drafter's backend) has spent rolling back linear-attention state;
    0 for models without any."""
    return getattr(part, "state_s", 0.0) if part is not None else 0.0


def _verify(proposal, logits: torch.Tensor, params: SamplingParams, generator):
    """Apply the acceptance rule to a verified block (logits [B, G + 1, V]) and bring what the host
    needs back in one read: (accepted [B], next token [B], proposals [B][G]) as lists."""
    if params.greedy:
        accepted, next_token = greedy_accept(proposal.tokens, logits.argmax(-1))
    else:
        target_probs = probabilities(logits, params)
        accepted, next_token = rejection_accept(proposal.tokens, proposal.probs, target_probs, generator)
    rows = torch.cat([accepted[:, None], next_token[:, None], proposal.tokens], 1).tolist()  # [B, 2 + G]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2:] for r in rows]


class _Batch:
    """Committed tokens of every sequence, which ones are still running, and why others stopped."""

    def __init__(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos: frozenset[int]) -> None:
        self.sequences = [list(p) for p in prompts]
        self.prompt_lengths = [len(p) for p in prompts]
        self.live = list(range(len(prompts)))  # original indices of running sequences
        self.max_new_tokens = max_new_tokens
        self.eos = eos
        self.finish = [""] * len(prompts)
        self.truncated = [0] * len(prompts)
        self._finished_now: list[int] = []

    def live_sequences(self) -> list[list[int]]:
        return [self.sequences[i] for i in self.live]

    def commit(self, proposed: list[list[int]], accepted: list[int], next_token: list[int]) -> list[int]:
        """Append each row's accepted proposals and next token, stopping at EOS or the token budget."""
        emitted = []
        for row, seq_index in enumerate(self.live):
            new = [*proposed[row][: accepted[row]], next_token[row]]
            seq = self.sequences[seq_index]
            room = self.max_new_tokens - (len(seq) - self.prompt_lengths[seq_index])
            count = 0
            for token in new[:room]:
                seq.append(token)
                count += 1
                if token in self.eos:
                    self.finish[seq_index] = "eos"
                    break
            if not self.finish[seq_index] and count == room:
                self.finish[seq_index] = "length"
            if self.finish[seq_index]:
                self.truncated[seq_index] = len(new) - count
            emitted.append(count)
        return emitted

    def drop_finished(self) -> list[int] | None:
        """Remove finished rows; return the live-row positions to keep, or None if all continue."""
        keep = [row for row, i in enumerate(self.live) if not self.finish[i]]
        if len(keep) == len(self.live):
            return None
        self.live = [self.live[row] for row in keep]
        return keep if self.live else None

    def outputs(self) -> tuple[SequenceOutput, ...]:
        return tuple(
            SequenceOutput(
                prompt_ids=tuple(seq[:n]),
                token_ids=tuple(seq[n:]),
                finish_reason=self.finish[i],
                truncated=self.truncated[i],
            )
            for i, (seq, n) in enumerate(zip(self.sequences, self.prompt_lengths, strict=True))
        )


def _validate(target: Backend, prompts, config: DecodeConfig, drafter: Drafter | None) -> None:
    if not prompts:
        raise SpecmoeError("no prompt given; pass at least one --prompt")
    if any(len(p) == 0 for p in prompts):
        raise SpecmoeError("empty prompt: every prompt needs at least one token of text")
    if config.max_new_tokens < 1:
        raise SpecmoeError(f"max_new_tokens must be >= 1, got {config.max_new_tokens}")
    if not -(2**63) <= config.seed < 2**64:  # what torch.Generator.manual_seed accepts
        raise SpecmoeError(
            f"seed {config.seed} does not fit in 64 bits, in the decode config; "
            f"pass a seed from 0 to {2**64 - 1}"
        )
    lookahead = 0
    context = target.max_context
    if drafter is not None:
        if config.gamma < 1:
            raise SpecmoeError(f"gamma must be >= 1 (tokens drafted per round), got {config.gamma}")
        if drafter.vocab_size != target.vocab_size:
            raise SpecmoeError(
                f"draft and target vocabularies differ: draft has {drafter.vocab_size} tokens, target "
                f"{target.vocab_size}; pick a draft from the target's model family"
            )
        # Same size is not same tokens; backends that can fingerprint their vocabulary (llamacpp: a
        # sha256 of every token's text) are compared too.
        digests = (getattr(drafter, "vocab_digest", None), getattr(target, "vocab_digest", None))
        if None not in digests and digests[0] != digests[1]:
            raise SpecmoeError(
                f"draft and target vocabularies differ: both have {target.vocab_size} tokens but not the "
                "same ones; pick a draft from the target's model family"
            )
        # HF models fingerprint their tokenizer.json's id -> token map the same way on both sides.
        mismatch = tokenizer_mismatch(
            getattr(drafter, "tokenizer_digest", None), getattr(target, "tokenizer_digest", None)
        )
        if mismatch:
            raise SpecmoeError(mismatch)
        lookahead = config.gamma
        context = min(context, drafter.max_context)
    longest = max(len(p) for p in prompts)
    if longest + config.max_new_tokens + lookahead > context:
        raise SpecmoeError(
            f"prompt ({longest} tokens) + max_new_tokens ({config.max_new_tokens}) + gamma ({lookahead}) "
            f"exceeds the model's context of {context} tokens; shorten the prompt or lower max_new_tokens"
        )
