"""Drafting with a llama.cpp target's own MTP layer (`--draft mtp` on a .gguf target).

Shape legend: B live rows, G proposals per row (gamma), V vocabulary, H hidden size.

The MTP layer runs in llama.cpp's MTP context on the target's model (`backends.llamacpp_mtp`). Its
KV cache holds, for every row, one entry per committed position p: the token x_p paired with the
target's final hidden state at p - 1 (zeros at p = 0), as llama-server's `draft-mtp` keeps it
(common/speculative.cpp). The target hands those hidden states over through the decode loop's
verify -> draft hand-off (`Verified.hidden`, the backend's `HiddenAccess.FINAL`), so this drafter
needs nothing from the target beyond the protocol and the MTP context it opens on the same model.

One row between rounds: n committed tokens; the target has computed positions 0..n-2 (all but the
last), so its hidden states h_0..h_{n-2} are known; the MTP cache holds positions 0..m-1 and the
entries m..n-1 wait (`pending`: their hidden states, h_{m-1}..h_{n-2}). A round:

- propose: the first decode feeds every row's pending entries, the last with an output: logits for
  x_n (the first proposal) and the MTP's own hidden state h'; each further step feeds the proposal
  just made with the h' of the step before (recursive drafting, as llama.cpp and vLLM do), G
  single-entry decodes per row in all. Then the proposals' entries (positions n..n+G-2, built on
  the MTP's own hidden states) are dropped: the cache holds positions 0..n-1, all built on the
  target's.
- feedback: the verify pass kept a of the G proposals; its hidden states at block positions 0..a
  (positions n-1..n-1+a) pair with the committed tokens at n..n+a, so they become the next
  round's pending entries. llama-server decodes the whole verify block into the MTP cache right
  away and drops the rejected part; feeding the kept part with the next first step gives the same
  cache with one decode fewer per round.

The MTP layer keeps no recurrent state, only that KV cache, so its rollback is one
`llama_memory_seq_rm` per row (`state_s`: the seconds it takes), whichever way the target rolls back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from specmoe.backends.base import Backend
from specmoe.backends.llamacpp_mtp import Entry
from specmoe.decoding.drafters import Drafter, DrafterBase, Proposal, Verified
from specmoe.decoding.sampling import pick
from specmoe.errors import SpecmoeError


class LlamaCppMtpDrafter(DrafterBase):
    """Proposals from a llama.cpp target's MTP layer (see the module docstring)."""

    def __init__(self, target) -> None:
        self._mtp = target.mtp_context()  # refuses in one line without an MTP layer
        self.vocab_size = target.vocab_size
        self.vocab_digest = target.vocab_digest  # the target's own vocabulary
        self.max_context = target.max_context
        self.hidden_layers = (target.num_layers,)  # the final hidden state (HiddenAccess.FINAL)
        self._seq: list[int] = []  # MTP sequence id of each live row
        self._cached: list[int] = []  # m: positions in the row's MTP cache
        self._pending: list[list[np.ndarray]] = []  # hidden states [H] of entries m..n-1
        self._rollback_s = 0.0

    @property
    def state_s(self) -> float:
        return self._rollback_s

    def begin(self, prompts: Sequence[Sequence[int]], hidden: torch.Tensor | None) -> None:
        """Prefill the MTP cache with each prompt's entries 0..n-2 (hidden: [B, W, 1, H], the target's
        over every prompt but its last token, right-aligned); entry n-1 waits for the first round."""
        if hidden is None:
            raise RuntimeError("the MTP drafter was started without the target's hidden states")
        self._mtp.reset(len(prompts))
        self._seq = list(range(len(prompts)))
        width = hidden.shape[1]
        states = hidden[:, :, 0].float().numpy()  # [B, W, H]
        zeros = np.zeros(self._mtp.width, np.float32)
        self._pending, self._cached, entries = [], [], []
        for row, prompt in enumerate(prompts):
            n = len(prompt)
            shifted = [zeros, *states[row, width - (n - 1) :]]  # h_{p-1} for p = 0..n-1
            entries += [Entry(row, p, prompt[p], shifted[p], False) for p in range(n - 1)]
            self._cached.append(n - 1)
            self._pending.append([shifted[n - 1]])
        if entries:
            self._mtp.decode(entries)

    def propose(self, sequences, gamma, params, generator) -> Proposal:
        entries = []
        for row, sequence in enumerate(sequences):
            start, states = self._cached[row], self._pending[row]
            if start + len(states) != len(sequence):
                raise RuntimeError(
                    f"MTP cache out of step with row {row}: {start} cached + {len(states)} pending, "
                    f"{len(sequence)} committed"
                )
            entries += [
                Entry(self._seq[row], start + k, sequence[start + k], h, k == len(states) - 1)
                for k, h in enumerate(states)
            ]
        tokens, probs = [], []
        for step in range(gamma):
            logits, own = self._mtp.decode(entries)  # [B, V], [B, H]
            token, prob = pick(torch.from_numpy(logits), params, generator)  # [B], [B, V] or None
            tokens.append(token)
            probs.append(prob)
            chosen = token.tolist()
            entries = [
                Entry(self._seq[row], len(s) + step, chosen[row], own[row], True)
                for row, s in enumerate(sequences)
            ]
        self._forget_proposals(sequences)
        return Proposal(torch.stack(tokens, 1), None if params.greedy else torch.stack(probs, 1))

    def feedback(self, verified: Verified) -> None:
        if verified.hidden is None:
            raise RuntimeError("the MTP drafter was given no hidden states of the verify pass")
        states = verified.hidden[:, :, 0].float().numpy()  # [B, 1 + G, H]
        self._pending = [list(states[row, : a + 1]) for row, a in enumerate(verified.accepted)]

    def retain(self, rows: Sequence[int]) -> None:
        for row in set(range(len(self._seq))) - set(rows):
            self._mtp.drop(self._seq[row], 0)
        self._seq = [self._seq[r] for r in rows]
        self._cached = [self._cached[r] for r in rows]
        self._pending = [self._pending[r] for r in rows]

    def synchronize(self) -> None:
        self._mtp.synchronize()

    def _forget_proposals(self, sequences) -> None:
        """Drop the entries built on the MTP's own hidden states (positions >= n): the cache keeps
        positions 0..n-1, all paired with the target's."""
        start = time.perf_counter()
        for row, sequence in enumerate(sequences):
            self._mtp.drop(self._seq[row], len(sequence))
            self._cached[row] = len(sequence)
        self._pending = [[] for _ in sequences]
        self._rollback_s += time.perf_counter() - start


def llamacpp_mtp_drafter(target: Backend) -> Drafter:
    """The drafter for `--draft mtp` on a llama.cpp target (a .gguf path as --target).

    make_drafter calls it with the loaded target backend when the typed draft kind is `mtp` and the
    target is a `LlamaCppBackend`: `drafter = llamacpp_mtp_drafter(target)`, then
    `decode(target, prompts, config, drafter)`; one drafter per decode (its MTP cache follows one
    batch). It refuses, in one line, a target that is not a llama.cpp backend, a GGUF without an MTP
    layer, and a llama.cpp that cannot run one."""
    from specmoe.backends.llamacpp import LlamaCppBackend

    if not isinstance(target, LlamaCppBackend):
        raise SpecmoeError(
            "this MTP drafter runs llama.cpp's MTP context and needs a .gguf target; for a Hugging Face "
            "target use the transformers MTP drafter"
        )
    return LlamaCppMtpDrafter(target)
