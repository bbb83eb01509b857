"""Read a network's shape from a Hugging Face config: expert counts, widths, layers, storage format.

Only what the performance model needs: how many weights a pass streams (dense part, one expert),
how many bytes each sequence's cache holds or carries, how many multiply-adds a cached token costs,
and the MoE shape (E, K). Counting conventions follow `specmoe.zoo.params`: gated (SwiGLU) MLPs with
three matrices, no biases, untied embeddings unless `tie_word_embeddings`, and the input embedding
table read one row per token.

Attention comes in three kinds, each costed by what it stores per sequence:

    grouped-query (GQA)     2·kv_heads·head_dim elements per cached token and layer
    multi-head latent (MLA) kv_lora_rank + qk_rope_head_dim per cached token and layer, the
                            compressed latent that DeepSeek-V2/V3 and Kimi K2 cache; the up-
                            projections are absorbed into the query, so attention reads only it
    gated DeltaNet (linear) no per-token cache: a constant state of value_heads·key_dim·value_dim
                            (float32) per layer, read and written once per step whatever the
                            context (Qwen3-Next / Qwen3.5 hybrids, `layer_types` or
                            `full_attention_interval` saying which layers are full attention)

Keys that change the expert layout but are not modelled here (any key mentioning experts that is
not in `_EXPERT_KEYS`) are rejected rather than ignored: ignoring them would silently model a
different network.
"""

from __future__ import annotations

from dataclasses import dataclass

from specmoe.backends.config_shape import check_config_shape
from specmoe.errors import SpecmoeError
from specmoe.perf.formats import FORMATS, WeightFormat, format_of_quantization, weight_format

_EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token")
_EXPERT_KEYS = {
    *_EXPERT_COUNT_KEYS,
    *_TOP_K_KEYS,
    "n_shared_experts",
    "shared_expert_intermediate_size",
}
_STATE_BYTES = 4  # linear-attention state is kept in float32 by the reference kernels
# Layer kinds in `layer_types` the model costs: a KV cache (full; sliding and chunked windows are
# costed as full attention, an upper bound) or a gated-DeltaNet state (linear).
_LAYER_KINDS = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")


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
    top_k = next((config[k] for k in _TOP_K_KEYS if k in config), None)
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
    weights: WeightFormat
    kv: WeightFormat  # the KV cache's element format (may differ from the weights')
    kv_elements_per_token: int = 0  # cached elements per token over all full-attention layers
    attention_flops_per_token: int = 0  # multiply-adds ×2 one new token spends per cached token
    state_bytes: int = 0  # per-sequence constant state (linear attention), read + written per step
    params_attention: int = 0  # one full-attention layer's projections (q, k, v, o or MLA's)
    params_layer_ffn: int = 0  # one dense layer's MLP (for heads built from one target layer)
    attention_layers: int = 0  # layers with a KV cache (the rest are linear attention)
    params_linear: int = 0  # every linear-attention layer's projections, conv and norms together

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def linear_bytes(self) -> float:
        """Bytes of the linear-attention layers' weights: what re-running them over a few tokens reads."""
        return self.params_linear * self.bytes_per_param

    @property
    def dtype(self) -> str:
        return self.weights.name

    @property
    def bytes_per_param(self) -> float:
        return self.weights.bytes_per_weight

    @property
    def kv_bytes_per_token(self) -> float:
        """Keys and values (or MLA latents) one cached token holds over all layers."""
        return self.kv_elements_per_token * self.kv.bytes_per_weight


