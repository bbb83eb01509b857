"""An interrupted SmolLM2 draft build resumes: its teacher answers and training steps are kept, and
the resumed build ends with the same weights as one that was never interrupted. A tiny Llama of
random weights stands in for SmolLM2 (the mechanism is the model's, not the weights')."""

from dataclasses import replace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import specmoe.zoo.chat_transcripts as chat_transcripts
import specmoe.zoo.smollm2_draft as smollm2_draft
from specmoe.zoo.chat_transcripts import Transcripts, teacher_transcripts
from specmoe.zoo.smollm2_draft import PLAN, WorkFiles, _as_state, _train, derive_draft

STEPS = replace(PLAN, steps=6, batch_size=2, warmup_steps=1)


@pytest.fixture(scope="module")
def teacher():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).to(torch.float64).eval()


@pytest.fixture(scope="module")
def answers(teacher) -> Transcripts:
    prompts = [[(7 * i + j) % 60 + 2 for j in range(3 + i % 4)] for i in range(8)]
    return teacher_transcripts(teacher, prompts, answer_len=4, pad_id=0, batch=4, top_k=4)


def _trained(teacher, answers, work=None) -> dict:
    draft = derive_draft(teacher, (0, 2))
    _train(draft, answers, STEPS, 0, lambda _line: None, work)
    return draft.state_dict()


def test_a_build_interrupted_in_training_resumes_to_the_same_weights(teacher, answers, tmp_path, monkeypatch):
    whole = _trained(teacher, answers)
    monkeypatch.setattr(smollm2_draft, "CHECKPOINT_EVERY", 2)
    real_loss, calls = chat_transcripts.answer_loss, []

    def dies_at_the_fifth_step(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real_loss(*args, **kwargs)

    work = WorkFiles(tmp_path, {"format": 1})
    monkeypatch.setattr(chat_transcripts, "answer_loss", dies_at_the_fifth_step)
    with pytest.raises(KeyboardInterrupt):
        _trained(teacher, answers, work)
    assert torch.load(work.path("train"), weights_only=True)["step"] == 4
    monkeypatch.setattr(chat_transcripts, "answer_loss", real_loss)
    resumed = _trained(teacher, answers, work)
    assert resumed.keys() == whole.keys()
    assert all(torch.equal(resumed[name], whole[name]) for name in whole)


def test_the_teachers_answers_are_kept_and_read_back(answers, tmp_path):
    work = WorkFiles(tmp_path, {"format": 1})
    work.save("teacher", {"train": _as_state(answers)})
    back = Transcripts(**work.load("teacher", print)["train"])
    assert torch.equal(back.label_logprobs, answers.label_logprobs) and back.prompt_len == answers.prompt_len
    assert WorkFiles(tmp_path, {"format": 2}).load("teacher", print) is None  # other arguments, other files
    work.remove()
    assert not any(tmp_path.iterdir())


def test_a_damaged_save_is_said_and_the_work_done_again(tmp_path):
    work = WorkFiles(tmp_path, {"format": 1})
    work.path("train").write_bytes(b"not a checkpoint")
    said = []
    assert work.load("train", said.append) is None
    assert said and "cannot be read" in said[0] and "starting it again" in said[0]
