"""A CPU-training-friendly forward for transformers' fused MoE experts (Qwen3-MoE and alike).

Shape legend: T tokens, H hidden, K top-k, E experts, I expert width.

Why: transformers' eager expert loop indexes the fused weights one expert at a time
(`gate_up_proj[e]`), and the backward of each such index materialises a zero gradient the size of
all E experts; at the zoo's sizes that makes the MoE's backward pass several times its forward.
Here the weights are unbound once, so the backward stacks the E expert gradients in one go, and
tokens are sorted by expert so each expert runs one matmul over a contiguous slice. The arithmetic
per expert is the eager loop's, and outputs are added per token in ascending expert order as there.
Used for training only; saved checkpoints load with transformers' own implementations.
"""

import torch
import torch.nn.functional as F
from transformers.integrations.moe import ExpertsInterface

NAME = "specmoe_sorted"


def sorted_experts_forward(
    self,
    hidden_states: torch.Tensor,  # [T, H]
    top_k_index: torch.Tensor,  # [T, K] selected experts
    top_k_weights: torch.Tensor,  # [T, K] their routing weights
) -> torch.Tensor:
    """[T, H]: sum over each token's K experts of weight x down(act(gate(x)) * up(x))."""
    top_k = top_k_index.shape[1]
    flat_experts = top_k_index.reshape(-1)  # [T * K]
    order = flat_experts.argsort(stable=True)  # slots grouped by expert, token order kept within
    tokens = order // top_k  # [T * K] the token behind each sorted slot
    counts = torch.bincount(flat_experts, minlength=self.num_experts).tolist()
    gate_up, down = self.gate_up_proj.unbind(0), self.down_proj.unbind(0)  # E x [2I, H], E x [H, I]
    outputs = []
    for expert, states in enumerate(hidden_states[tokens].split(counts)):
        if counts[expert]:
            gate, up = F.linear(states, gate_up[expert]).chunk(2, dim=-1)
            outputs.append(F.linear(self.act_fn(gate) * up, down[expert]))
    weighted = torch.cat(outputs) * top_k_weights.reshape(-1)[order, None]  # [T * K, H]
    return torch.zeros_like(hidden_states).index_add_(0, tokens, weighted.to(hidden_states.dtype))


def register() -> str:
    """Make the forward available as `model.set_experts_implementation(NAME)`; idempotent."""
    ExpertsInterface.register(NAME, sorted_experts_forward)
    return NAME
