"""The acceptance rules alone, on hand-made inputs."""

from __future__ import annotations

import torch
from scipy.stats import chisquare

from specmoe.decoding.acceptance import greedy_accept, rejection_accept


def test_greedy_accepts_matching_prefix_then_takes_target_token():
    draft = torch.tensor([[5, 6, 7], [5, 6, 7], [1, 2, 3], [9, 9, 9]])
    target = torch.tensor([[5, 6, 7, 8], [5, 0, 7, 8], [4, 2, 3, 8], [9, 9, 9, 1]])
    accepted, next_token = greedy_accept(draft, target)
    assert accepted.tolist() == [3, 1, 0, 3]
    # correction where the first mismatch is, bonus (target's last) when all matched
    assert next_token.tolist() == [8, 0, 4, 1]


def test_greedy_match_after_mismatch_does_not_count():
    accepted, _ = greedy_accept(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 0, 3, 4]]))
    assert accepted.item() == 1


def _first_token_counts(draft_probs, target_probs, samples, seed, point_mass=False):
    """Sample gamma=1 rounds: the first committed token is the draft's if accepted, else the resample."""
    generator = torch.Generator().manual_seed(seed)
    vocab = target_probs.shape[-1]
    draft_tokens = torch.multinomial(
        draft_probs.expand(samples, -1), 1, replacement=True, generator=generator
    )
    target = target_probs.expand(samples, 2, vocab)
    probs = None if point_mass else draft_probs.expand(samples, 1, vocab)
    accepted, next_token = rejection_accept(draft_tokens, probs, target, generator)
    first = torch.where(accepted == 1, draft_tokens[:, 0], next_token)
    return torch.bincount(first, minlength=vocab).double(), accepted


def test_rejection_sampling_preserves_target_distribution():
    target_probs = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05], dtype=torch.float64)
    draft_probs = torch.tensor([0.1, 0.1, 0.2, 0.3, 0.3], dtype=torch.float64)
    samples = 200_000
    counts, accepted = _first_token_counts(draft_probs, target_probs, samples, seed=1)
    # H0 (exact preservation) gives chi-square with 4 dof; p < 1e-3 would happen 1 time in 1000 by
    # chance, while sampling from the draft instead gives a statistic in the tens of thousands.
    assert chisquare(counts, target_probs * samples).pvalue > 1e-3
    # the acceptance probability is sum(min(p, q)) = 0.1+0.1+0.15+0.1+0.05 = 0.5
    assert abs(accepted.double().mean().item() - 0.5) < 0.01


def test_point_mass_draft_is_lossless():
    target_probs = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    proposal_dist = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)  # always proposes token 3
    samples = 100_000
    counts, accepted = _first_token_counts(proposal_dist, target_probs, samples, seed=2, point_mass=True)
    assert chisquare(counts, target_probs * samples).pvalue > 1e-3
    assert abs(accepted.double().mean().item() - 0.1) < 0.01


def test_chi_square_check_detects_a_wrong_distribution():
    # the same check applied to the draft's own samples must fail, or the tests above prove nothing
    target_probs = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05], dtype=torch.float64)
    draft_probs = torch.tensor([0.1, 0.1, 0.2, 0.3, 0.3], dtype=torch.float64)
    generator = torch.Generator().manual_seed(3)
    samples = 200_000
    draws = torch.multinomial(draft_probs, samples, replacement=True, generator=generator)
    counts = torch.bincount(draws, minlength=5).double()
    assert chisquare(counts, target_probs * samples).pvalue < 1e-6


def test_all_accepted_takes_bonus_from_last_position():
    vocab = 3
    target = torch.zeros(1, 3, vocab, dtype=torch.float64)
    target[0, 0, 1] = target[0, 1, 2] = target[0, 2, 0] = 1.0  # deterministic target: 1, 2, then 0
    accepted, next_token = rejection_accept(
        torch.tensor([[1, 2]]), None, target, torch.Generator().manual_seed(0)
    )
    assert accepted.item() == 2
    assert next_token.item() == 0
