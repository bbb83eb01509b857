"""The compiled path's gathered experts contraction computes the model's own expert sum.

Graphs are captured with torch.compile's "eager" backend (no code generation: seconds, not
minutes); inductor's fused kernels are checked for exactness by benchmarks/engine_speed.py.
"""

from __future__ import annotations

import pytest
import torch

from specmoe.backends.hf import default_experts_implementation
from specmoe.backends.hf_experts import NAME, gathered_experts_forward


@pytest.fixture(scope="module")
def experts(exact_models):
    """The first MoE block's experts of the tiny zoo's float64 MoE."""
    return next(m for m in exact_models["moe"].model.modules() if hasattr(m, "gate_up_proj"))


def _routing(experts, tokens: int, top_k: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, experts.hidden_dim, dtype=torch.float64, generator=generator)  # [T, H]
    index = torch.stack(
        [torch.randperm(experts.num_experts, generator=generator)[:top_k] for _ in range(tokens)]
    )  # [T, K]
    weights = torch.rand(tokens, top_k, dtype=torch.float64, generator=generator)  # [T, K]
    return hidden, index, weights


def _loop(experts, hidden, index, weights):
    return type(experts).forward.__wrapped__(experts, hidden, index, weights)


def test_fused_inside_a_graph_equals_the_expert_loop_without_a_graph_break(experts):
    top_k = 2
    tokens = experts.num_experts // top_k  # T x K == E: the widest block that is fused
    hidden, index, weights = _routing(experts, tokens, top_k)
    fused = torch.compile(
        lambda h, i, w: gathered_experts_forward(experts, h, i, w), backend="eager", fullgraph=True
    )
    torch.testing.assert_close(fused(hidden, index, weights), _loop(experts, hidden, index, weights))


@pytest.mark.parametrize("compiled", [False, True])
def test_outside_a_graph_and_past_e_slots_it_is_the_expert_loop(experts, compiled):
    top_k = 2
    tokens = experts.num_experts // top_k + 1 if compiled else 3
    hidden, index, weights = _routing(experts, tokens, top_k, seed=1)
    run = lambda h, i, w: gathered_experts_forward(experts, h, i, w)  # noqa: E731
    if compiled:
        run = torch.compile(run, backend="eager")
    assert torch.equal(run(hidden, index, weights), _loop(experts, hidden, index, weights))


def test_it_is_the_compiled_default_on_cpu_only():
    assert default_experts_implementation("bfloat16", compile=True, device="cpu") == NAME
    assert default_experts_implementation("float64", compile=True, device="cpu") == NAME
    assert default_experts_implementation("bfloat16", compile=False, device="cpu") == "grouped_mm"
    assert default_experts_implementation("float32", compile=True, device="cuda") == "batched_mm"
