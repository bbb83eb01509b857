"""The SmolLM2 draft's training data: instructions made offline, the target's batched answers."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from specmoe.zoo import synthetic
from specmoe.zoo.chat_transcripts import (
    answer_loss,
    instructions,
    left_padded,
    positions,
    question_of,
    teacher_transcripts,
)
from specmoe.zoo.smollm2_draft import agreement
from specmoe.zoo.train_data import held_out_prompts


def test_instructions_are_distinct_seeded_and_never_a_benchmark_prompt():
    made = instructions(200, seed=0)
    assert len(made) == len(set(made)) == 200
    assert made == instructions(200, seed=0)
    assert made != instructions(200, seed=1)
    held_out = held_out_prompts()
    assert not any(prompt in text for text in made for prompt in held_out)


@pytest.mark.parametrize("kind", list(synthetic.GENERATORS))
def test_a_synthetic_question_loses_its_answer(kind):
    document = next(synthetic.documents(kind))
    question = question_of(document)
    assert question and question in document and len(question) < len(document)
    for mark in ("Answer:", "Solution:", "\ndef ", "答：", "解答："):
        assert mark not in question


def test_left_padding_and_positions():
    ids, mask = left_padded([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions(mask).tolist() == [[0, 1, 2], [0, 0, 0]]


@pytest.fixture(scope="module")
def tiny_llama():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).to(torch.float64).eval()


def test_batched_left_padded_answers_equal_one_at_a_time(tiny_llama):
    """Padding changes nothing: each row's answer and labels are what it gets decoded alone."""
    prompts = [[3, 9, 4, 17, 2], [11], [7, 7, 30]]
    batched = teacher_transcripts(tiny_llama, prompts, answer_len=6, pad_id=0, batch=3, top_k=4)
    for row, prompt in enumerate(prompts):
        alone = teacher_transcripts(tiny_llama, [prompt], answer_len=6, pad_id=0, batch=1, top_k=4)
        assert (
            batched.tokens[row, batched.prompt_len :].tolist() == alone.tokens[0, alone.prompt_len :].tolist()
        )
        assert torch.allclose(batched.label_logprobs[row], alone.label_logprobs[0])
    assert batched.label_ids.shape == (3, 6, 4)
    greedy = batched.label_ids[..., 0]
    assert torch.equal(batched.tokens[:, batched.prompt_len :], greedy)


def test_the_target_agrees_with_itself_and_the_loss_is_finite(tiny_llama):
    prompts = [[3, 9, 4, 17, 2], [11], [7, 7, 30]]
    found = teacher_transcripts(tiny_llama, prompts, answer_len=5, pad_id=0, batch=2, top_k=8)
    matches, kl = agreement(tiny_llama, found)
    floor = -found.label_logprobs.logsumexp(-1).mean().item()  # -log of the top k's mass
    assert matches == 1.0 and kl == pytest.approx(floor, rel=1e-6)  # labels are kept in float32
    loss = answer_loss(
        tiny_llama, found.tokens, found.mask, found.prompt_len, found.label_ids, found.label_logprobs, 0.5
    )
    assert torch.isfinite(loss) and loss.item() > 0
