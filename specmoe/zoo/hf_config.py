"""Translate a zoo `ModelShape` into the transformers config it is saved and loaded with."""

from transformers import (
    PretrainedConfig,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)

from specmoe.zoo.presets import MTP, ModelShape, ZooPreset
from specmoe.zoo.tokenizer import EOS_TOKEN_ID


def hf_config(shape: ModelShape, preset: ZooPreset) -> PretrainedConfig:
    """The config.json content for one zoo model; weights are stored in bfloat16.

    `architectures` is set explicitly because loaders other than transformers' Auto classes (vLLM,
    llama.cpp's converter) pick the model class from it.
    """
    common = dict(
        vocab_size=preset.vocab_size,
        hidden_size=shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_q_heads,
        num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        max_position_embeddings=preset.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": preset.rope_theta},
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=EOS_TOKEN_ID,
        pad_token_id=EOS_TOKEN_ID,
        dtype="bfloat16",
    )
    config = _config(shape, common)
    plan = preset.training
    if plan is not None and MTP in plan.heads and shape.name == plan.teacher:
        config.mtp_num_hidden_layers = 1  # Qwen3.5's key: the checkpoint carries mtp.* too
    return config


def _config(shape: ModelShape, common: dict) -> PretrainedConfig:
    if shape.is_hybrid:
        return _hybrid_config(shape, common)
    if not shape.is_moe:
        return Qwen3Config(
            architectures=["Qwen3ForCausalLM"], intermediate_size=shape.intermediate_size, **common
        )
    return Qwen3MoeConfig(
        architectures=["Qwen3MoeForCausalLM"],
        num_experts=shape.num_experts,
        num_experts_per_tok=shape.top_k,
        moe_intermediate_size=shape.moe_intermediate_size,
        # Only read for dense layers, and there are none (decoder_sparse_step=1, no mlp_only_layers).
        intermediate_size=shape.moe_intermediate_size,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        # Renormalised top-k weights keep the MoE output scale independent of E and K, so sparsity
        # sweeps do not also change the residual-stream scale.
        norm_topk_prob=True,
        **common,
    )


def _hybrid_config(shape: ModelShape, common: dict) -> PretrainedConfig:
    """Qwen3.5 (dense) or Qwen3.5-MoE, text only: gated-DeltaNet layers with every n-th layer gated
    full attention, which rotates a quarter of each head's dimensions as Qwen3.5 does."""
    linear = shape.linear
    assert linear is not None
    hybrid = dict(
        layer_types=list(shape.layer_types),
        linear_num_key_heads=linear.key_heads,
        linear_num_value_heads=linear.value_heads,
        linear_key_head_dim=linear.head_dim,
        linear_value_head_dim=linear.head_dim,
        linear_conv_kernel_dim=linear.conv_kernel,
        **common,
    )
    hybrid["rope_parameters"] = {**common["rope_parameters"], "partial_rotary_factor": 0.25}
    if not shape.is_moe:
        return Qwen3_5TextConfig(
            architectures=["Qwen3_5ForCausalLM"], intermediate_size=shape.intermediate_size, **hybrid
        )
    return Qwen3_5MoeTextConfig(
        architectures=["Qwen3_5MoeForCausalLM"],
        num_experts=shape.num_experts,
        num_experts_per_tok=shape.top_k,
        moe_intermediate_size=shape.moe_intermediate_size,
        shared_expert_intermediate_size=shape.shared_expert_size,
        **hybrid,
    )
