"""Prompt-lookup (n-gram) drafting: propose what followed the last time the text read like this.

For each live sequence (prompt + committed tokens, L tokens), the drafter takes its last n tokens,
for n from max_n down to min_n, and looks for the most recent *earlier* occurrence of them: one
that ends at some position e < L, so at least one token follows it. The first (longest) n that
matches wins, and the proposal is the gamma tokens that followed, text[e : e + gamma].

Padding rule: when the match ends fewer than gamma tokens before the end (e + gamma > L), the
copy runs on into its own proposals, as LZ77 copies do: proposal[i] = (text + proposal)[e + i].
A match at distance d = L - e says the text repeats with period d, and this is what that repetition
predicts (x y x y -> x y x y ...). When nothing matches, the proposal repeats the last token (the
same rule with e = L - 1). Every row therefore gets exactly gamma proposals, so the block stays
rectangular and `drafted` is gamma per row per round as the audit expects; a wrong proposal is just
rejected.

Proposals carry no distribution (`Proposal.probs` is None): the verifier treats each as a point
mass, which keeps sampling lossless. The index only reads committed tokens, which never change, so
feedback needs no rollback; each round indexes only the tokens committed since the last one,
(max_n - min_n + 1) dictionary writes per token, and a lookup costs max_n - min_n + 1 probes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specmoe.backends.base import Backend
from specmoe.backends.slots import to_device
from specmoe.decoding.drafters import DrafterBase, Proposal, Verified
from specmoe.decoding.sampling import SamplingParams
from specmoe.drafts import DEFAULT_MAX_N, DEFAULT_MIN_N
from specmoe.errors import SpecmoeError


def check_ngram_sizes(min_n: int, max_n: int) -> None:
    if not 1 <= min_n <= max_n:
        raise SpecmoeError(
            f"n-gram sizes need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}; e.g. min_n=1, max_n=3"
        )


def copy_from(tokens: Sequence[int], start: int, gamma: int) -> list[int]:
    """gamma tokens copied from tokens[start:], running on into the copy itself past the end."""
    out = list(tokens[start : start + gamma])
    period = len(tokens) - start  # >= 1: start is before the end
    while len(out) < gamma:
        out.append(out[len(out) - period])
    return out


def ngram_proposal(tokens: Sequence[int], gamma: int, min_n: int = 1, max_n: int = 3) -> list[int]:
    """The proposal for one sequence, by a plain backwards scan: the specification `NgramIndex` keeps
    incrementally (O(L * max_n) per call; the index is O(max_n) per call plus O(max_n) per new token)."""
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = list(tokens[length - n :])
        for end in range(length - 1, n - 1, -1):  # most recent first; end < length
            if list(tokens[end - n : end]) == suffix:
                return copy_from(tokens, end, gamma)
    return copy_from(tokens, length - 1, gamma)


class NgramIndex:
    """Where each n-gram of one growing sequence last ended, for n in [min_n, max_n].

    Only n-grams that end before the sequence's last token are indexed (end <= L - 1), so the
    sequence's own suffix never matches itself and every match has a continuation.
    """

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n, self.max_n = min_n, max_n
        self._last_end: dict[tuple[int, ...], int] = {}  # n-gram -> largest end position (exclusive)
        self._indexed = 0  # ends 0..(_indexed - 1) are in the table

    def extend(self, tokens: Sequence[int]) -> None:
        """Index the n-grams of tokens that end at positions up to len(tokens) - 1 (exclusive ends,
        so none contains the last token) and are not indexed yet."""
        for end in range(self._indexed, len(tokens)):
            for n in range(self.min_n, min(self.max_n, end) + 1):
                self._last_end[tuple(tokens[end - n : end])] = end
        self._indexed = max(self._indexed, len(tokens))

    def propose(self, tokens: Sequence[int], gamma: int) -> list[int]:
        """gamma proposals for tokens, which must extend the tokens this index last saw."""
        self.extend(tokens)
        length = len(tokens)
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            end = self._last_end.get(tuple(tokens[length - n :]))
            if end is not None:
                return copy_from(tokens, end, gamma)
        return copy_from(tokens, length - 1, gamma)


class NgramDrafter(DrafterBase):
    """Prompt-lookup drafting (see the module docstring); vocab_size, max_context and device come
    from the target, since the drafter has no model of its own."""

    def __init__(self, target: Backend, min_n: int = DEFAULT_MIN_N, max_n: int = DEFAULT_MAX_N) -> None:
        check_ngram_sizes(min_n, max_n)
        self.vocab_size = target.vocab_size
        self.max_context = target.max_context
        self.device = target.device
        self.min_n, self.max_n = min_n, max_n
        self._rows: list[NgramIndex] = []

    def begin(self, prompts: Sequence[Sequence[int]], hidden: torch.Tensor | None = None) -> None:
        # Indexing the prompts here puts that work in prefill time, as a draft model's prefill is.
        self._rows = [NgramIndex(self.min_n, self.max_n) for _ in prompts]
        for index, prompt in zip(self._rows, prompts, strict=True):
            index.extend(prompt)

    def propose(
        self,
        sequences: Sequence[Sequence[int]],
        gamma: int,
        params: SamplingParams,
        generator: torch.Generator | None,
    ) -> Proposal:
        rows = [index.propose(seq, gamma) for index, seq in zip(self._rows, sequences, strict=True)]
        return Proposal(to_device(rows, self.device), None)  # tokens [B, G]

    def feedback(self, verified: Verified) -> None:
        """Nothing to undo: only committed tokens were ever indexed."""

    def retain(self, rows: Sequence[int]) -> None:
        self._rows = [self._rows[r] for r in rows]
