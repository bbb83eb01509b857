"""specmoe's experts implementations compute the model's own expert sum: the compiled path's
gathered contraction, and the eager GPU default that picks transformers' kernels by block size.

Graphs are captured with torch.compile's "eager" backend (no code generation: seconds, not
minutes); inductor's fused kernels are checked for exactness by benchmarks/decoding/decode_speed.py.
"""

from __future__ import annotations

import copy

import pytest
import torch

from specmoe.backends.hf import default_experts_implementation
from specmoe.backends.hf_experts import NAME, SIZED, gathered_experts_forward, sized_experts_forward


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


def test_eager_on_a_gpu_it_decodes_as_transformers_generate_does():
    for device in ("cuda", "cuda:1", "mps"):
        assert default_experts_implementation("bfloat16", compile=False, device=device) == SIZED
        assert default_experts_implementation("float32", compile=False, device=device) == SIZED
    assert default_experts_implementation("float64", compile=False, device="cuda") == "eager"


@pytest.mark.parametrize("tokens", [1, 16, 17, 40])  # tiny MoE: E = 32, K = 2, so T x K <= E up to 16
def test_the_sized_experts_are_batched_mm_for_small_blocks_and_grouped_mm_beyond(experts, tokens):
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

    single = copy.deepcopy(experts).float()  # grouped_mm has no float64 kernel
    hidden, index, weights = (x.float() if x.is_floating_point() else x for x in _routing(experts, tokens, 2))
    chosen = "batched_mm" if tokens * 2 <= single.num_experts else "grouped_mm"
    out = sized_experts_forward(single, hidden, index, weights)
    assert torch.equal(out, ALL_EXPERTS_FUNCTIONS[chosen](single, hidden, index, weights))
    torch.testing.assert_close(out, _loop(single, hidden, index, weights), rtol=1e-5, atol=1e-5)
