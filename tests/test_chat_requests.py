"""Requests shaped like served traffic, for the SmolLM2 draft's distillation."""

import itertools
import random

import pytest

from specmoe.zoo import chat_requests
from specmoe.zoo.chat_transcripts import instructions
from specmoe.zoo.train_data import held_out_prompts


def test_requests_take_turns_by_kind_and_follow_the_seed():
    made = list(itertools.islice(chat_requests.requests(seed=0), 400))
    assert made == list(itertools.islice(chat_requests.requests(seed=0), 400))
    assert made != list(itertools.islice(chat_requests.requests(seed=1), 400))
    assert len(set(made)) > 300  # the patterns and subjects give variety, not a handful of strings
    assert all("{" not in text and "}" not in text for text in made)  # every placeholder filled


@pytest.mark.parametrize("kind", list(chat_requests.KINDS))
def test_no_request_is_a_benchmark_prompt(kind):
    rng = random.Random(0)
    held_out = held_out_prompts()
    made = {chat_requests.KINDS[kind](rng) for _ in range(500)}
    assert not made & set(held_out)


def test_half_the_instructions_are_traffic_shaped():
    made = instructions(80, seed=0)
    traffic = set(itertools.islice(chat_requests.requests(seed=0), 400))
    assert 30 <= sum(text in traffic for text in made) <= 50
