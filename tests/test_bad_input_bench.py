"""`bench quick` refusing its flags, a FIFO as its dataset and an empty model path in one line,
writing nothing. The helpers are tests/test_bad_input_perf.py's.
"""

from __future__ import annotations

import os

import pytest
from test_bad_input_perf import FIFO, _refused, needs_fifo


@pytest.mark.parametrize(
    ("flags", "expect"),
    [
        (("--draft", "no-such-draft"), "--draft no-such-draft: no such model directory or .gguf file"),
        (("--draft", "ngram", "--gamma", ""), "--gamma '': give whole numbers >= 1"),
        (("--draft", "ngram", "--batch", ""), "--batch '': give whole numbers >= 1"),
        (("--draft", "ngram", "--temperature", "nan"), "argument --temperature: must be a finite number"),
        (("--draft", "ngram", "--db", ""), "argument --db: an empty path"),
    ],
    ids=["unknown-draft", "gamma-empty", "batch-empty", "temperature-nan", "db-empty-path"],
)
def test_bench_quick_refuses_in_one_line_and_writes_nothing(flags, expect, tiny_zoo, tmp_path, capsys):
    db = tmp_path / "quick.db"
    argv = ("bench", "quick", "--model", str(tiny_zoo / "moe"), "--db", str(db), *flags)
    _refused(argv, expect, capsys)
    assert list(tmp_path.iterdir()) == []  # no store, no suite file


@needs_fifo
def test_bench_quick_refuses_a_fifo_as_its_dataset(tiny_zoo, tmp_path, capsys):
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    argv = ("bench", "quick", "--model", str(tiny_zoo / "moe"), "--draft", "ngram", "--dataset", str(fifo))
    _refused((*argv, "--db", str(tmp_path / "quick.db")), FIFO, capsys)
    assert [p.name for p in tmp_path.iterdir()] == ["prompts.jsonl"]


def test_bench_quick_refuses_an_empty_model_path(capsys):
    _refused(("bench", "quick", "--model", "", "--draft", "ngram"), "argument --model: an empty path", capsys)
