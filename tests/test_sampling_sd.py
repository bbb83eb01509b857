"""Sampling SD preserves the target's distribution, checked against the exact target distribution."""

from __future__ import annotations

import itertools
import re

import pytest
import torch
from scipy.stats import chisquare
from small_vocab import VOCAB, exact_joint, small_vocab_model

from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.decoding.sampling import SamplingParams
from specmoe.errors import SpecmoeError

PROMPT = [1, 4, 2]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("small-vocab")
    return small_vocab_model(root / "target", 0, 2), small_vocab_model(root / "draft", 1, 1)


def _sampled_joint(target, drafter, params, gamma, draws, batch=500):
    counts = torch.zeros(VOCAB * VOCAB, dtype=torch.float64)
    for seed in range(draws // batch):
        config = DecodeConfig(max_new_tokens=2, gamma=gamma, sampling=params, seed=seed, ignore_eos=True)
        result = decode(target, [PROMPT] * batch, config, drafter)
        for out in result.outputs:
            counts[out.token_ids[0] * VOCAB + out.token_ids[1]] += 1
    return counts


@pytest.mark.parametrize(
    ("params", "gamma"),
    [(SamplingParams(temperature=1.0), 3), (SamplingParams(temperature=0.7, top_k=4), 1)],
)
def test_sd_sampling_matches_target_joint_distribution(pair, params, gamma):
    target, draft = pair
    draws = 6000
    expected = exact_joint(target, PROMPT, params) * draws
    sd_counts = _sampled_joint(target, ModelDrafter(draft), params, gamma, draws)
    plain_counts = _sampled_joint(target, None, params, gamma, draws)
    keep = expected > 0  # top-k leaves impossible pairs; they must never be sampled
    assert sd_counts[~keep].sum() == 0 and plain_counts[~keep].sum() == 0
    # Goodness of fit over the 36 (x1, x2) cells: under exact preservation a p-value below 1e-3
    # happens once in a thousand seeds; a rule that leaks the draft's distribution shifts whole
    # cells by hundreds of counts and drives p far below that (see the negative control below).
    assert chisquare(sd_counts[keep], expected[keep]).pvalue > 1e-3
    assert chisquare(plain_counts[keep], expected[keep]).pvalue > 1e-3


def test_the_joint_check_rejects_the_draft_distribution(pair):
    target, draft = pair
    params = SamplingParams(temperature=1.0)
    draws = 6000
    expected = exact_joint(target, PROMPT, params) * draws
    draft_counts = _sampled_joint(draft, None, params, 1, draws)
    assert chisquare(draft_counts, expected).pvalue < 1e-6


def test_same_seed_same_tokens(pair):
    target, draft = pair
    config = DecodeConfig(max_new_tokens=8, gamma=2, sampling=SamplingParams(temperature=1.0), seed=7)
    runs = [decode(target, [PROMPT] * 4, config, ModelDrafter(draft)).outputs for _ in range(2)]
    assert runs[0] == runs[1]
    assert len(set(itertools.chain.from_iterable(o.token_ids for o in runs[0]))) > 1


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0"),
        ({"temperature": float("inf")}, "temperature must be a finite number >= 0"),
        ({"temperature": -0.5}, "temperature must be a finite number >= 0"),
        ({"temperature": 1e-9}, "too small to sample with"),
        ({"top_p": float("nan")}, "top-p must be in (0, 1]"),
        ({"top_k": 2.5}, "top-k must be an integer >= 0"),
    ],
)
def test_sampling_parameters_no_sampler_can_use_are_refused(params, message):
    with pytest.raises(SpecmoeError, match=re.escape(message)):
        SamplingParams(**params)
