"""GGUF export of the zoo: llama.cpp's tensor layout and metadata, exact f32 weights, cached exports.

The `gguf` package comes with the `llamacpp` extra. Without it these tests skip, unless the
environment variable CI is set: there a missing extra is a failure, not a skip (CI installs it).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.zoo.gguf import export_gguf, zoo_gguf, zoo_gguf_path


def require(module: str):
    """Import an optional module of the llamacpp extra, or skip (fail under CI)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        reason = f"{module} is not installed (pip install -c constraints.txt -e '.[llamacpp]')"
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(f"{reason}; CI is set, so the llama.cpp checks may not be skipped")
        pytest.skip(reason)


def read(path: Path):
    return require("gguf").GGUFReader(path)


def field(reader, key: str):
    found = reader.get_field(key)
    return None if found is None else found.contents()


def tensors(reader) -> dict:
    return {t.name: t for t in reader.tensors}


def test_moe_export_has_llamacpp_names_shapes_and_types(tiny_zoo):
    gguf = require("gguf")
    reader = read(zoo_gguf(tiny_zoo, "moe", "q8_0"))
    config = json.loads((tiny_zoo / "moe" / "config.json").read_text())
    assert field(reader, "general.architecture") == "qwen3moe"
    assert field(reader, "qwen3moe.expert_count") == config["num_local_experts"] == 32
    assert field(reader, "qwen3moe.expert_used_count") == 2
    assert field(reader, "qwen3moe.expert_feed_forward_length") == config["moe_intermediate_size"]
    assert field(reader, "qwen3moe.attention.key_length") == config["head_dim"]
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.pre") == "qwen2"
    assert field(reader, "tokenizer.ggml.eos_token_id") == 0
    assert field(reader, "tokenizer.ggml.add_bos_token") is False
    found = tensors(reader)
    experts = found["blk.0.ffn_gate_exps.weight"]
    assert experts.tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert list(experts.shape) == [64, 512, 32]  # GGUF order: [hidden, expert width, experts]
    assert list(found["blk.1.ffn_down_exps.weight"].shape) == [512, 64, 32]
    # norms and the router stay f32, as llama.cpp's converter keeps them
    assert found["blk.0.ffn_gate_inp.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert found["blk.0.attn_q_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert len(found) == 3 + 2 * 12  # embeddings, output norm, output + 12 tensors per layer


def test_dense_export_names_every_tensor(tiny_zoo):
    gguf = require("gguf")
    reader = read(zoo_gguf(tiny_zoo, "dense-s", "f16"))
    assert field(reader, "general.architecture") == "qwen3"
    assert field(reader, "qwen3.feed_forward_length") == 384
    found = tensors(reader)
    assert len(found) == 3 + 2 * 11
    assert found["blk.1.ffn_gate.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert found["token_embd.weight"].tensor_type == gguf.GGMLQuantizationType.F16


def test_f32_export_is_the_checkpoint_bit_for_bit(tiny_zoo):
    reader = read(zoo_gguf(tiny_zoo, "moe", "f32"))
    found = tensors(reader)
    with safe_open(str(tiny_zoo / "moe" / "model.safetensors"), "pt") as f:
        embed = f.get_tensor("model.embed_tokens.weight").float().numpy()
        ups = [f.get_tensor(f"model.layers.1.mlp.experts.{e}.up_proj.weight").float() for e in range(32)]
    assert np.array_equal(np.asarray(found["token_embd.weight"].data).reshape(embed.shape), embed)
    stacked = torch.stack(ups).numpy()  # [E, I, H]
    assert np.array_equal(np.asarray(found["blk.1.ffn_up_exps.weight"].data).reshape(stacked.shape), stacked)


def test_exports_are_cached_and_redone_when_stale(tiny_zoo):
    require("gguf")
    path = zoo_gguf(tiny_zoo, "draft-xs", "f16")
    before = path.stat().st_mtime_ns
    assert zoo_gguf(tiny_zoo, "draft-xs", "f16") == path
    assert path.stat().st_mtime_ns == before  # up to date: not rewritten
    shutil.copy(zoo_gguf(tiny_zoo, "draft-s", "f16"), path)  # another checkpoint's export
    zoo_gguf(tiny_zoo, "draft-xs", "f16")
    assert field(read(path), "general.name") == "draft-xs"


def test_bad_export_requests_fail_in_one_line(tiny_zoo, tmp_path):
    require("gguf")
    with pytest.raises(SpecmoeError, match="unknown GGUF type 'q4'; use one of"):
        zoo_gguf(tiny_zoo, "moe", "q4")
    with pytest.raises(SpecmoeError, match="has no model 'nope'"):
        zoo_gguf(tiny_zoo, "nope")
    other = tmp_path / "llama"
    shutil.copytree(tiny_zoo / "dense-s", other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(SpecmoeError, match="'llama' model; GGUF export supports qwen3, qwen3_moe"):
        export_gguf(other, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_cli_exports_the_named_models(tiny_zoo, capsys):
    require("gguf")
    assert main(["zoo", "export-gguf", "--zoo", str(tiny_zoo), "--type", "bf16", "--model", "draft-xs"]) == 0
    out = capsys.readouterr().out.split()
    assert out == [str(zoo_gguf_path(tiny_zoo, "draft-xs", "bf16"))]
    assert main(["zoo", "export-gguf", "--zoo", str(tiny_zoo), "--type", "int4"]) == 2
    assert "unknown GGUF type 'int4'" in capsys.readouterr().err
