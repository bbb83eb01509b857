"""Hostile input to the newest surfaces: head drafters (`generate --draft mtp|HEAD-DIR`), the
calibration rows (`calibrate fit|heldout|frozen|check`), the newer `advise` flags and `findings`'
refusals. Each probe must end in a non-zero exit and one line naming the problem, without
"unexpected" or a traceback, and leave nothing behind; the helpers are tests/test_bad_input_perf.py's.

Models are built here, small: the tiny zoo (`tiny_zoo`), a random EAGLE-3 head for its MoE (a
draft vocabulary of 1024 tokens, so it has d2t / t2d maps), and an f32 GGUF of the MoE (no MTP
layer). The probes with what each did before their checks: docs/results/cpu/probes-surfaces.md.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from head_models import WEIGHTS, eagle3_dir
from test_bad_input_perf import _refused

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "specmoe" / "perf" / "examples"
HARDWARE = EXAMPLES / "h100-sxm.json"
HOST_HARDWARE = EXAMPLES / "rtx4090.json"  # has a 'host' object, for --n-cpu-moe
MOE = EXAMPLES / "qwen3-30b-a3b.json"
DENSE = EXAMPLES / "qwen3-8b.json"
HYBRID = EXAMPLES / "qwen3.5-35b-a3b.json"
PUBLISHED = REPO / "specmoe" / "calibration" / "data" / "published.csv"
HEADER = PUBLISHED.read_text(encoding="utf-8").splitlines()[0]
ROW = "r1,src,w,h100-sxm,1,sglang,llama-3.1-8b,bfloat16,eagle3,,,2,3,,1,tau,3.0,,512,1.81,reported,n"


# --- head drafters ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def heads(tiny_zoo, tmp_path_factory) -> Path:
    """A random EAGLE-3 head for the tiny zoo's MoE (the probes copy it before breaking it), and the
    MoE as an f32 GGUF, which has no MTP layer."""
    from specmoe.api import load_model
    from specmoe.zoo.gguf import export_gguf

    root = tmp_path_factory.mktemp("surfaces")
    model = load_model(tiny_zoo / "moe", dtype="float32").model
    eagle3_dir(model, root / "eagle3", seed=1, layers=[0, 1, 2], draft_vocab=1024)
    export_gguf(tiny_zoo / "moe", root / "moe.gguf", "f32")
    return root


def _config(changes: dict) -> Callable[[Path], None]:
    def edit(head: Path) -> None:
        path = head / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}), encoding="utf-8")

    return edit


def _drop_maps(head: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = {k: v for k, v in load_file(head / WEIGHTS).items() if k not in ("d2t", "t2d")}
    save_file(tensors, head / WEIGHTS, metadata={"format": "pt"})


def _bad_json(head: Path) -> None:
    (head / "config.json").write_text('{"architectures": [', encoding="utf-8")


def _truncate(head: Path) -> None:
    data = (head / WEIGHTS).read_bytes()
    (head / WEIGHTS).write_bytes(data[: len(data) // 3])


# probe -> (how the head copy is broken, or None for the unbroken head; its line's words)
HEAD_PROBES: dict[str, tuple[Callable[[Path], None] | None, str]] = {
    "eagle3-layers-past-target": (
        _config({"eagle_aux_hidden_state_layer_ids": [0, 1, 9]}),
        "reads target layers [0, 1, 9]",
    ),
    "eagle3-target-hidden-size": (_config({"target_hidden_size": 128}), "target_hidden_size 128"),
    "eagle3-vocab": (_config({"vocab_size": 4096}), "vocabulary of 4096 tokens"),
    "eagle3-no-d2t": (_drop_maps, "no d2t map"),
    "eagle3-config-not-json": (_bad_json, "is not valid JSON"),
    "eagle3-truncated-weights": (_truncate, "truncated"),
}


def _generate(target: str, draft: str, *more: str) -> tuple[str, ...]:
    return (
        "generate",
        "--target",
        target,
        "--draft",
        draft,
        "--prompt",
        "hi",
        "--max-new-tokens",
        "2",
        *more,
    )


@pytest.mark.parametrize("name", list(HEAD_PROBES))
def test_a_broken_eagle3_head_is_refused_in_one_line(name, heads, tiny_zoo, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    breaks, expect = HEAD_PROBES[name]
    head = shutil.copytree(heads / "eagle3", tmp_path / "head")
    breaks(head)
    _refused(_generate(str(tiny_zoo / "moe"), str(head)), expect, capsys)


@pytest.mark.parametrize(
    ("name", "expect"),
    [
        ("mtp-without-weights", "has no MTP weights (no mtp.* tensors)"),
        ("mtp-gguf-without-layer", "has no MTP layer (qwen3moe.nextn_predict_layers is 0)"),
        ("head-gamma-0", "--gamma must be >= 1"),
    ],
)
def test_a_head_draft_the_target_cannot_run_is_refused(name, expect, heads, tiny_zoo, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    argv = {
        "mtp-without-weights": _generate(str(tiny_zoo / "moe"), "mtp"),
        "mtp-gguf-without-layer": _generate(str(heads / "moe.gguf"), "mtp"),
        "head-gamma-0": _generate(str(tiny_zoo / "moe"), str(heads / "eagle3"), "--gamma", "0"),
    }[name]
    _refused(argv, expect, capsys)


# --- calibrate ------------------------------------------------------------------------------------

CALIBRATE_PROBES: dict[str, tuple[bytes, tuple[str, ...], str]] = {
    "rows-empty": (b"", ("fit",), "holds no rows"),
    "rows-header-only": (HEADER.encode() + b"\n", ("fit",), "holds no rows"),
    "rows-garbled": (b"garbage\x00\xff,,,\n", ("fit",), "is not UTF-8 text"),
    "rows-speedup-nan": (f"{HEADER}\n{ROW.replace(',1.81,', ',nan,')}\n".encode(), ("fit",), "got nan"),
    "rows-speedup-negative": (
        f"{HEADER}\n{ROW.replace(',1.81,', ',-2,')}\n".encode(),
        ("heldout",),
        "speedup must be a finite number > 0",
    ),
    "rows-batch-0": (
        f"{HEADER}\n{ROW.replace(',2,3,', ',0,3,')}\n".encode(),
        ("check",),
        "batch and tree_width must be whole numbers >= 1, got 0",
    ),
    "rows-unknown-engine": (
        f"{HEADER}\n{ROW.replace('sglang', 'warpdrive')}\n".encode(),
        ("frozen", "--source", "src"),
        "unknown engine 'warpdrive'",
    ),
    "rows-a-json-file": (HARDWARE.read_bytes(), ("fit",), "no column id, source, where"),
}


@pytest.mark.parametrize("name", list(CALIBRATE_PROBES))
def test_hostile_calibration_rows_are_refused_in_one_line(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    data, command, expect = CALIBRATE_PROBES[name]
    rows = tmp_path / "rows.csv"
    rows.write_bytes(data)
    _refused(("calibrate", command[0], "--data", str(rows), *command[1:]), expect, capsys)
    assert [p.name for p in tmp_path.iterdir()] == ["rows.csv"]


def test_a_calibration_json_of_the_wrong_type_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    wrong = tmp_path / "calibration.json"
    wrong.write_text("[1, 2]", encoding="utf-8")
    _refused(("calibrate", "heldout", "--intervals", str(wrong)), "holds no JSON object", capsys)


# --- advise: the newer flags ----------------------------------------------------------------------


def _advise(config: Path, hardware: Path, engine: str, draft: str, *more: str) -> tuple[str, ...]:
    flags = ("--config", str(config), "--hardware", str(hardware), "--engine", engine, "--draft", draft)
    return ("advise", *flags, *more)


LLAMA = (MOE, HOST_HARDWARE, "llamacpp-cuda", "ngram")
ADVISE_PROBES: dict[str, tuple[tuple[str, ...], str]] = {
    "dflash-0": (_advise(MOE, HARDWARE, "vllm", "dflash:0"), "a DFlash block is 2..64 positions"),
    "dflash-negative": (_advise(MOE, HARDWARE, "vllm", "dflash:-3"), "got '-3'"),
    "dflash-text": (_advise(MOE, HARDWARE, "vllm", "dflash:abc"), "got 'abc'"),
    "n-cpu-moe-negative": (_advise(*LLAMA, "--n-cpu-moe", "-1"), "argument --n-cpu-moe: must be >= 0"),
    "n-cpu-moe-dense": (
        _advise(DENSE, HOST_HARDWARE, "llamacpp-cuda", "ngram", "--n-cpu-moe", "2"),
        "this target has none",
    ),
    "n-cpu-moe-no-host": (
        _advise(MOE, HARDWARE, "llamacpp-cuda", "ngram", "--n-cpu-moe", "8"),
        "'host' object",
    ),
    "pp-0": (_advise(*LLAMA, "--pp", "0"), "argument --pp: must be >= 1"),
    "tree-tokens-0": (_advise(*LLAMA, "--tree-tokens", "0"), "--tree-tokens >= 2"),
    "draft-vocab-0": (_advise(*LLAMA, "--draft-vocab", "0"), "argument --draft-vocab: must be >= 1"),
    "acceptance-rate-1.5": (
        _advise(*LLAMA, "--acceptance", "1.5", "--acceptance-kind", "rate", "--acceptance-gamma", "4"),
        "an acceptance rate is a fraction in [0, 1], got 1.5",
    ),
    "acceptance-tau-0.5": (
        _advise(*LLAMA, "--acceptance", "0.5", "--acceptance-kind", "tau", "--acceptance-gamma", "4"),
        "lies in [1, 5], got 0.5",
    ),
    "acceptance-rate-without-gamma": (
        _advise(*LLAMA, "--acceptance", "0.5", "--acceptance-kind", "rate"),
        "add --acceptance-gamma G",
    ),
    "mlx-hybrid-on-cuda": (_advise(HYBRID, HARDWARE, "mlx", "ngram"), "engine 'mlx' runs on mps"),
}


@pytest.mark.parametrize("name", list(ADVISE_PROBES))
def test_a_hostile_advise_flag_is_refused_in_one_line(name, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    argv, expect = ADVISE_PROBES[name]
    _refused(argv, expect, capsys)


def test_n_cpu_moe_past_the_layers_is_every_layer_as_in_llama_cpp(capsys):
    """llama.cpp's `--n-cpu-moe 99` is the idiom for "every block" (as `-ngl 99`): priced, and the
    answer says how many layers moved."""
    from test_bad_input_files import run_main

    assert run_main(_advise(*LLAMA, "--n-cpu-moe", "100000")) == 0
    assert "the routed experts of 48 MoE layers sit in host memory" in capsys.readouterr().out


# --- findings: refusals only (never a run) --------------------------------------------------------


@pytest.mark.parametrize("name", ["no-such-pass", "hw-missing", "hw-fifo", "hw-not-json", "out-empty"])
def test_findings_refuses_before_writing(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    out = tmp_path / "out"
    hw = tmp_path / "hw.json"
    if name == "hw-fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs on this system")
        os.mkfifo(hw)
    elif name == "hw-not-json":
        hw.write_text("{", encoding="utf-8")
    predict = ("findings", "--pass", "study-hybrid-mtp", "--predict", "--hw", str(hw), "--out", str(out))
    argv, expect = {
        "no-such-pass": (("findings", "--pass", "no-such-pass", "--out", str(out)), "unknown findings pass"),
        "hw-missing": (predict, "not found"),
        "hw-fifo": (predict, "is not a regular file (a FIFO)"),
        "hw-not-json": (predict, "is not valid JSON"),
        "out-empty": (("findings", "--pass", "study-hybrid-mtp", "--predict", "--out", ""), "an empty path"),
    }[name]
    _refused(argv, expect, capsys)
    assert not out.exists()
