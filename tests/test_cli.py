"""The `specmoe` command: JSON shape of generate, and one clear line for every bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from specmoe.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _generate(capsys, zoo, *argv):
    """`specmoe generate --zoo ZOO ...`: (exit code, stdout, stderr)."""
    return _run(capsys, "generate", "--zoo", str(zoo), *argv)


def test_generate_json_has_the_documented_shape(capsys, tiny_zoo):
    code, out, _ = _generate(
        capsys,
        tiny_zoo,
        "--target",
        "moe",
        "--draft",
        "draft-xs",
        "--gamma",
        "3",
        "--prompt",
        "Hello there",
        "--prompt",
        "def add(a, b):",
        "--max-new-tokens",
        "9",
        "--json",
        "--dtype",
        "float32",
    )
    assert code == 0
    report = json.loads(out)
    assert len(report["outputs"]) == 2
    assert all(len(o["token_ids"]) <= 9 and isinstance(o["text"], str) for o in report["outputs"])
    stats = report["stats"]
    for key in (
        "rounds",
        "drafted",
        "accepted",
        "emitted",
        "prefill_s",
        "decode_s",
        "draft_s",
        "verify_s",
        "overhead_s",
        "wall_s",
        "acceptance_rate",
        "mean_accepted_length",
    ):
        assert key in stats
    assert stats["emitted"] == sum(len(o["token_ids"]) for o in report["outputs"])
    assert stats["wall_s"] == pytest.approx(stats["prefill_s"] + stats["decode_s"])
    assert stats["emitted"] + stats["truncated"] == stats["accepted"] + stats["rounds"]


def test_generate_without_draft_decodes_plainly(capsys, tiny_zoo):
    code, out, _ = _generate(
        capsys,
        tiny_zoo,
        "--target",
        "dense-s",
        "--prompt",
        "Hi",
        "--max-new-tokens",
        "5",
        "--json",
    )
    stats = json.loads(out)["stats"]
    assert code == 0 and stats["drafted"] == 0 and stats["acceptance_rate"] is None


def test_check_reports_identical_in_float64(capsys, tiny_zoo):
    code, out, _ = _generate(
        capsys,
        tiny_zoo,
        "--target",
        "moe",
        "--draft",
        "draft-xs",
        "--prompt",
        "Hi",
        "--max-new-tokens",
        "12",
        "--dtype",
        "float64",
        "--check",
    )
    assert code == 0 and "identical to plain decoding" in out


def _vocab_mismatch_model(path):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=100,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
    )
    Qwen3ForCausalLM(config).save_pretrained(path)
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "/nonexistent/model"], "not found"),
        (["--target", "moe", "--draft", "draft-xs", "--gamma", "0"], "gamma must be >= 1"),
        (["--target", "moe", "--max-new-tokens", "5000"], "exceeds the model's context"),
        (["--target", "moe", "--prompt", ""], "empty prompt"),
        (["--target", "missing-name"], "not found"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(capsys, tiny_zoo, args, message):
    code, _, err = _generate(capsys, tiny_zoo, *args)
    assert code != 0
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_vocab_mismatch_names_both_sizes(capsys, tiny_zoo, tmp_path):
    other = _vocab_mismatch_model(tmp_path / "other")
    code, _, err = _generate(capsys, tiny_zoo, "--target", "moe", "--draft", str(other))
    assert code != 0 and "100" in err and "2048" in err and len(err.strip().splitlines()) == 1


def test_zoo_list_shows_parameters(capsys, tiny_zoo):
    code, out, _ = _run(capsys, "zoo", "list", "--zoo", str(tiny_zoo))
    assert code == 0 and "moe" in out and "draft-xs" in out


def test_console_script_exit_code_without_traceback(tiny_zoo):
    proc = subprocess.run(
        [sys.executable, "-m", "specmoe.cli", "generate", "--target", "/nope"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_divergence_margin_is_small_where_bf16_splits(tiny_zoo):
    from specmoe.api import load_model
    from specmoe.decoding.divergence import first_difference, top2_margin

    assert first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert first_difference([1, 2], [1, 2]) is None
    model = load_model(tiny_zoo / "moe", dtype="float64")
    margin = top2_margin(model, [5, 6, 7])
    model.prefill([[5, 6]])
    top = torch.topk(model.forward(torch.tensor([[7]]))[0, -1], 2).values
    assert margin == pytest.approx(float(top[0] - top[1])) and margin >= 0


def test_generate_with_ngram_draft_is_exact(capsys, tiny_zoo):
    code, out, _ = _generate(
        capsys,
        tiny_zoo,
        "--target",
        "moe",
        "--draft",
        "ngram:1-2",
        "--prompt",
        "one two one two",
        "--max-new-tokens",
        "10",
        "--dtype",
        "float64",
        "--check",
    )
    assert code == 0 and "identical to plain decoding" in out
