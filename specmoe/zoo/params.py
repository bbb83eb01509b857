"""Parameter counts computed from a shape alone, without allocating any weights.

Conventions (used for every ratio the zoo reports):
- Embeddings are untied: the input table and lm_head are separate V x H matrices and both count.
- "Active" parameters are those a single token's forward pass uses: everything except the
  (E - K) experts per MoE layer the router did not pick. The input embedding table counts in full
  even though one row is read, following how Mixtral and Qwen report active sizes; cost models
  that want bytes read per token can subtract `embedding` and add one row (H).
"""

from dataclasses import dataclass

from specmoe.zoo.presets import ModelShape

BF16_BYTES = 2


@dataclass(frozen=True)
class ParamCount:
    total: int
    active: int
    embedding: int  # the input table alone (V x H); lm_head is inside total/active
    per_expert: int  # one expert's gate, up and down projections; 0 for dense models
    moe_layers: int

    @property
    def bf16_bytes(self) -> int:
        return self.total * BF16_BYTES


def attention_params(shape: ModelShape) -> int:
    """q/k/v/o projections (no biases) plus Qwen3's per-head q_norm and k_norm. Qwen3.5's attention
    is gated: q_proj also writes a sigmoid gate per query channel."""
    h, d = shape.hidden_size, shape.head_dim
    q_out, kv_out = shape.num_q_heads * d, shape.num_kv_heads * d
    gated = 2 if shape.is_hybrid else 1
    return gated * h * q_out + h * q_out + 2 * h * kv_out + 2 * d


def linear_attention_params(shape: ModelShape) -> int:
    """One gated-DeltaNet layer: the q/k/v, gate (z), beta (b) and decay (a) input projections, the
    depthwise causal conv over q/k/v, per-value-head dt bias and A, the gated norm, out_proj."""
    linear, h = shape.linear, shape.hidden_size
    if linear is None:
        return 0
    value = linear.value_heads * linear.head_dim
    conv_channels = 2 * linear.key_heads * linear.head_dim + value
    projections = h * (conv_channels + value + 2 * linear.value_heads) + value * h
    return projections + conv_channels * linear.conv_kernel + 2 * linear.value_heads + linear.head_dim


def count_params(shape: ModelShape, vocab_size: int) -> ParamCount:
    h = shape.hidden_size
    embedding = vocab_size * h
    layer_norms = 2 * h
    mixers = sum(
        attention_params(shape) if kind == "full_attention" else linear_attention_params(shape)
        for kind in shape.layer_types
    )
    fixed = mixers + shape.num_layers * layer_norms
    if shape.is_moe:
        per_expert = 3 * h * shape.moe_intermediate_size
        router = shape.num_experts * h
        shared = 3 * h * shape.shared_expert_size + h if shape.shared_expert_size else 0  # and its gate
        per_layer_total = router + shared + shape.num_experts * per_expert
        per_layer_active = router + shared + shape.top_k * per_expert
        moe_layers = shape.num_layers
    else:
        per_expert = 0
        per_layer_total = per_layer_active = 3 * h * shape.intermediate_size
        moe_layers = 0
    outside_layers = 2 * embedding + h  # input table, lm_head, final norm
    return ParamCount(
        total=outside_layers + fixed + shape.num_layers * per_layer_total,
        active=outside_layers + fixed + shape.num_layers * per_layer_active,
        embedding=embedding,
        per_expert=per_expert,
        moe_layers=moe_layers,
    )
