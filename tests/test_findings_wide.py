"""The moesd-wide findings pass: its zoo, suite, rules, verdicts, predictions and command."""

from __future__ import annotations

from specmoe.zoo.params import count_params
from specmoe.zoo.presets import MOE, WIDE, get_preset


def test_wide_sparsity_holds_one_active_size_at_two_sparsities_and_both_dense_sizes():
    preset = get_preset("wide-sparsity")
    counts = {shape.name: count_params(shape, preset.vocab_size) for shape in preset.models}
    sparse, dense = preset.model("moe-e16"), preset.model(MOE)
    assert dense == WIDE.model(MOE)  # the demo's MoE, unchanged
    assert (sparse.top_k, sparse.moe_intermediate_size) == (dense.top_k, dense.moe_intermediate_size)
    assert sparse.top_k / sparse.num_experts == 4 * dense.top_k / dense.num_experts
    for name in ("moe-e16", MOE):  # the same active size, up to the router's E x H per layer
        router = preset.model(name).num_experts * preset.model(name).hidden_size * 2
        assert counts[name].active - router == counts["dense"].active
    assert counts["dense-total"].total == counts[MOE].total - 64 * 1024 * 2  # less the routers
    assert preset.model("draft") == WIDE.model("draft")
