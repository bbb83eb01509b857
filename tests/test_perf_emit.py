"""`advise --emit`: the advice in vLLM's, SGLang's and llama.cpp's own option names."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.perf.emit import EngineSyntax, emit, settings, vllm_schedule

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "perf-examples"


def _advice(method="eagle3", engine="vllm", speedups=((1, 4, 0.9), (4, 3, 1.2), (16, 2, 1.5)), **extra):
    rows = [
        {
            "batch": b,
            "best": {"gamma": g, "speedup": s, "band": [s / 1.5, s * 1.5]},
            "verdict": "DEPENDS ON ACCEPTANCE",
        }
        for b, g, s in speedups
    ]
    return {
        "target": "t",
        "drafter": method,
        "method": method,
        "engine": engine,
        "band": "×/÷ 1.5, a prior",
        "stated_alpha": 0.7,
        "rows": rows,
        **extra,
    }


def test_vllm_gets_one_batch_size_table_starting_at_one():
    rows = settings(_advice(speedups=((4, 4, 0.9), (8, 3, 1.2), (32, 2, 1.5))))
    assert vllm_schedule(rows) == [[1, 7, 0], [8, 31, 3], [32, 32, 2]]
    same = settings(_advice(speedups=((1, 3, 1.2), (4, 3, 1.3), (16, 2, 1.5))))
    assert vllm_schedule(same) == [[1, 15, 3], [16, 16, 2]]
    text = emit(_advice(), EngineSyntax.VLLM, "tgt", "dft")
    config = json.loads(shlex.split(text.splitlines()[-1])[-1])
    assert config == {
        "method": "eagle3",
        "model": "dft",
        "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 3, 0], [4, 15, 3], [16, 16, 2]],
    }


def test_nothing_pays_means_no_speculative_config():
    text = emit(_advice(speedups=((1, 2, 0.8), (8, 1, 0.9))), EngineSyntax.VLLM, "tgt", "dft")
    assert "--speculative-config" not in text and "disable SD" in text


def test_sglang_gets_one_launch_line_per_batch_size():
    lines = emit(_advice(engine="sglang"), EngineSyntax.SGLANG, "tgt", "dft").splitlines()
    launches = [line for line in lines if line.startswith("python")]
    assert len(launches) == 3 and "--speculative" not in launches[0]
    assert "--speculative-algorithm EAGLE3 --speculative-draft-model-path dft" in launches[1]
    assert (
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in launches[1]
    )
    tree = emit(_advice(engine="sglang", verify_tokens=8, tree_width=4), EngineSyntax.SGLANG, "t", "d")
    assert "--speculative-eagle-topk 4 --speculative-num-draft-tokens 8" in tree


def test_llamacpp_gets_spec_flags_and_none_where_sd_does_not_pay():
    text = emit(_advice(method="model", engine="llamacpp-metal"), EngineSyntax.LLAMACPP, "t.gguf", "d.gguf")
    launches = [line for line in text.splitlines() if line.startswith("llama-server")]
    assert launches[0].endswith("--parallel 1 --spec-type none")
    assert "--spec-type draft-simple --spec-draft-model d.gguf --spec-draft-n-max 3" in launches[1]
    assert "--draft-max" not in text  # removed from llama.cpp's common/arg.cpp


@pytest.mark.parametrize(
    ("syntax", "advice", "message"),
    [
        (EngineSyntax.SGLANG, _advice(engine="vllm"), "pass --engine sglang"),
        (EngineSyntax.LLAMACPP, _advice(method="eagle", engine="llamacpp-cuda"), "no 'eagle' drafter"),
        (EngineSyntax.VLLM, _advice() | {"stated_alpha": None}, "--emit needs the acceptance"),
    ],
)
def test_emit_errors_name_the_fix(syntax, advice, message):
    with pytest.raises(SpecmoeError, match=message):
        emit(advice, syntax, "t", "d")


def test_advise_emit_from_the_command_line(capsys):
    args = ["advise", "--config", str(EXAMPLES / "qwen3-30b-a3b.json"), "--draft", "eagle3"]
    args += ["--hardware", str(EXAMPLES / "h100-sxm.json"), "--engine", "vllm", "--batch", "1,16"]
    args += ["--gamma", "1,2,3", "--acceptance", "3", "--acceptance-kind", "tau", "--acceptance-gamma", "3"]
    assert main([*args, "--emit", "vllm", "--target-name", "Qwen/Qwen3-30B-A3B"]) == 0
    out = capsys.readouterr().out
    assert "vllm serve Qwen/Qwen3-30B-A3B --speculative-config" in out and "B=16: γ=" in out
