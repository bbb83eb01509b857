"""The GGUF export of a hybrid target's MTP layer (`specmoe.zoo.gguf_mtp`): written as the block
after the trunk under llama.cpp's names, with Qwen3.5's norm offsets, and refused in one line, before
a file is begun, when the checkpoint's mtp.* tensors or its config are broken.

The model is the random `hybrid` zoo's MoE given a random MTP module (`hybrid_models.add_mtp`).
Needs the `gguf` package (skipped without it, failed under CI). That llama.cpp runs what is written
as the checkpoint computes it is tests/test_llamacpp_mtp.py's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hybrid_models import add_mtp
from safetensors.torch import load_file, save_file
from test_gguf import field, read, require, tensors

from specmoe.errors import SpecmoeError
from specmoe.zoo import build_zoo
from specmoe.zoo.gguf import export_gguf


@pytest.fixture(scope="module")
def hybrid_zoo(tmp_path_factory) -> Path:
    return build_zoo("hybrid", tmp_path_factory.mktemp("hybrid") / "zoo")


@pytest.fixture(scope="module")
def random_head(hybrid_zoo, tmp_path_factory) -> Path:
    """The zoo MoE with a random MTP module (an HF directory)."""
    return add_mtp(hybrid_zoo / "moe", tmp_path_factory.mktemp("mtp") / "moe")


def test_the_mtp_layer_is_written_as_the_block_after_the_trunk(hybrid_zoo, random_head, tmp_path):
    require("gguf")
    reader = read(export_gguf(random_head, tmp_path / "moe.gguf", "f32"))
    assert field(reader, "qwen35moe.block_count") == 5  # 4 trunk layers + 1 MTP layer
    assert field(reader, "qwen35moe.nextn_predict_layers") == 1
    assert field(reader, "qwen35moe.attention.recurrent_layers") == [True, True, True, False, False]
    found = {name: np.asarray(t.data) for name, t in tensors(reader).items()}
    hf = {k: v.float().numpy() for k, v in load_file(random_head / "model.safetensors").items()}
    same = {  # GGUF name -> (HF name, offset added: Qwen3.5's norms scale by 1 + weight)
        "blk.4.nextn.eh_proj.weight": ("mtp.fc.weight", 0),
        "blk.4.nextn.enorm.weight": ("mtp.pre_fc_norm_embedding.weight", 1),
        "blk.4.nextn.hnorm.weight": ("mtp.pre_fc_norm_hidden.weight", 1),
        "blk.4.nextn.shared_head_norm.weight": ("mtp.norm.weight", 1),
        "blk.4.attn_norm.weight": ("mtp.layers.0.input_layernorm.weight", 1),
        "blk.4.attn_q.weight": ("mtp.layers.0.self_attn.q_proj.weight", 0),  # query and gate per head
        "blk.4.attn_q_norm.weight": ("mtp.layers.0.self_attn.q_norm.weight", 1),
        "blk.4.ffn_gate_inp.weight": ("mtp.layers.0.mlp.gate.weight", 0),
        "blk.4.ffn_gate_inp_shexp.weight": ("mtp.layers.0.mlp.shared_expert_gate.weight", 0),
    }
    for name, (key, offset) in same.items():
        assert np.array_equal(found[name].reshape(hf[key].shape), hf[key] + offset), name
    experts = np.stack([hf[f"mtp.layers.0.mlp.experts.{e}.down_proj.weight"] for e in range(64)])
    assert np.array_equal(found["blk.4.ffn_down_exps.weight"], experts)
    without = read(export_gguf(hybrid_zoo / "moe", tmp_path / "trunk.gguf", "f32"))
    assert {n for n in found if not n.startswith("blk.4.")} == set(tensors(without))  # the trunk as before
    assert field(without, "qwen35moe.nextn_predict_layers") is None


def _edited(model_dir: Path, out: Path, change) -> Path:
    """A copy of the model whose weights dict and config dict `change(weights, config)` edits."""
    shutil.copytree(model_dir, out)
    weights, config = load_file(out / "model.safetensors"), json.loads((out / "config.json").read_text())
    change(weights, config)
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config))
    return out


def _truncate(weights, config):
    weights["mtp.layers.0.self_attn.q_proj.weight"] = weights["mtp.layers.0.self_attn.q_proj.weight"][
        :64
    ].clone()


def _fused_experts(weights, config):
    prefix = "mtp.layers.0.mlp.experts."
    gate = [weights.pop(k) for k in sorted(k for k in weights if k.startswith(prefix) and "gate_proj" in k)]
    for key in [k for k in weights if k.startswith(prefix)]:
        weights.pop(key)
    weights[prefix + "gate_up_proj"] = torch.stack(gate)


def _second_layer(weights, config):
    config["mtp_num_hidden_layers"] = 2
    for key in [k for k in weights if k.startswith("mtp.layers.0.")]:
        weights[key.replace("layers.0.", "layers.1.")] = weights[key].clone()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_truncate, r"'mtp.layers.0.self_attn.q_proj.weight' has shape \[64, 64\], not \[128, 64\]"),
        (lambda w, c: w.pop("mtp.fc.weight"), r"lacks the MTP tensor\(s\) mtp.fc.weight"),
        (
            lambda w, c: [w.pop(k) for k in [k for k in w if k.startswith("mtp.")]],
            r"holds MTP layers \[\] but its config says mtp_num_hidden_layers = 1",
        ),
        (_second_layer, "has 2 MTP layers; llama.cpp's Qwen3.5 MTP graph runs 1"),
        (_fused_experts, "GGUF export does not map: mtp.layers.0.mlp.experts.gate_up_proj"),
        (
            lambda w, c: w.update({"mtp.layers.0.extra.weight": w["mtp.norm.weight"].clone()}),
            "GGUF export does not map: mtp.layers.0.extra.weight",
        ),
    ],
    ids=["truncated", "no-fc", "config-without-tensors", "two-layers", "fused-experts", "unknown-tensor"],
)
def test_a_broken_mtp_module_is_refused_in_one_line_and_writes_nothing(
    random_head, tmp_path, change, message
):
    require("gguf")
    model = _edited(random_head, tmp_path / "broken", change)
    with pytest.raises(SpecmoeError, match=message) as err:
        export_gguf(model, tmp_path / "out" / "moe.gguf")
    assert "\n" not in str(err.value)
    assert not list(tmp_path.glob("out/*"))  # refused before a file is begun