def _int(config: dict, key: str, where: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecmoeError(
            f"{where}: '{key}' must be an integer >= 1, got {value!r}; is this a decoder LM config?"
        )
    return value


def _check_keys(config: dict, where: str) -> None:
    for key in config:
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


def _full_attention_layers(config: dict, layers: int, where: str) -> int:
    """Layers with a KV cache; the rest of a hybrid model are linear attention."""
    types = config.get("layer_types")
    if isinstance(types, list) and types:  # its shape is checked by `check_config_shape`
        unknown = next((t for t in types if t not in _LAYER_KINDS), None)
        if unknown is not None:
            raise SpecmoeError(
                f"{where}: layer_types holds '{unknown}', a layer this model cannot cost; it costs "
                f"{', '.join(_LAYER_KINDS)} layers (sliding and chunked as full attention)"
            )
        return sum(1 for t in types if t != "linear_attention")
    interval = config.get("full_attention_interval")
    if interval:
        return sum(1 for i in range(layers) if (i + 1) % _int(config, "full_attention_interval", where) == 0)
    return layers


@dataclass(frozen=True)
class _Attention:
    params: int  # one full-attention layer's projections
    kv_elements: int  # cached elements per token in one layer
    flops_per_cached: int  # FLOPs a new token spends on one cached token in one layer


def _attention(
    config: dict, hidden: int, q_heads: int, kv_heads: int, head_dim: int, where: str
) -> _Attention:
    if "kv_lora_rank" not in config:
        return _Attention(
            params=hidden * head_dim * (2 * q_heads + 2 * kv_heads),
            kv_elements=2 * kv_heads * head_dim,
            flops_per_cached=4 * q_heads * head_dim,  # QKᵀ and AV, 2 FLOPs per multiply-add
        )
    latent = _int(config, "kv_lora_rank", where)
    rope = _int(config, "qk_rope_head_dim", where)
    nope = _int(config, "qk_nope_head_dim", where)
    value = _int(config, "v_head_dim", where)
    q_rank = config.get("q_lora_rank")
    q_head = q_heads * (nope + rope)
    query = hidden * q_rank + q_rank * q_head if q_rank else hidden * q_head
    keys_values = hidden * (latent + rope) + latent * q_heads * (nope + value)
    return _Attention(
        params=query + keys_values + q_heads * value * hidden,
        kv_elements=latent + rope,
        # absorbed: scores over the latent and its rope part, values read back from the latent
        flops_per_cached=2 * q_heads * (2 * latent + rope),
    )


def _linear_attention(config: dict, hidden: int, where: str) -> tuple[int, int]:
    """(params, state elements) of one gated-DeltaNet layer (Qwen3-Next's linear attention)."""
    key_heads = _int(config, "linear_num_key_heads", where)
    value_heads = _int(config, "linear_num_value_heads", where)
    key_dim = _int(config, "linear_key_head_dim", where)
    value_dim = _int(config, "linear_value_head_dim", where)
    kernel = config.get("linear_conv_kernel_dim") or 4
    mixed = 2 * key_heads * key_dim + value_heads * value_dim  # q, k, v through the short conv
    params = hidden * (mixed + value_heads * value_dim + 2 * value_heads)  # qkv, z gate, β and a
    params += value_heads * value_dim * hidden + mixed * kernel  # out projection, conv taps
    state = value_heads * key_dim * value_dim + mixed * (kernel - 1)
    return params, state


def _formats(config: dict, raw: dict, where: str, dtype: str | None, kv_dtype: str | None):
    if dtype:
        weights = weight_format(dtype, "--dtype")
    else:
        quant = raw.get("quantization_config") or raw.get("quantization")
        weights = format_of_quantization(quant) if isinstance(quant, dict) else None
        if isinstance(quant, dict) and weights is None:
            raise SpecmoeError(
                f"{where}: its quantisation block ({quant.get('quant_method', 'unnamed')}) is not one "
                "this model can cost; pass --dtype (e.g. int4, fp8, q4_k_m, mlx-4bit)"
            )
        name = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
        weights = weights or weight_format(name, f"{where} torch_dtype")
    if kv_dtype:
        kv = weight_format(kv_dtype, "--kv-dtype")
    else:  # caches stay in the activations' dtype unless asked: 16-bit for every quantised format
        kv = weights if weights.family == "float" else FORMATS["float16"]
    return weights, kv


def parse_architecture(
    config: dict, where: str, dtype: str | None = None, kv_dtype: str | None = None
) -> Architecture:
    """The Architecture of an HF config dict; `where` (the file) names it in errors. `dtype` and
    `kv_dtype` (format names, `specmoe.perf.formats`) override what the config says."""
    check_config_shape(config, where, "pass the model's own config.json")
    raw, config = config, _text_config(config)
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
    attention = _attention(config, hidden, q_heads, kv_heads, head_dim, where)
    full = _full_attention_layers(config, layers, where)
    linear_params, state = _linear_attention(config, hidden, where) if full < layers else (0, 0)
    intermediate = config.get("intermediate_size")
    layer_ffn = 3 * hidden * _int(config, "intermediate_size", where) if intermediate or dense_layers else 0
    params_dense = full * attention.params + (layers - full) * linear_params + 2 * hidden * layers
    params_dense += dense_layers * layer_ffn + hidden
    params_dense += vocab * hidden  # lm_head; tied or not, every pass reads it once
    params_per_expert = 0
    if experts:
        expert_width = _int(config, "moe_intermediate_size", where, default=intermediate)
        shared = (
            config.get("shared_expert_intermediate_size")
            or (config.get("n_shared_experts") or 0) * expert_width
        )
        params_dense += moe_layers * (experts * hidden + 3 * hidden * shared)  # routers, shared experts
        params_per_expert = moe_layers * 3 * hidden * expert_width
    weights, kv = _formats(config, raw, where, dtype, kv_dtype)
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
        weights=weights,
        kv=kv,
        kv_elements_per_token=full * attention.kv_elements,
        attention_flops_per_token=full * attention.flops_per_cached,
        state_bytes=(layers - full) * state * _STATE_BYTES,
        params_linear=(layers - full) * linear_params,
        params_attention=attention.params,
        params_layer_ffn=layer_ffn,
        attention_layers=full,
    )
