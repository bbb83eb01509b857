"""The decode loops: draft-then-verify and plain autoregressive, through the same backend calls.

Both arms share prefill, commit, truncation and clocks, so their timings differ only by what the
algorithm does. The target's cache always holds every committed token but the last one; each round
feeds [last committed token, proposals...] and keeps what was accepted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import torch

from specmoe.backends.base import Backend, check_hidden_layers
from specmoe.backends.slots import to_device
from specmoe.backends.tokenizer_digest import tokenizer_mismatch
from specmoe.decoding.acceptance import greedy_accept, rejection_accept
from specmoe.decoding.clock import RoundClock
from specmoe.decoding.drafters import Drafter, Proposal, Verified
from specmoe.decoding.records import DecodeResult, RoundRecord, SequenceOutput
from specmoe.decoding.sampling import SamplingParams, pick, probabilities
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
    """Decode a batch of prompts (token ids) with the target, speculatively when a drafter is given.

    Each round the drafter proposes γ tokens per live row, the target verifies [last committed token,
    proposals] in one forward, the acceptance rule keeps a prefix and picks the next token, the batch
    commits them, and target and drafter roll back to what was committed. Without a drafter a round
    is one plain step. `RoundClock` splits every round's time into its phases.
    """
    _validate(target, prompts, config, drafter)
    gamma = config.gamma if drafter is not None else 0
    generator = torch.Generator(device=target.device).manual_seed(config.seed)
    horizon = max(len(p) for p in prompts) + config.max_new_tokens + gamma + 1  # tokens a row may reach
    start = time.perf_counter()
    _begin(target, drafter, prompts, horizon)
    prefill_s = time.perf_counter() - start

    batch = _Batch(prompts, config.max_new_tokens, frozenset() if config.ignore_eos else target.eos_token_ids)
    clock = RoundClock(target, drafter)
    rounds: list[RoundRecord] = []
    while batch.live:
        clock.start()
        proposal = None
        if drafter is not None:
            proposal = drafter.propose(batch.live_sequences(), gamma, config.sampling, generator)
        clock.drafted()
        logits = target.forward(_block(batch, proposal, target.device))  # [B, 1 + G, V]
        clock.verified()
        verified, proposed = _accept(proposal, logits, config.sampling, generator)
        rows = tuple(batch.live)
        emitted = batch.commit(proposed, verified.accepted, verified.next_token)
        if drafter is not None:
            verified = _with_hidden(verified, target, drafter)  # before a rollback may decode again
            target.rollback([len(s) - 1 for s in batch.live_sequences()])
            drafter.feedback(verified)
        keep = batch.drop_finished()
        if keep is not None:
            target.retain(keep)
            if drafter is not None:
                drafter.retain(keep)
        times = clock.stop()
        rounds.append(RoundRecord(rows, (gamma,) * len(rows), verified.accepted, emitted, **asdict(times)))
    return DecodeResult(batch.outputs(), tuple(rounds), gamma, prefill_s, clock.decode_s, clock.compile_s)


def _begin(target: Backend, drafter: Drafter | None, prompts: Sequence[Sequence[int]], horizon: int) -> None:
    """Prefill the target with every prompt but its last token, and start the drafter (its prefill),
    handing it the target's hidden states over the prompts when it reads them."""
    target.reserve(horizon)
    target.capture_hidden(drafter.hidden_layers if drafter is not None else ())
    target.prefill([p[:-1] for p in prompts])
    if drafter is not None:
        drafter.reserve(horizon)
        drafter.begin(prompts, target.hidden() if drafter.hidden_layers else None)
        drafter.synchronize()
    target.synchronize()


def _block(batch: _Batch, proposal: Proposal | None, device: torch.device) -> torch.Tensor:
    """The verify block: each live row's last committed token, then its proposals; [B, 1 + G]."""
    last = to_device([[s[-1]] for s in batch.live_sequences()], device)  # [B, 1]
    return last if proposal is None else torch.cat([last, proposal.tokens], 1)


def _accept(
    proposal: Proposal | None, logits: torch.Tensor, params: SamplingParams, generator
) -> tuple[Verified, list[list[int]]]:
    """Apply the acceptance rule to a verified block (logits [B, 1 + G, V]) and bring what the host
    needs back in one read: what was decided, and the proposals [B][G] as lists. Without a proposal
    it is a plain step: the next token is picked from position 0."""
    if proposal is None:
        next_token = pick(logits[:, 0], params, generator)[0].tolist()  # [B]
        return Verified((0,) * len(next_token), tuple(next_token)), [[] for _ in next_token]
    if params.greedy:
        accepted, next_token = greedy_accept(proposal.tokens, logits.argmax(-1))
    else:
        target_probs = probabilities(logits, params)
        accepted, next_token = rejection_accept(proposal.tokens, proposal.probs, target_probs, generator)
    rows = torch.cat([accepted[:, None], next_token[:, None], proposal.tokens], 1).tolist()  # [B, 2 + G]
    return Verified(tuple(r[0] for r in rows), tuple(r[1] for r in rows)), [r[2:] for r in rows]


def _with_hidden(verified: Verified, target: Backend, drafter: Drafter) -> Verified:
    """The verify pass's hidden states added to what it decided, for a drafter that reads them."""
    return replace(verified, hidden=target.hidden()) if drafter.hidden_layers else verified


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

    def commit(
        self, proposed: list[list[int]], accepted: Sequence[int], next_token: Sequence[int]
    ) -> tuple[int, ...]:
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
        return tuple(emitted)

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
    if len(prompts) > 1:  # a left-padded batch: a model that would decode it wrong says so
        for refused in (target.batch_refused, drafter.batch_refused if drafter is not None else None):
            if refused is not None:
                raise SpecmoeError(refused)
    lookahead = 0
    context = target.max_context
    if drafter is not None:
        # Any drafter: the target drops rejected proposals every round, a draft model its own.
        for refused in (target.rollback_refused, drafter.rollback_refused):
            if refused is not None:
                raise SpecmoeError(refused)
        if config.gamma < 1:
            raise SpecmoeError(f"gamma must be >= 1 (tokens drafted per round), got {config.gamma}")
        if drafter.vocab_size != target.vocab_size:
            raise SpecmoeError(
                f"draft and target vocabularies differ: draft has {drafter.vocab_size} tokens, target "
                f"{target.vocab_size}; pick a draft from the target's model family"
            )
        # Same size is not same tokens; backends that can fingerprint their vocabulary (llamacpp: a
        # sha256 of every token's text) are compared too.
        digests = (drafter.vocab_digest, target.vocab_digest)
        if None not in digests and digests[0] != digests[1]:
            raise SpecmoeError(
                f"draft and target vocabularies differ: both have {target.vocab_size} tokens but not the "
                "same ones; pick a draft from the target's model family"
            )
        # HF models fingerprint their tokenizer.json's id -> token map the same way on both sides.
        mismatch = tokenizer_mismatch(drafter.tokenizer_digest, target.tokenizer_digest)
        if mismatch:
            raise SpecmoeError(mismatch)
        check_hidden_layers(target, drafter.hidden_layers)
        lookahead = config.gamma
        context = min(context, drafter.max_context)
    longest = max(len(p) for p in prompts)
    if longest + config.max_new_tokens + lookahead > context:
        raise SpecmoeError(
            f"prompt ({longest} tokens) + max_new_tokens ({config.max_new_tokens}) + gamma ({lookahead}) "
            f"exceeds the model's context of {context} tokens; shorten the prompt or lower max_new_tokens"
        )
