"""specmoe's MoE experts implementations, registered with transformers by name (`register`).

- `specmoe_gathered` (NAME), the compiled path's on CPU: each token's K expert matrices indexed
  inside one contraction (below);
- `specmoe_sized` (SIZED), the eager default on a GPU: transformers' `batched_mm` for a block whose
  T x K routed pairs fit in E, its `grouped_mm` beyond (`sized_experts_forward`).

Shape legend: T tokens, H hidden, K top-k, E experts, I expert width.

gpt-fast's MoE recipe. `gate_up_proj[top_k_index]` is [T, K, 2I, H]; written as an einsum over it,
inductor fuses the indexing into the reduction it generates, so a decode step streams the K routed
experts' weights once, in one kernel, with no copy, no host read of the routing and no graph break.
transformers' `grouped_mm` on CPU outside bf16 loops over experts reading offsets on the host (a
graph break per layer under torch.compile), and eager indexing would copy T x K expert matrices;
measured on this CPU, the bench MoE's compiled T(1,1) in float32 went from 31 to 17 ms
(docs/decoding.md).

The fused read costs T x K expert matrices where the routed tokens touch at most E distinct ones,
so it is used only while T x K <= E and only inside a compiled graph; otherwise (eager prefill,
wide batches) the forward is transformers' `grouped_mm`, or its per-expert loop in float64, where
`grouped_mm` has no kernel. Both branches compute the same sum; only the order of additions differs.
"""

from __future__ import annotations

import torch

from specmoe.backends.config_shape import expert_count
from specmoe.errors import SpecmoeError

NAME = "specmoe_gathered"
SIZED = "specmoe_sized"
# Kernels with a float64 path: transformers' grouped_mm has none (torch's grouped matmul takes
# float32, bfloat16 or float16 only), and SIZED runs it beyond decode-sized blocks.
FLOAT64_KERNELS = ("eager", "batched_mm", NAME)


def gathered_experts_forward(
    self,
    hidden_states: torch.Tensor,  # [T, H]
    top_k_index: torch.Tensor,  # [T, K] selected experts
    top_k_weights: torch.Tensor,  # [T, K] their routing weights
) -> torch.Tensor:
    """[T, H]: sum over each token's K experts of weight x down(act(gate(x)) * up(x))."""
    tokens, top_k = top_k_index.shape
    if not (torch.compiler.is_compiling() and tokens * top_k <= self.num_experts and _standard_layout(self)):
        return _fallback(self, hidden_states, top_k_index, top_k_weights)
    gate_up = torch.einsum("th,tkoh->tko", hidden_states, self.gate_up_proj[top_k_index])  # [T, K, 2I]
    gate, up = gate_up.chunk(2, dim=-1)
    out = torch.einsum("tki,tkhi->tkh", self.act_fn(gate) * up, self.down_proj[top_k_index])  # [T, K, H]
    return (out * top_k_weights[..., None].to(out.dtype)).sum(1).to(hidden_states.dtype)


def _standard_layout(experts) -> bool:
    """Fused [E, 2I, H] gate-up and [E, H, I] down weights, no biases: Qwen3-MoE and alike."""
    return (
        getattr(experts, "has_gate", True)
        and getattr(experts, "is_concatenated", True)
        and not getattr(experts, "is_transposed", False)
        and not getattr(experts, "has_bias", False)
        and not getattr(experts, "has_post_expert_norm", False)
    )


def _fallback(experts, hidden_states, top_k_index, top_k_weights) -> torch.Tensor:
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    if hidden_states.dtype == torch.float64 or "grouped_mm" not in ALL_EXPERTS_FUNCTIONS:
        loop = type(experts).forward.__wrapped__  # the model's own per-expert loop
        return loop(experts, hidden_states, top_k_index, top_k_weights)
    return ALL_EXPERTS_FUNCTIONS["grouped_mm"](experts, hidden_states, top_k_index, top_k_weights)


def sized_experts_forward(
    self,
    hidden_states: torch.Tensor,  # [T, H]
    top_k_index: torch.Tensor,  # [T, K]
    top_k_weights: torch.Tensor,  # [T, K]
) -> torch.Tensor:
    """[T, H]: transformers' `batched_mm` while T x K <= E, its `grouped_mm` beyond.

    What `generate()` does on a GPU (`GenerationMixin._optimize_model_for_decode`): prefill with
    `grouped_mm`, every decode step with `batched_mm`, which gathers each routed pair's expert
    matrices and multiplies them in one batched matmul, with no host read: `grouped_mm` outside
    bf16 on CUDA loops over experts reading their offsets on the host, a wait for the GPU in every
    layer of every step. specmoe's blocks are not tagged prefill or decode, and its verify blocks
    are (gamma + 1) x B tokens, so the choice goes by size: `batched_mm` copies T x K expert
    matrices, so it is used while they are at most the E that `grouped_mm` reads at most; a prefill
    or a wide verify block takes `grouped_mm`, whose memory does not grow with T x K."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    tokens, top_k = top_k_index.shape
    name = "batched_mm" if tokens * top_k <= self.num_experts else "grouped_mm"
    return ALL_EXPERTS_FUNCTIONS[name](self, hidden_states, top_k_index, top_k_weights)


NAMES = {NAME: gathered_experts_forward, SIZED: sized_experts_forward}
KERNELS = ("eager", "batched_mm", "grouped_mm", NAME, SIZED)


def experts_modules(model) -> list[torch.nn.Module]:
    """The model's experts modules whose kernel `experts_implementation` picks: those of a class that
    transformers' `use_experts_implementation` decorates (it gives each instance its weight-layout
    flags, read here). Found on the model, not from config keys, which every family spells its own
    way; a family with its own experts code (DBRX) has none."""
    from transformers import PreTrainedModel

    # a head drafter's module (EAGLE-3) is no PreTrainedModel: nothing of transformers dispatches it
    if not isinstance(model, PreTrainedModel) or not model._can_set_experts_implementation():
        return []
    return [m for m in model.modules() if isinstance(vars(m).get("is_concatenated"), bool)]


def set_kernel(model, name: str, requested: str | None, default: str, dtype: torch.dtype) -> None:
    """Give the model's experts `requested` (--experts-implementation), or `default` when none was
    asked for. Refused in one line: an MoE model whose experts run their own code (the option would
    be silently ignored), an unknown kernel, a kernel with no path for the dtype. A dense model has
    nothing to set (a run's options reach its dense draft too)."""
    if not experts_modules(model):
        if requested is not None and expert_count(model.config.to_dict()):
            raise SpecmoeError(
                f"--experts-implementation {requested} was given, but the experts of '{name}' "
                f"({model.config.model_type}) run their own code, which transformers' kernels do not "
                "replace; drop --experts-implementation for this model"
            )
        return
    kernel = requested or default
    if kernel not in KERNELS:
        raise SpecmoeError(f"unknown experts implementation '{kernel}'; use one of {', '.join(KERNELS)}")
    if dtype == torch.float64 and kernel not in FLOAT64_KERNELS:
        raise SpecmoeError(
            f"experts implementation '{kernel}' has no float64 kernel; for --dtype float64 use one of "
            f"{', '.join(FLOAT64_KERNELS)}"
        )
    if kernel in NAMES:
        register()
    model.set_experts_implementation(kernel)


def register() -> None:
    """Make every implementation here available as `experts_implementation=<name>`; idempotent."""
    from transformers.integrations.moe import ExpertsInterface

    for name, forward in NAMES.items():
        ExpertsInterface.register(name, forward)
