"""Tiny random models of every causal-LM type the pinned transformers registers, for the
architecture sweep (tests/test_architecture_sweep.py).

A type's default config is shrunk key by key (only keys its config has: the same sizes under each
family's own names), its experts too, and built first on the meta device so that a config the
shrinking misses (a vision tower, a size under a name not listed) is skipped by its parameter
count, never allocated. Matrices are redrawn larger than transformers' init (std 0.3, embeddings
1.0) so that logits separate and greedy choices are not near-ties. A draft is the same model with
noise added to every matrix: it agrees with its target often, not always.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

VOCAB = 128
MAX_PARAMS = 3_000_000  # a tiny config stays far below; a larger one kept a size the shrink missed

# Sizes under every spelling the families use; a key is set only where the default config has it.
SHRINK = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "head_dim": 8,
    "max_position_embeddings": 256,
    "n_embd": 32,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 256,
    "n_inner": 64,
    "d_model": 32,
    "n_layers": 2,
    "n_heads": 4,
    "num_layers": 2,
    "ffn_dim": 64,
    "d_ff": 64,
    "ffn_hidden_size": 64,
    "embed_dim": 32,
    "num_heads": 4,
    "num_kv_heads": 2,
    "kv_channels": 8,
    "kv_lora_rank": 16,
    "q_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 8,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_k": 2,
    "moe_topk": 2,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "sliding_window": 16,
    "state_size": 8,
    "ssm_state_size": 8,
    "mamba_d_state": 8,
    "mamba_dt_rank": 4,
    "time_step_rank": 4,
    "conv_kernel": 4,
    "expand": 2,
    "rope_dim": 8,
    "partial_rotary_factor": 1.0,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
    "is_decoder": True,  # an encoder family registered as a causal LM decodes causally only so
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


# Where a family's default would leave two layers without the kind that sets it apart, or where
# its sizes are tied together otherwise.
_MLA = {"num_key_value_heads": 4}  # multi-head latent attention: as many key/value heads as queries
FAMILY_FIELDS = {
    "lfm2": {"layer_types": ["conv", "full_attention"]},
    "jamba": {
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
    },
    "mamba2": {"num_heads": 4, "head_dim": 16, "n_groups": 1},  # hidden x expand = heads x head_dim
    "dbrx": {
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
        "ffn_config": {"ffn_hidden_size": 16, "moe_num_experts": 4, "moe_top_k": 2},
    },
    "deepseek_v2": _MLA,
    "deepseek_v3": _MLA,
}


@dataclass(frozen=True)
class Built:
    """A saved tiny target and its noisy draft, or why none was built (`skipped`)."""

    target: Path | None = None
    draft: Path | None = None
    skipped: str = ""


def causal_lm_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def tiny_config(model_type: str):
    """The type's default config with every listed size it has shrunk (`SHRINK`), a text config too,
    then the family's own fields (`FAMILY_FIELDS`)."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    keys = default.to_dict()
    fields = {key: value for key, value in SHRINK.items() if key in keys}
    if keys.get("sliding_window") is None:  # null is no window (Mixtral, Phi-3): none is added
        fields.pop("sliding_window", None)
    text = getattr(default, "text_config", None)
    if text is not None and hasattr(text, "to_dict"):
        fields["text_config"] = {
            **text.to_dict(),
            **{key: value for key, value in SHRINK.items() if key in text.to_dict()},
        }
    layer_types = default.to_dict().get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        fields["layer_types"] = _two_layers(layer_types)
    fields.update(FAMILY_FIELDS.get(model_type, {}))
    return AutoConfig.for_model(model_type, **fields)


def _two_layers(layer_types: list[str]) -> list[str]:
    """Two layer kinds that keep the pattern's first two distinct kinds (a hybrid stays hybrid)."""
    kinds = list(dict.fromkeys(layer_types))
    return (kinds * 2)[:2] if len(kinds) > 1 else layer_types[:2]


def build(model_type: str, directory: Path, noise: float = 0.03) -> Built:
    """Save a tiny float64 target and its noisy draft under `directory`, or say why not."""
    from transformers import AutoModelForCausalLM

    try:
        config = tiny_config(model_type)
    except Exception as err:  # transformers' own config code: the type cannot be shrunk here
        return Built(skipped=f"no tiny config ({type(err).__name__}: {_line(err)})")
    if getattr(config, "is_encoder_decoder", False):
        return Built(skipped="encoder-decoder")
    try:
        with torch.device("meta"):
            meta = AutoModelForCausalLM.from_config(config)
    except Exception as err:
        return Built(skipped=f"cannot build ({type(err).__name__}: {_line(err)})")
    size = sum(p.numel() for p in meta.parameters())
    if size > MAX_PARAMS:
        return Built(skipped=f"cannot build tiny ({size / 1e6:.1f}M parameters after shrinking)")
    paths = []
    for name, amount in (("target", 0.0), ("draft", noise)):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).to(torch.float64)
        _redraw(model, amount)
        if model._can_set_experts_implementation():  # transformers' default grouped_mm has no float64
            model.set_experts_implementation("eager")
        try:
            model(input_ids=torch.tensor([[3, 4, 5]]))
        except Exception as err:  # transformers' own forward fails on the tiny config
            return Built(skipped=f"transformers' forward fails ({type(err).__name__}: {_line(err)})")
        model.save_pretrained(directory / name)
        paths.append(directory / name)
    return Built(*paths)


def _redraw(model, noise: float) -> None:
    weights, perturbation = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() > 1:
                std = 1.0 if "embed" in name or "wte" in name else 0.3
                param.copy_(torch.randn(param.shape, generator=weights, dtype=param.dtype) * std)
                param.add_(noise * torch.randn(param.shape, generator=perturbation, dtype=param.dtype))


def _line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:120] if text else ""
