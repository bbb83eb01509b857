"""The study's architecture in the zoo: the `hybrid` preset's shapes, counts, init and models."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from specmoe.api import load_model
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.zoo import build_zoo
from specmoe.zoo.hf_config import hf_config
from specmoe.zoo.init import init_tensor
from specmoe.zoo.params import count_params
from specmoe.zoo.presets import MOE, PRESETS, RATIO_TARGETS, RATIO_TOLERANCE

HYBRID = PRESETS["hybrid"]


def test_hybrid_preset_keeps_the_familys_ratios():
    moe = count_params(HYBRID.model(MOE), HYBRID.vocab_size)
    assert abs(moe.total / moe.active / RATIO_TARGETS[MOE] - 1) <= RATIO_TOLERANCE
    for shape in HYBRID.models:
        if shape.name != MOE:
            ratio = count_params(shape, HYBRID.vocab_size).active / moe.active
            assert abs(ratio / RATIO_TARGETS[shape.name] - 1) <= RATIO_TOLERANCE, shape.name


@pytest.mark.parametrize("name", [s.name for s in HYBRID.models])
def test_hybrid_shapes_are_qwen3_5_with_three_linear_layers_to_one_full(name):
    shape = HYBRID.model(name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(shape, HYBRID))
    assert count_params(shape, HYBRID.vocab_size).total == sum(p.numel() for p in model.parameters())
    assert model.config.model_type == shape.model_type
    assert model.config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    if shape.is_moe:  # a shared expert beside many small routed ones
        assert shape.shared_expert_size == 3 * shape.moe_intermediate_size and shape.num_experts == 64


def test_zero_centered_norms_start_at_zero_and_the_gated_norm_at_one():
    moe = HYBRID.model(MOE)
    assert init_tensor("model.layers.0.input_layernorm.weight", (64,), moe, 0).abs().max() == 0
    assert init_tensor("model.layers.3.self_attn.q_norm.weight", (16,), moe, 0).abs().max() == 0
    assert (init_tensor("model.layers.0.linear_attn.norm.weight", (16,), moe, 0) == 1).all()
    decay = init_tensor("model.layers.0.linear_attn.A_log", (4,), moe, 0).exp()
    assert ((decay > 0.01) & (decay < 16)).all()
    tiny_norm = init_tensor("model.layers.0.input_layernorm.weight", (64,), PRESETS["tiny"].model(MOE), 0)
    assert (tiny_norm == 1).all()  # Qwen3's norms scale by weight, not 1 + weight


def test_hybrid_zoo_builds_and_runs_sd_exactly(tmp_path):
    zoo = build_zoo("hybrid", tmp_path / "hybrid")
    target = load_model(zoo / MOE, dtype="float64")
    prompts = [[5, 6, 7, 8, 9], [100]]
    config = DecodeConfig(max_new_tokens=12, gamma=3, ignore_eos=True)
    expected = [decode(target, [p], config).outputs[0].token_ids for p in prompts]
    result = decode(target, prompts, config, ModelDrafter(load_model(zoo / "draft-xs", dtype="float64")))
    assert [o.token_ids for o in result.outputs] == expected
    assert sum(r.state_s for r in result.rounds) > 0
