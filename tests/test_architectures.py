"""Greedy SD is exact for every architecture family the HF backend claims, not only the zoo's.

Each family gets a tiny random model built from its transformers config (float64), used as target;
the zoo-independent draft is a tiny Llama with the same vocabulary.
"""

from __future__ import annotations

import pytest
import torch

from specmoe.api import load_model
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter

VOCAB = 96
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=2,
    max_position_embeddings=256,
    tie_word_embeddings=False,
)


def _configs():
    import transformers as tf

    moe = dict(intermediate_size=48)
    return {
        "llama": tf.LlamaConfig(intermediate_size=64, **COMMON),
        "qwen2": tf.Qwen2Config(intermediate_size=64, **COMMON),
        "qwen3": tf.Qwen3Config(intermediate_size=64, head_dim=8, **COMMON),
        "qwen2_moe": tf.Qwen2MoeConfig(
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
            **moe,
            **COMMON,
        ),
        "qwen3_moe": tf.Qwen3MoeConfig(
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, head_dim=8, **moe, **COMMON
        ),
        "mixtral": tf.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **moe, **COMMON),
        "olmoe": tf.OlmoeConfig(num_experts=8, num_experts_per_tok=2, **moe, **COMMON),
    }


def _save(config, path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    for name, param in model.named_parameters():
        torch.nn.init.normal_(param, std=1.0 if "embed" in name else 0.3)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    import transformers as tf

    config = tf.LlamaConfig(intermediate_size=32, **{**COMMON, "num_hidden_layers": 1})
    return load_model(_save(config, tmp_path_factory.mktemp("draft")), dtype="float64")


@pytest.mark.parametrize("family", list(_configs()))
def test_greedy_sd_is_exact_for_each_family(family, draft, tmp_path):
    target = load_model(_save(_configs()[family], tmp_path / family), dtype="float64")
    prompts = [[3, 14, 15, 92, 65], [35, 89], [7]]
    config = DecodeConfig(max_new_tokens=16, gamma=3, ignore_eos=True)
    expected = [decode(target, [p], config).outputs[0].token_ids for p in prompts]
    result = decode(target, prompts, config, ModelDrafter(draft))
    assert [o.token_ids for o in result.outputs] == expected
    assert target.is_moe == ("moe" in family or family == "mixtral")
