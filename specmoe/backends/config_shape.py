"""The shape keys of a Hugging Face config.json, checked before anything is built from them.

Two readers build a network from these keys: the hf backend (transformers makes the model from a
directory's config.json) and the performance model (`specmoe.perf.structure` costs a network from a
config alone). A value no network can have must end in one line naming the key, not in a model of
another shape: `num_experts = 0` beside `num_experts_per_tok = 8` read as a dense model, a
`decoder_sparse_step` of 0 read as 1, a top-k of 0 that routes every token to no expert, a negative
convolution width costed as negative bytes, or transformers' ZeroDivisionError and IndexError.

Only keys that are present are checked (a dense config has no expert keys, most have no
`head_dim`), and null counts as absent, as transformers reads it. A multimodal checkpoint keeps the
language model's shape under `text_config`, which is checked as merged over the outer keys.
"""

from __future__ import annotations

from typing import Any

from specmoe.errors import SpecmoeError

POSITIVE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "moe_intermediate_size",
    "decoder_sparse_step",
    "full_attention_interval",
    "linear_conv_kernel_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
)
NON_NEGATIVE_KEYS = ("n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace")
# The keys that state routed experts per MoE layer and experts per token, across the families
# (ERNIE 4.5 spells them moe_num_experts and moe_k); DBRX nests its count in `ffn_config`.
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_topk", "moe_k")


def language_config(config: dict) -> dict:
    """The keys that shape the language model: `text_config` (multimodal checkpoints) over the rest."""
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def expert_count(config: dict) -> int:
    """Routed experts per MoE layer that a config.json object states; 0 for a dense model."""
    config = language_config(config)
    nested = config.get("ffn_config")
    scopes = (config, nested) if isinstance(nested, dict) else (config,)
    counts = (scope.get(key) for scope in scopes for key in EXPERT_COUNT_KEYS)
    return next((count for count in counts if _is_int(count, minimum=1)), 0)


def check_config_shape(config: Any, where: str, fix: str) -> None:
    """Raise SpecmoeError, one line naming `where` and the key, when the config's shape keys describe
    no network; `fix` is the caller's advice (restore the file, or check that it is an LM config)."""
    if not isinstance(config, dict):
        raise SpecmoeError(f"{where} must hold a JSON object (a Hugging Face config.json)")
    inner = config.get("text_config")
    if inner is not None and not isinstance(inner, dict):
        raise SpecmoeError(f"{where}: 'text_config' must be an object of the language model's keys; {fix}")
    config = language_config(config)

    def fail(problem: str) -> None:
        raise SpecmoeError(f"{where}: {problem}; {fix}")

    for key in POSITIVE_KEYS:
        if not _is_int(config.get(key), minimum=1, absent_ok=True):
            fail(f"'{key}' must be an integer >= 1, got {config[key]!r}")
    for key in (*NON_NEGATIVE_KEYS, *EXPERT_COUNT_KEYS, *TOP_K_KEYS):
        if not _is_int(config.get(key), minimum=0, absent_ok=True):
            fail(f"'{key}' must be an integer >= 0, got {config[key]!r}")
    _check_attention(config, fail)
    _check_experts(config, fail)
    _check_layer_lists(config, fail)


def _is_int(value: Any, minimum: int, absent_ok: bool = False) -> bool:
    if value is None:
        return absent_ok
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _check_attention(config: dict, fail) -> None:
    heads, kv_heads = config.get("num_attention_heads"), config.get("num_key_value_heads")
    if heads is not None and kv_heads is not None and heads % kv_heads:
        fail(
            f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads} "
            "(grouped-query attention shares each key/value head among whole groups of query heads)"
        )
    hidden = config.get("hidden_size")
    # Multi-head latent attention (kv_lora_rank) states its per-head widths (qk_nope_head_dim,
    # qk_rope_head_dim, v_head_dim), so hidden_size need not split into the heads: GLM-4.7-Flash
    # has 20 heads over 2048.
    split = config.get("head_dim") is None and config.get("kv_lora_rank") is None
    if split and hidden is not None and heads is not None and hidden % heads:
        fail(
            f"hidden_size {hidden} is not a multiple of num_attention_heads {heads} and no head_dim is given"
        )


def _check_experts(config: dict, fail) -> None:
    counts = {key: config[key] for key in EXPERT_COUNT_KEYS if config.get(key) is not None}
    if len(set(counts.values())) > 1:
        fail(f"the expert counts disagree ({', '.join(f'{k} {v}' for k, v in counts.items())})")
    experts = next(iter(counts.values()), None)
    top_key = next((key for key in TOP_K_KEYS if config.get(key) is not None), None)
    top_k = None if top_key is None else config[top_key]
    if experts is None or top_k is None:
        return
    if experts == 0 and top_k > 0:
        count_key = next(iter(counts))
        fail(
            f"{count_key} is 0 but {top_key} is {top_k}: an MoE model needs at least one expert per layer "
            f"(a dense model has neither key)"
        )
    if experts > 0 and not 1 <= top_k <= experts:
        fail(f"{top_key} must be between 1 and the {experts} experts, got {top_k}")


def _check_layer_lists(config: dict, fail) -> None:
    layers = config.get("num_hidden_layers")
    only = config.get("mlp_only_layers")
    if only is not None:
        if not isinstance(only, list) or not all(_is_int(i, minimum=0) for i in only):
            fail(f"'mlp_only_layers' must be a list of layer indices, got {only!r}")
        if layers is not None and any(i >= layers for i in only):
            fail(f"'mlp_only_layers' names layer {max(only)} of a {layers}-layer model")
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            fail(f"'layer_types' must be a list of layer kinds (strings), got {types!r}")
        if layers is not None and len(types) != layers:
            fail(f"'layer_types' has {len(types)} entries for {layers} layers")
