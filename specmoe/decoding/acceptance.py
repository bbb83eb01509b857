"""Acceptance rules for draft-then-verify, as pure functions on tensors.

Glossary (shapes: B sequences, G = gamma drafted tokens, V vocabulary):
- draft_tokens   [B, G]        the drafter's proposals, in order;
- draft_probs    [B, G, V]     the distribution each proposal was sampled from, or None for a drafter
                               without one (n-gram, oracle): the proposal is then a point mass;
- target_probs   [B, G + 1, V] the target's distribution after each prefix; row G is the one after
                               all proposals;
- accepted       [B]           how many leading proposals each sequence keeps (0..G);
- next_token     [B]           the one token the target adds after the accepted ones: a *correction*
                               where a proposal was rejected, or a *bonus* when all G were accepted.
Each round thus commits accepted + 1 tokens per sequence, before any EOS or length truncation.
"""

from __future__ import annotations

import torch


def greedy_accept(draft_tokens: torch.Tensor, target_tokens: torch.Tensor):
    """Keep proposals while they equal the target's argmax; then take the target's own token.

    draft_tokens [B, G]; target_tokens [B, G + 1] (argmax of the target after each prefix).
    Returns (accepted [B], next_token [B]).
    """
    gamma = draft_tokens.shape[1]
    matches = draft_tokens == target_tokens[:, :gamma]  # [B, G]
    accepted = matches.to(torch.long).cumprod(1).sum(1)  # [B] length of the matching prefix
    next_token = target_tokens.gather(1, accepted[:, None]).squeeze(1)
    return accepted, next_token


def rejection_accept(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None,
):
    """Modified rejection sampling (Leviathan et al. 2023; Chen et al. 2023).

    Proposal j is accepted with probability min(1, target_prob / draft_prob) of its token, in order,
    until the first rejection. A rejected position is resampled from normalize(max(0, target - draft));
    if all G are accepted, a bonus token is sampled from target_probs[:, G]. The committed tokens are
    then distributed exactly as target samples. A point-mass draft (draft_probs None) accepts its
    token with probability target_prob and resamples from the target with that token removed.

    Returns (accepted [B], next_token [B]).
    """
    batch, gamma = draft_tokens.shape
    if draft_probs is None:
        draft_probs = torch.zeros_like(target_probs[:, :gamma]).scatter_(-1, draft_tokens[..., None], 1.0)
    target_p = target_probs[:, :gamma].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, G]
    draft_p = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, G]
    uniform = torch.rand(batch, gamma, generator=generator, device=target_probs.device, dtype=target_p.dtype)
    keep = uniform * draft_p < target_p  # u < target/draft without dividing by a tiny draft_p
    accepted = keep.to(torch.long).cumprod(1).sum(1)  # [B]

    rows = torch.arange(batch, device=target_probs.device)
    at = accepted.clamp(max=gamma - 1)
    residual = (target_probs[rows, at] - draft_probs[rows, at]).clamp(min=0)  # [B, V]
    mass = residual.sum(-1, keepdim=True)
    # An all-zero residual means target == draft there, where rejection has probability 0; the
    # fallback only guards against rounding.
    residual = torch.where(
        mass > 0, residual / mass.clamp(min=torch.finfo(mass.dtype).tiny), target_probs[rows, at]
    )
    final = torch.where((accepted == gamma)[:, None], target_probs[:, gamma], residual)  # [B, V]
    next_token = torch.multinomial(final, 1, generator=generator).squeeze(1)
    return accepted, next_token
