"""Prompt sets: the built-in sets, JSONL loading (plain and Spec-Bench), synthetic prompts, batches."""

from __future__ import annotations

import json
import re

import pytest

from specmoe.errors import SpecmoeError
from specmoe.prompts import (
    BUILTIN_PROMPT_SETS,
    batch_prompts,
    builtin_path,
    load_prompt_set,
    synthetic_prompt,
)


@pytest.fixture(scope="module")
def tokenizer():
    """The zoo's byte-level BPE, trained from the packaged corpus (well under a second)."""
    from transformers import PreTrainedTokenizerFast

    from specmoe.zoo.tokenizer import corpus_files, train_tokenizer

    return PreTrainedTokenizerFast(tokenizer_object=train_tokenizer(corpus_files()))


@pytest.mark.parametrize("name", BUILTIN_PROMPT_SETS)
def test_builtin_sets_have_eight_distinct_prompts(name):
    prompts = load_prompt_set(name)
    assert len(prompts) >= 8
    assert len(set(prompts)) == len(prompts)
    assert all(p.strip() == p and p for p in prompts)


def test_builtin_sets_are_the_four_prompt_kinds():
    assert BUILTIN_PROMPT_SETS == ("factual", "code", "reasoning", "chinese")
    assert all(len(p) < 120 for p in load_prompt_set("factual"))  # short
    assert all(re.search(r"[\u4e00-\u9fff]", p) for p in load_prompt_set("chinese"))
    # Long multi-step problems: several sentences each, longer than any factual prompt.
    for prompt in load_prompt_set("reasoning"):
        assert len(re.findall(r"[.?!]", prompt)) >= 3 and len(prompt) > 150, prompt
    assert all(re.search(r"\b(write|implement)\b", p, re.IGNORECASE) for p in load_prompt_set("code"))


@pytest.mark.parametrize("name", BUILTIN_PROMPT_SETS)
def test_builtin_files_are_plain_prompt_jsonl(name):
    lines = builtin_path(name).read_text(encoding="utf-8").splitlines()
    assert all(set(json.loads(line)) == {"prompt"} for line in lines)


def test_spec_bench_format_takes_the_first_turn(tmp_path):
    path = tmp_path / "question.jsonl"
    records = [
        {"question_id": 81, "category": "writing", "turns": ["first turn", "second turn"]},
        {"question_id": 82, "category": "math", "turns": ["another question"]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")
    assert load_prompt_set(path) == ["first turn", "another question"]
    assert load_prompt_set(str(path)) == ["first turn", "another question"]


def test_text_field_is_a_prompt_too(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "a"}\n{"prompt": "b", "text": "ignored"}\n', encoding="utf-8")
    assert load_prompt_set(path) == ["a", "b"]


def test_plain_format_skips_blank_lines(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text('{"prompt": "a"}\n\n   \n{"prompt": "b"}\n', encoding="utf-8")
    assert load_prompt_set(path) == ["a", "b"]


@pytest.mark.parametrize(
    "bad_line",
    ['{"prompt": "a"', '["a"]', '{"text": 1}', '{"prompt": 3}', '{"turns": []}', '{"turns": [1]}'],
)
def test_bad_line_names_file_and_line(tmp_path, bad_line):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n\n' + bad_line + "\n", encoding="utf-8")
    with pytest.raises(SpecmoeError) as info:
        load_prompt_set(path)
    assert str(info.value).startswith(f"{path}:3: ")
    assert "\n" not in str(info.value)


def test_unknown_name_and_empty_file(tmp_path):
    with pytest.raises(SpecmoeError, match="unknown prompt set 'facts'"):
        load_prompt_set("facts")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(SpecmoeError, match="no prompts"):
        load_prompt_set(empty)


@pytest.mark.parametrize("length", [1, 7, 32, 1024, 5000])
def test_synthetic_prompt_has_exactly_length_tokens(tokenizer, length):
    ids = synthetic_prompt(tokenizer, length)
    assert len(ids) == length
    assert all(isinstance(i, int) for i in ids)


def test_synthetic_prompt_is_deterministic_and_seeded(tokenizer):
    assert synthetic_prompt(tokenizer, 256, seed=3) == synthetic_prompt(tokenizer, 256, seed=3)
    assert synthetic_prompt(tokenizer, 256, seed=0) != synthetic_prompt(tokenizer, 256, seed=1)
    # A shorter prompt is a prefix of a longer one with the same seed: lengths differ only in the cut.
    assert synthetic_prompt(tokenizer, 64, seed=5) == synthetic_prompt(tokenizer, 128, seed=5)[:64]


def test_synthetic_prompt_starts_with_built_in_text(tokenizer):
    text = tokenizer.decode(synthetic_prompt(tokenizer, 12))
    assert text.startswith(load_prompt_set("factual")[0][:20])


@pytest.mark.parametrize("length", [0, -3])
def test_synthetic_prompt_rejects_bad_length(tokenizer, length):
    with pytest.raises(SpecmoeError, match="length must be an integer >= 1"):
        synthetic_prompt(tokenizer, length)


def test_batch_prompts_cycles_with_distinct_repeats():
    assert batch_prompts(["a", "b", "c"], 2) == ["a", "b"]
    assert batch_prompts(["a", "b"], 5) == ["a", "b", "[2] a", "[2] b", "[3] a"]
    assert batch_prompts(["a"], 1) == ["a"]
    with pytest.raises(SpecmoeError):
        batch_prompts([], 1)
    with pytest.raises(SpecmoeError):
        batch_prompts(["a"], 0)


def test_bytes_that_are_not_utf8_name_file_line_and_fix(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt": "fine"}\n\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(
        SpecmoeError, match=re.escape(f"{path}:3: not valid UTF-8 (byte 0xe9 at column 16); save")
    ):
        load_prompt_set(path)


def test_a_byte_order_mark_is_not_part_of_the_first_prompt(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "first"}\n')
    assert load_prompt_set(path) == ["first"]
