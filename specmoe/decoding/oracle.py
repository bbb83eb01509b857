"""The oracle draft: acceptance dialed to a chosen level, at a real draft model's cost.

It proposes the target's own greedy continuation token with probability p, independently per
position, and a wrong token otherwise, while running a real small model over the proposals so each
round pays true drafting time. Under greedy verification this gives i.i.d. per-token acceptance
p, the assumption behind expected tokens per round (1 - p^(G+1)) / (1 - p), so measured speedup
can be set beside theory for any p in [0, 1] on any target.

The continuation comes from a plain greedy decode of the same prompts by the target, in the same
dtype. In low precision a verify pass can round a near-tie differently from that decode; the oracle
then proposes a stale continuation and measured acceptance falls below p (reported, not hidden).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specmoe.backends.base import Backend
from specmoe.backends.slots import to_device
from specmoe.decoding.drafters import DrafterBase, ModelDrafter, Proposal, Verified
from specmoe.errors import SpecmoeError


class OracleDrafter(DrafterBase):
    def __init__(
        self, cost_model: Backend, p: float, continuations: Sequence[Sequence[int]], seed: int = 0
    ) -> None:
        if not 0.0 <= p <= 1.0:
            raise SpecmoeError(f"oracle acceptance must be in [0, 1], got {p}")
        self._cost = ModelDrafter(cost_model)
        self.vocab_size = cost_model.vocab_size
        self.max_context = cost_model.max_context
        self.p = p
        self._continuations = [list(c) for c in continuations]
        self._generator = torch.Generator().manual_seed(seed)
        self._rows: list[int] = []
        self._prompt_lengths: list[int] = []

    def begin(self, prompts: Sequence[Sequence[int]], hidden: torch.Tensor | None = None) -> None:
        if len(prompts) != len(self._continuations):
            raise SpecmoeError("the oracle needs one reference continuation per prompt")
        self._rows = list(range(len(prompts)))
        self._prompt_lengths = [len(p) for p in prompts]
        self._cost.begin(prompts)

    def _tokens(self, sequences, gamma: int) -> torch.Tensor:
        """[B, G] proposals: the reference token where a coin with P(heads) = p says so, else a wrong one."""
        right = torch.rand(len(sequences), gamma, generator=self._generator) < self.p  # [B, G]
        rows = []
        for live, seq in enumerate(sequences):
            original = self._rows[live]
            done = len(seq) - self._prompt_lengths[original]
            reference = self._continuations[original][done : done + gamma]
            reference += [0] * (gamma - len(reference))  # past the reference nothing can be right
            rows.append(
                [
                    t if ok else (t + 1) % self.vocab_size
                    for t, ok in zip(reference, right[live].tolist(), strict=True)
                ]
            )
        return to_device(rows, self._cost.backend.device)

    def propose(self, sequences, gamma, params, generator) -> Proposal:
        if not params.greedy:
            raise SpecmoeError("the oracle draft is defined for greedy decoding (temperature 0) only")
        chosen = self._tokens(sequences, gamma)
        tokens, _ = self._cost.run(sequences, gamma, lambda step, logits: (chosen[:, step], None))
        return Proposal(tokens, None)

    @property
    def compile_s(self) -> float:
        return self._cost.compile_s

    @property
    def state_s(self) -> float:
        return self._cost.state_s

    def reserve(self, tokens: int) -> None:
        self._cost.reserve(tokens)

    def feedback(self, verified: Verified) -> None:
        self._cost.feedback(verified)

    def retain(self, rows: Sequence[int]) -> None:
        self._cost.retain(rows)
        self._rows = [self._rows[r] for r in rows]

    def synchronize(self) -> None:
        self._cost.synchronize()
