"""Tiny random models that a backend refuses something on, built from transformers configs with the
tiny zoo's tokenizer (so a zoo model and one of these can be target and draft of each other)."""

from __future__ import annotations

import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def tiny_bloom(tiny_zoo: Path, path: Path) -> Path:
    """A tiny random Bloom: ALiBi positions, no position_ids, so a batch (B > 1) is refused."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "bloom", vocab_size=2048, hidden_size=32, n_layer=2, n_head=4, eos_token_id=0
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    for name in TOKENIZER_FILES:
        shutil.copy(tiny_zoo / "moe" / name, path / name)
    return path


# A Jamba of one attention and one Mamba layer, experts in every other layer: small, and its Mamba
# state is what a backend cannot roll back.
JAMBA_LAYOUT = dict(
    num_experts=2,
    num_experts_per_tok=1,
    attn_layer_period=2,
    attn_layer_offset=1,
    expert_layer_period=2,
    expert_layer_offset=1,
    mamba_d_state=4,
    mamba_dt_rank=4,
)


def tiny_jamba(tiny_zoo: Path, path: Path) -> Path:
    """A tiny random Jamba: Mamba layers beside attention, whose state cannot roll back, so SD is
    refused."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "jamba",
        vocab_size=2048,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        eos_token_id=0,
        **JAMBA_LAYOUT,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(path)
    for name in TOKENIZER_FILES:
        shutil.copy(tiny_zoo / "moe" / name, path / name)
    return path
