"""The experts kernel is chosen from the model, not from config keys that each family spells its own
way: ERNIE 4.5 (`moe_num_experts`) decodes exactly in float64 with transformers' experts dispatch,
DBRX (`ffn_config.moe_num_experts`, its own experts code) is MoE and refuses a kernel it would
ignore, and a kernel without a float64 path is refused in one line, never run into a RuntimeError."""

from __future__ import annotations

import pytest
import torch
from hybrid_models import draw_weights

from specmoe.api import load_model
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.errors import SpecmoeError

TINY = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)


def _ernie():
    from transformers import AutoConfig

    return AutoConfig.for_model(
        "ernie4_5_moe",
        intermediate_size=48,
        moe_intermediate_size=16,
        moe_num_experts=4,
        moe_k=2,
        moe_layer_start_index=0,
        **TINY,
    )


def _dbrx():
    from transformers import AutoConfig

    return AutoConfig.for_model(
        "dbrx",
        d_model=32,
        n_heads=4,
        n_layers=2,
        max_seq_len=256,
        vocab_size=128,
        attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
        ffn_config={"ffn_hidden_size": 16, "moe_num_experts": 4, "moe_top_k": 2},
    )


def _save(config, path, noise: float = 0.0):
    """A random model (the same weights for the same config); noise > 0 perturbs it into a draft
    that sometimes disagrees with the noiseless one."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    draw_weights(model, noise, seed=1, embed_std=0.3)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def ernie(tmp_path_factory):
    return _save(_ernie(), tmp_path_factory.mktemp("ernie"))


def test_ernie_moe_decodes_exactly_in_float64_plain_and_speculative(ernie, tmp_path):
    target = load_model(ernie, dtype="float64")
    assert target.is_moe
    assert target.model.config._experts_implementation == "eager"  # not transformers' grouped_mm
    draft = load_model(_save(_ernie(), tmp_path / "draft", noise=0.2), dtype="float64")
    prompts = [[3, 14, 15, 92, 65], [35, 89], [7]]
    config = DecodeConfig(max_new_tokens=8, gamma=3, ignore_eos=True)
    expected = [decode(target, [p], config).outputs[0].token_ids for p in prompts]
    result = decode(target, prompts, config, ModelDrafter(draft))
    assert [o.token_ids for o in result.outputs] == expected


@pytest.mark.parametrize("kernel", ["eager", "batched_mm"])
def test_an_asked_kernel_is_honoured(ernie, kernel):
    target = load_model(ernie, dtype="float64", experts_implementation=kernel)
    assert target.model.config._experts_implementation == kernel


@pytest.mark.parametrize(("kernel", "says"), [("grouped_mm", "no float64 kernel"), ("fast", "unknown")])
def test_a_kernel_that_cannot_run_is_refused_in_one_line(ernie, kernel, says):
    with pytest.raises(SpecmoeError) as refused:
        load_model(ernie, dtype="float64", experts_implementation=kernel)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_dbrx_is_moe_and_refuses_a_kernel_it_would_ignore(tmp_path):
    path = _save(_dbrx(), tmp_path / "dbrx")
    target = load_model(path, dtype="float64")
    assert target.is_moe
    assert len(decode(target, [[3, 4, 5]], DecodeConfig(max_new_tokens=3)).outputs[0].token_ids) == 3
    with pytest.raises(SpecmoeError) as refused:
        load_model(path, dtype="float64", experts_implementation="eager")
    assert "run their own code" in str(refused.value) and "\n" not in str(refused.value)
