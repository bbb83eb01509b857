"""Read a network's shape from a Hugging Face config: expert counts, widths, layers, dtype.

Only what the performance model needs: how many weights a pass streams (dense part, one expert),
how many multiply-adds a token costs, and the MoE shape (E, K). Counting conventions follow
`specmoe.zoo.params`: gated (SwiGLU) MLPs with three matrices, no biases, untied embeddings unless
`tie_word_embeddings`, and the input embedding table read one row per token.

Keys that change the expert layout but are not modelled here (any key mentioning experts that is
not in `_EXPERT_KEYS`, MLA attention, quantisation) are rejected rather than ignored: ignoring
them would silently model a different network.
"""

from __future__ import annotations

from dataclasses import dataclass

from specmoe.dtypes import DTYPE_BYTES
from specmoe.errors import SpecmoeError

_EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_EXPERT_KEYS = {
    *_EXPERT_COUNT_KEYS,
    "num_experts_per_tok",
    "n_shared_experts",
    "shared_expert_intermediate_size",
}
_UNSUPPORTED = {
    "kv_lora_rank": "multi-head latent attention (DeepSeek MLA)",
    "q_lora_rank": "multi-head latent attention (DeepSeek MLA)",
    "quantization_config": "quantised weights",
}


def _text_config(config: dict) -> dict:
    """Multimodal checkpoints keep the language model's shape under `text_config`."""
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def moe_shape(config: dict, where: str) -> tuple[int, int]:
    """(E, K): routed experts per MoE layer and experts per token; (0, 0) for a dense model."""
    config = _text_config(config)
    experts = next((config[k] for k in _EXPERT_COUNT_KEYS if config.get(k)), 0)
    if not experts:
        return 0, 0
    top_k = config.get("num_experts_per_tok")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise SpecmoeError(
            f"{where}: num_experts_per_tok must be an integer in 1..{experts} for an MoE config, "
            f"got {top_k!r}"
        )
    return int(experts), int(top_k)


@dataclass(frozen=True)
class Architecture:
    """Parameter counts per pass. "dense" is everything every token uses except the input table."""

    name: str
    layers: int
    moe_layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    num_experts: int  # E per MoE layer, 0 for dense
    top_k: int  # K
    params_dense: int  # attention, dense MLPs, shared experts, routers, norms, lm_head
    params_per_expert: int  # one routed expert in every MoE layer together (3·H·I_e·L_moe)
    dtype: str

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def bytes_per_param(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values one cached token holds over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_param


def _int(config: dict, key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecmoeError(
            f"{where}: '{key}' must be an integer >= 1, got {value!r}; is this a decoder LM config?"
        )
    return value


def _check_keys(config: dict, where: str) -> None:
    for key in config:
        if key in _UNSUPPORTED:
            raise SpecmoeError(
                f"{where}: key '{key}' means {_UNSUPPORTED[key]}, which the model does not cover"
            )
        if "expert" in key and key not in _EXPERT_KEYS:
            raise SpecmoeError(
                f"{where}: unknown expert key '{key}' (it may change the expert layout); "
                f"supported: {', '.join(sorted(_EXPERT_KEYS))}"
            )


def _sparse_layers(config: dict, layers: int, experts: int) -> int:
    """MoE layers: Qwen's decoder_sparse_step and mlp_only_layers, DeepSeek's first_k_dense_replace."""
    if not experts:
        return 0
    step = config.get("decoder_sparse_step") or 1
    dense_only = set(config.get("mlp_only_layers") or [])
    first_dense = config.get("first_k_dense_replace") or 0
    return sum(1 for i in range(layers) if i not in dense_only and i >= first_dense and (i + 1) % step == 0)


def parse_architecture(config: dict, where: str, dtype: str | None = None) -> Architecture:
    """The Architecture of an HF config dict; `where` (the file) names it in errors."""
    if not isinstance(config, dict):
        raise SpecmoeError(f"{where} must hold a JSON object (a Hugging Face config.json)")
    config = _text_config(config)
    _check_keys(config, where)
    hidden = _int(config, "hidden_size", where)
    layers = _int(config, "num_hidden_layers", where)
    q_heads = _int(config, "num_attention_heads", where)
    kv_heads = _int(config, "num_key_value_heads", where, default=q_heads)
    head_dim = _int(config, "head_dim", where, default=hidden // q_heads)
    vocab = _int(config, "vocab_size", where)
    experts, top_k = moe_shape(config, where)
    moe_layers = _sparse_layers(config, layers, experts)
    dense_layers = layers - moe_layers
    attention = hidden * head_dim * (2 * q_heads + 2 * kv_heads)
    dense_ffn = 3 * hidden * _int(config, "intermediate_size", where) if dense_layers else 0
    params_dense = layers * (attention + 2 * hidden) + dense_layers * dense_ffn + hidden
    params_dense += vocab * hidden  # lm_head; tied or not, every pass reads it once
    params_per_expert = 0
    if experts:
        expert_width = _int(config, "moe_intermediate_size", where, default=config.get("intermediate_size"))
        shared = (
            config.get("shared_expert_intermediate_size")
            or (config.get("n_shared_experts") or 0) * expert_width
        )
        params_dense += moe_layers * (experts * hidden + 3 * hidden * shared)  # routers, shared experts
        params_per_expert = moe_layers * 3 * hidden * expert_width
    dtype = dtype or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise SpecmoeError(f"{where}: dtype '{dtype}' is not one of {', '.join(DTYPE_BYTES)}; pass --dtype")
    return Architecture(
        name=str(config.get("model_type", where)),
        layers=layers,
        moe_layers=moe_layers,
        hidden=hidden,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        num_experts=experts,
        top_k=top_k,
        params_dense=params_dense,
        params_per_expert=params_per_expert,
        dtype=dtype,
    )
