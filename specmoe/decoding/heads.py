"""A head drafter: an MTP module or an EAGLE-3 head drafting from the target's hidden states.

Shape legend: B live rows, G proposals per row (gamma), V vocabulary, K target hidden-state layers,
Ht the target's hidden size, H the head's, E = 2H its input vectors (`backends.hf_heads`).

The head's cache position i holds the pair (state_i, x_{i+1}) and predicts x_{i+2}. A position is
*exact* when its state is the target's own (features of the hidden states the verify pass handed
over); only exact positions stay in the head's cache between rounds. A round:

1. propose: feed every row's *pending* exact pairs (the ones the last verify pass made: a + 1 of
   them after a row kept a proposals, the last being (h, the committed next token)) in one block;
   rows with fewer pending pairs than the widest are padded after their own with throwaway pairs,
   which no real pair attends to (they come later) and which are dropped right after. The last
   real pair's logits give proposal 1. Each of proposals 2..G feeds one pair (the head's own state
   at the position before, the proposal before), as vLLM runs MTP and EAGLE-3 heads. G forwards;
2. feedback: the drafted positions (G - 1 of them, whose states were the head's guesses) are rolled
   back, and the verify pass's kept positions become the next round's pending pairs.

At `begin` the target's prefill hidden states give every prompt position but the last two an exact
pair, prefilled into the head's cache; the last pair is pending. A one-token prompt has no target
hidden state to read before its first verify pass: its first round drafts from a zero state (any
proposal is safe: the verifier decides), and that position is dropped with the drafted ones.

Cost per round: G forwards of one decoder layer plus the LM head (the first over at most G + 1
positions), and the fusion of the target's hidden states (an EAGLE-3 head's fc over 3 Ht).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from specmoe.backends.hf_heads import STATE_LAYER, Head
from specmoe.backends.slots import to_device
from specmoe.decoding.drafters import DrafterBase, Proposal, Verified
from specmoe.decoding.sampling import pick

if TYPE_CHECKING:
    from specmoe.backends.hf_head_runtime import HeadBackend


class HeadDrafter(DrafterBase):
    """Drafts with a head (`Head`) run by its own backend beside the target."""

    def __init__(self, head: Head, backend: HeadBackend, vocab_size: int, max_context: int) -> None:
        self.head = head
        self.backend = backend
        self.backend.capture_hidden((STATE_LAYER,))
        self.vocab_size = vocab_size  # the target's: the head's logits cover it
        self.max_context = max_context
        self.hidden_layers = head.hidden_layers
        self.tokenizer_digest = head.tokenizer_digest
        self._exact: list[int] = []  # exact positions in the head's cache, per row
        self._pending: torch.Tensor | None = None  # [B, P, E] pending pairs, left-aligned
        self._count: list[int] = []  # real pending pairs per row (0: a zero-state pair stands in)
        self._proposed: torch.Tensor | None = None  # [B, G] the last proposal
        self._verified: Verified | None = None  # what the last verify pass decided, not yet fed

    @property
    def compile_s(self) -> float:
        return self.backend.compile_s

    def reserve(self, tokens: int) -> None:
        self.backend.reserve(tokens)

    @torch.inference_mode()
    def begin(self, prompts: Sequence[Sequence[int]], hidden: torch.Tensor | None) -> None:
        assert hidden is not None  # decode hands a drafter with hidden_layers the target's
        width, device = hidden.shape[1], hidden.device  # hidden [B, W, K, Ht], right-aligned
        following = np.zeros((len(prompts), width), dtype=np.int64)  # [B, W] x_{i+1} beside h_i
        for row, prompt in enumerate(prompts):
            following[row, width - (len(prompt) - 1) :] = prompt[1:]
        pairs = self._pairs(self.head.features(hidden), to_device(following, device))  # [B, W, E]
        counts = [len(p) - 1 for p in prompts]  # exact pairs per row
        self.backend.prefill_embeds([pairs[r, width - n : width - 1] for r, n in enumerate(counts)])
        self._exact = [max(n - 1, 0) for n in counts]
        zero = torch.zeros(
            len(prompts), 1, self.head.embed.weight.shape[1], dtype=hidden.dtype, device=device
        )
        stand_in = self._pairs(zero, to_device([[p[-1]] for p in prompts], device))  # [B, 1, E]
        has_pair = to_device([n > 0 for n in counts], device)[:, None, None]
        self._pending = torch.where(has_pair, pairs[:, -1:], stand_in) if width else stand_in
        self._count = [min(n, 1) for n in counts]
        self._proposed = self._verified = None

    @torch.inference_mode()
    def propose(self, sequences, gamma: int, params, generator) -> Proposal:
        if self._verified is not None:
            self._take_verified()
        fed = [max(n, 1) for n in self._count]  # a stand-in pair is fed like a real one
        rows = torch.arange(len(fed), device=self._pending.device)
        last = to_device([n - 1 for n in fed], self._pending.device)  # [B]
        logits = self.backend.forward_embeds(self._pending)[rows, last]  # [B, V]
        state = self.backend.hidden()[rows, last, 0]  # [B, H]
        self.backend.rollback([e + n for e, n in zip(self._exact, fed, strict=True)])  # the padding
        self._exact = [e + n for e, n in zip(self._exact, self._count, strict=True)]
        tokens, probs = [], []
        for step in range(gamma):
            token, prob = pick(logits, params, generator)
            tokens.append(token)
            probs.append(prob)
            if step + 1 < gamma:
                logits = self.backend.forward_embeds(self._pairs(state[:, None], token[:, None]))[:, -1]
                state = self.backend.hidden()[:, -1, 0]
        self._proposed = torch.stack(tokens, 1)  # [B, G]
        return Proposal(self._proposed, None if params.greedy else torch.stack(probs, 1))  # probs [B, G, V]

    @torch.inference_mode()
    def feedback(self, verified: Verified) -> None:
        # Drafted positions (and a stand-in pair) held guessed states: only exact ones stay.
        self.backend.rollback(self._exact)
        self._verified = verified  # its pairs are made when the next round drafts (draft time)

    def retain(self, rows: Sequence[int]) -> None:
        self.backend.retain(rows)
        index = to_device(list(rows), self._pending.device)
        self._exact = [self._exact[r] for r in rows]
        self._count = [self._count[r] for r in rows]
        self._pending = self._pending[index]
        self._proposed = None if self._proposed is None else self._proposed[index]
        if self._verified is not None:
            verified = self._verified
            self._verified = Verified(
                tuple(verified.accepted[r] for r in rows),
                tuple(verified.next_token[r] for r in rows),
                None if verified.hidden is None else verified.hidden[index],
            )

    def synchronize(self) -> None:
        self.backend.synchronize()

    def _take_verified(self) -> None:
        """The last verify pass's kept positions as pending pairs: position j of the block holds the
        target's h and, beside it, the token after it: proposal j + 1 while j < accepted, then the
        committed next token."""
        verified, proposed = self._verified, self._proposed
        self._verified = None
        assert verified.hidden is not None and proposed is not None
        device = proposed.device
        accepted = to_device(list(verified.accepted), device)  # [B]
        following = torch.cat([proposed, proposed[:, -1:]], 1)  # [B, 1 + G]; past a row's kept ones: unused
        following[torch.arange(len(accepted), device=device), accepted] = to_device(
            list(verified.next_token), device
        )
        width = max(verified.accepted) + 1
        pairs = self._pairs(self.head.features(verified.hidden[:, :width]), following[:, :width])
        self._pending, self._count = pairs, [a + 1 for a in verified.accepted]  # pairs [B, width, E]

    def _pairs(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Input vectors [..., E]: each state ([..., H]) beside its token's embedding (tokens [...])."""
        return torch.cat([states, self.head.embed(tokens).to(states.dtype)], -1)
