"""Hostile input to head drafters (`generate --draft mtp|HEAD-DIR`): a broken EAGLE-3 head, and
a head or MTP draft the target cannot run. Each probe must end in a non-zero exit and one line
naming the problem, without "unexpected" or a traceback, and leave nothing behind; the helpers are
tests/test_bad_input_perf.py's.

Models are built here, small: the tiny zoo (`tiny_zoo`), a random EAGLE-3 head for its MoE (a
draft vocabulary of 1024 tokens, so it has d2t / t2d maps), and an f32 GGUF of the MoE (no MTP
layer). The probes with what each did before their checks: docs/results/cpu/probes-surfaces.md.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from head_models import WEIGHTS, eagle3_dir
from test_bad_input_perf import _refused

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


# --- advise: the newer flags ----------------------------------------------------------------------


# --- findings: refusals only (never a run) --------------------------------------------------------
