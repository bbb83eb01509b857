"""RouterTrace on small random transformers models: Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE, dense Qwen3."""

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    MixtralConfig,
    OlmoeConfig,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)

from specmoe.backends.router_trace import RouterTrace, distinct_experts_per_layer, indices_per_layer

SMALL = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
MOE = dict(num_experts_per_tok=2, **SMALL)


def _model(config):
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


MOE_CONFIGS = {
    "qwen3_moe": lambda: Qwen3MoeConfig(num_experts=8, moe_intermediate_size=16, head_dim=8, **MOE),
    "qwen2_moe": lambda: Qwen2MoeConfig(
        num_experts=8, moe_intermediate_size=16, shared_expert_intermediate_size=16, **MOE
    ),
    "mixtral": lambda: MixtralConfig(num_local_experts=8, **MOE),
    "olmoe": lambda: OlmoeConfig(num_experts=8, **MOE),
}


@pytest.fixture(scope="module")
def qwen3_moe():
    return _model(MOE_CONFIGS["qwen3_moe"]())


@pytest.mark.parametrize("arch", sorted(MOE_CONFIGS))
def test_trace_records_one_entry_per_layer_with_token_by_k_shape(arch):
    model = _model(MOE_CONFIGS[arch]())
    input_ids = torch.randint(0, 128, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), RouterTrace(model) as trace:
        model(input_ids)
    assert trace.is_moe and trace.num_layers == 3
    assert len(trace.records) == 1
    for ids in trace.records[0]:
        assert ids.shape == (2 * 5, 2)
        assert ids.dtype == torch.int64
        assert int(ids.min()) >= 0 and int(ids.max()) < 8


def test_traced_experts_are_the_top_k_of_the_router_logits(qwen3_moe):
    # Independent check: transformers' own router_logits output, ranked by hand.
    input_ids = torch.randint(0, 128, (1, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), RouterTrace(qwen3_moe) as trace:
        out = qwen3_moe(input_ids, output_router_logits=True)
    assert len(out.router_logits) == 3
    for traced, logits in zip(trace.records[0], out.router_logits, strict=True):
        expected = logits.topk(2, dim=-1).indices  # [T, K]
        assert torch.equal(traced.sort(-1).values, expected.sort(-1).values)


def test_generate_gives_one_record_per_forward(qwen3_moe):
    input_ids = torch.randint(1, 128, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), RouterTrace(qwen3_moe) as trace:
        qwen3_moe.generate(input_ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0)
    # The prefill yields the first new token; each further token is one single-token forward.
    assert [record[0].shape[0] for record in trace.records] == [6, 1, 1, 1]


def test_hooks_are_removed_on_exit(qwen3_moe):
    input_ids = torch.randint(0, 128, (1, 4), generator=torch.Generator().manual_seed(3))
    trace = RouterTrace(qwen3_moe)
    # transformers keeps hooks of its own on routers (output capturing): compare counts.
    hooks_before = [len(router._forward_hooks) for _, router in trace.routers]
    with torch.no_grad():
        with trace:
            qwen3_moe(input_ids)
            assert [len(r._forward_hooks) for _, r in trace.routers] == [n + 1 for n in hooks_before]
        qwen3_moe(input_ids)
    assert len(trace.records) == 1
    assert [len(router._forward_hooks) for _, router in trace.routers] == hooks_before


def test_entering_an_active_trace_twice_is_an_error(qwen3_moe):
    trace = RouterTrace(qwen3_moe)
    with trace, pytest.raises(RuntimeError, match="already active"):
        trace.__enter__()


def test_dense_model_reports_not_moe_and_records_nothing():
    model = _model(Qwen3Config(head_dim=8, **SMALL))
    with torch.no_grad(), RouterTrace(model) as trace:
        model(torch.tensor([[1, 2, 3]]))
    assert not trace.is_moe
    assert trace.records == []
    assert distinct_experts_per_layer(trace.records) == []


def test_distinct_experts_counts_the_union_over_tokens_and_forwards():
    records = [
        [torch.tensor([[0, 1], [1, 2]]), torch.tensor([[5, 6], [5, 6]])],
        [torch.tensor([[7, 0]]), torch.tensor([[6, 5]])],
    ]
    assert distinct_experts_per_layer(records) == [4, 2]
    assert [ids.shape[0] for ids in indices_per_layer(records)] == [3, 3]


def test_records_with_different_layer_counts_are_rejected():
    records = [[torch.tensor([[0, 1]])], [torch.tensor([[0, 1]]), torch.tensor([[2, 3]])]]
    with pytest.raises(ValueError, match="number of sparse layers"):
        distinct_experts_per_layer(records)
