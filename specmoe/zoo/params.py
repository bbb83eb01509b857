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
    """q/k/v/o projections (no biases) plus Qwen3's per-head q_norm and k_norm."""
    h, d = shape.hidden_size, shape.head_dim
    q_out, kv_out = shape.num_q_heads * d, shape.num_kv_heads * d
    return 2 * h * q_out + 2 * h * kv_out + 2 * d


def count_params(shape: ModelShape, vocab_size: int) -> ParamCount:
    h = shape.hidden_size
    embedding = vocab_size * h
    layer_norms = 2 * h
    per_layer_fixed = attention_params(shape) + layer_norms
    if shape.is_moe:
        per_expert = 3 * h * shape.moe_intermediate_size
        router = shape.num_experts * h
        per_layer_total = per_layer_fixed + router + shape.num_experts * per_expert
        per_layer_active = per_layer_fixed + router + shape.top_k * per_expert
        moe_layers = shape.num_layers
    else:
        per_expert = 0
        per_layer_total = per_layer_active = per_layer_fixed + 3 * h * shape.intermediate_size
        moe_layers = 0
    outside_layers = 2 * embedding + h  # input table, lm_head, final norm
    return ParamCount(
        total=outside_layers + shape.num_layers * per_layer_total,
        active=outside_layers + shape.num_layers * per_layer_active,
        embedding=embedding,
        per_expert=per_expert,
        moe_layers=moe_layers,
    )
