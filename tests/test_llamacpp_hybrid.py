"""Hybrid models (Qwen3.5: gated-DeltaNet linear attention beside attention) through llama.cpp: the
GGUF export computes transformers' model, and SD rolls the recurrent state back exactly, both ways
(`recurrent_rollback`): checkpoint, restore, decode the kept tokens again; and llama.cpp's
per-position snapshots where they cover the rollback, with negative controls.

Needs the `llamacpp` extra (skips without it, fails under CI). The models are the random `hybrid`
zoo's (built in about a second): its MoE (llama.cpp's qwen35moe) and draft-xs (qwen35), and, for a
draft that agrees part of the time, the MoE with its routed experts damped and its dense twin; and
a tiny random Qwen3-Next (qwen3next) with a perturbed draft, both with the zoo's tokenizer
(`hybrid_models`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hybrid_models import damp_routed_experts, dense_twin, save_hybrid
from test_gguf import field, read, require, tensors
from test_llamacpp import PROMPTS, greedy

from specmoe.api import load_model
from specmoe.backends.llamacpp_state import LOG_CAPACITY
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.errors import SpecmoeError
from specmoe.metrics import invariant_violations, totals
from specmoe.zoo import build_zoo
from specmoe.zoo.gguf import export_gguf, zoo_gguf
from specmoe.zoo.gguf_hybrid import rope_sections, tile_value_heads

DAMPING = 0.15  # the routed experts' share left in the target: its twin then accepts 0.2-0.6
NOISE = 0.003  # a Qwen3-Next draft = its target + N(0, NOISE²) on every matrix: accepts 0.3-0.6


@pytest.fixture(scope="module")
def hybrid_zoo(tmp_path_factory) -> Path:
    return build_zoo("hybrid", tmp_path_factory.mktemp("hybrid") / "zoo")


@pytest.fixture(scope="module")
def pair(hybrid_zoo, tmp_path_factory) -> dict[str, Path]:
    """f16 GGUFs of a target (qwen35moe) and a draft (qwen35) that agree part of the time."""
    require("llama_cpp")
    root = tmp_path_factory.mktemp("pair")
    target = damp_routed_experts(hybrid_zoo / "moe", root / "target", DAMPING)
    draft = dense_twin(hybrid_zoo / "moe", root / "twin")
    return {
        "target": export_gguf(target, root / "target.gguf"),
        "draft": export_gguf(draft, root / "twin.gguf"),
    }


@pytest.fixture(scope="module")
def next_pair(hybrid_zoo, tmp_path_factory) -> dict[str, Path]:
    """A random Qwen3-Next target (qwen3next) and its perturbed draft, with the zoo's tokenizer."""
    require("llama_cpp")
    root = tmp_path_factory.mktemp("next")
    target = save_hybrid("qwen3_next", root / "target", tokenizer_from=hybrid_zoo / "moe")
    draft = save_hybrid("qwen3_next", root / "draft", NOISE, seed=1, tokenizer_from=hybrid_zoo / "moe")
    return {
        "hf": target,
        "f32": export_gguf(target, root / "target-f32.gguf", "f32"),
        "target": export_gguf(target, root / "target.gguf"),
        "draft": export_gguf(draft, root / "draft.gguf"),
    }


def llama(path: Path, **options):
    return load_model(path, n_threads=1, **options)


def sd(target, draft, prompts, gamma, tokens=32):
    config = DecodeConfig(max_new_tokens=tokens, gamma=gamma, ignore_eos=True)
    result = decode(target, prompts, config, ModelDrafter(draft))
    assert invariant_violations(result) == []
    return result


# --- the export -------------------------------------------------------------------------------------


def test_value_heads_are_tiled_and_rotary_pairs_split_three_ways():
    grouped = np.arange(8)  # 2 key heads x 2 value heads each x width 2: [k0v0, k0v1, k1v0, k1v1]
    assert tile_value_heads(grouped, 0, 2, 4, 2).tolist() == [0, 1, 4, 5, 2, 3, 6, 7]
    columns = np.arange(8)[None, :].repeat(3, 0)  # [3, Hv * width], reordered along axis 1
    assert (tile_value_heads(columns, 1, 2, 4, 2) == tile_value_heads(grouped, 0, 2, 4, 2)).all()
    assert rope_sections(32) == [11, 11, 10, 0]  # Qwen3.5's own split of its 64 rotary dims
    assert rope_sections(2) == [1, 1, 0, 0]


def test_hybrid_exports_use_llamacpps_architectures_and_layout(hybrid_zoo):
    gguf = require("gguf")
    reader = read(zoo_gguf(hybrid_zoo, "moe", "q8_0"))
    assert field(reader, "general.architecture") == "qwen35moe"
    assert field(reader, "qwen35moe.attention.recurrent_layers") == [True, True, True, False]
    assert (
        field(reader, "qwen35moe.ssm.group_count") == 2 and field(reader, "qwen35moe.ssm.time_step_rank") == 4
    )
    assert field(reader, "qwen35moe.rope.dimension_count") == 4  # a quarter of the 16-wide heads
    assert field(reader, "qwen35moe.expert_shared_feed_forward_length") == 768
    found = tensors(reader)
    assert found["blk.0.ffn_up_exps.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    for name in (
        "blk.0.ssm_conv1d.weight",
        "blk.0.ssm_a",
        "blk.0.ffn_gate_inp_shexp.weight",
        "blk.3.attn_q_norm.weight",
    ):
        assert found[name].tensor_type == gguf.GGMLQuantizationType.F32, name
    assert "blk.3.attn_q.weight" in found and "blk.3.ssm_a" not in found  # layer 3 is full attention
    assert field(read(zoo_gguf(hybrid_zoo, "draft-xs", "f16")), "general.architecture") == "qwen35"


@pytest.mark.parametrize("name", ["moe", "draft-xs"])
def test_f32_hybrid_gguf_reproduces_transformers_float32_logits(hybrid_zoo, name):
    require("llama_cpp")
    ours = llama(zoo_gguf(hybrid_zoo, name, "f32"), cache_type="f32", flash_attn=False)
    reference = load_model(hybrid_zoo / name, dtype="float32")
    for backend in (ours, reference):
        backend.prefill([PROMPTS[0]])
    for block in (torch.tensor([[7, 8, 9, 10]]), torch.tensor([[3]])):  # [1, t]: state carried between
        got, want = ours.forward(block), reference.forward(block)  # [1, t, V]
        assert (got - want).abs().max().item() < 1e-4


def test_f32_qwen3_next_gguf_reproduces_transformers_float32_logits(next_pair):
    """Qwen3-Next's fused projections split as llama.cpp's qwen3next reads them; norms drawn."""
    ours = llama(next_pair["f32"], cache_type="f32", flash_attn=False)
    reference = load_model(next_pair["hf"], dtype="float32")
    for backend in (ours, reference):
        backend.prefill([PROMPTS[0]])
    for block in (torch.tensor([[7, 8, 9, 10]]), torch.tensor([[3]])):
        assert (ours.forward(block) - reference.forward(block)).abs().max().item() < 1e-4


# --- rollback ---------------------------------------------------------------------------------------


def exact(hybrid_zoo, name: str, **options):
    """An f32 GGUF with an f32 KV cache and no flash attention: block and step decodes then agree
    to float32 rounding, so a rolled-back row can be compared with a fresh one closely."""
    require("llama_cpp")
    return llama(zoo_gguf(hybrid_zoo, name, "f32"), cache_type="f32", flash_attn=False, **options)


@pytest.mark.parametrize("rollback", ["checkpoints", "snapshots"])
def test_rollback_restores_and_redecodes_each_row_to_its_kept_length(hybrid_zoo, rollback):
    """Row 0 drops two of a 3-token block (a snapshot covers it), row 1 all three (none does)."""
    model = exact(hybrid_zoo, "moe", recurrent_rollback=rollback)
    model.prefill([PROMPTS[0], PROMPTS[2]])  # 7 and 1 tokens: the second row starts with no state
    model.forward(torch.tensor([[1, 2, 3], [4, 5, 6]]))
    model.rollback([8, 1])  # row 0 keeps one of its three new tokens, row 1 none
    assert model.cached_lengths() == [8, 1]
    after = model.forward(torch.tensor([[9, 10], [11, 12]]))  # [2, 2, V]
    fresh = exact(hybrid_zoo, "moe")
    fresh.prefill([PROMPTS[0] + [1], PROMPTS[2]])
    assert torch.allclose(after, fresh.forward(torch.tensor([[9, 10], [11, 12]])), atol=1e-4)
    assert model.state_s > 0
    states = model._states
    assert (states.by_snapshot, states.by_checkpoint) == ((1, 1) if rollback == "snapshots" else (0, 2))


@pytest.mark.parametrize("rollback", ["checkpoints", "snapshots"])
def test_a_long_run_without_rollback_then_a_rollback_is_exact(hybrid_zoo, rollback):
    """With checkpoints alone, plain decoding moves the checkpoint once its log passes the capacity;
    with snapshots it moves only in a rollback, and a rollback across 1-token decodes falls back."""
    model = exact(hybrid_zoo, "draft-xs", recurrent_rollback=rollback)
    model.prefill([PROMPTS[1]])
    steps = LOG_CAPACITY + 5
    for token in range(steps):  # plain decoding
        model.forward(torch.tensor([[token % 50 + 1]]))
    moved = rollback == "checkpoints"  # once, after LOG_CAPACITY tokens
    assert model._states.logged() == [steps - LOG_CAPACITY if moved else steps]
    model.rollback([len(PROMPTS[1]) + steps - 3])  # back three tokens: restores the checkpoint
    again = model.forward(torch.tensor([[7]]))
    fresh = exact(hybrid_zoo, "draft-xs")
    fresh.prefill([PROMPTS[1] + [t % 50 + 1 for t in range(steps - 3)]])
    assert torch.allclose(again, fresh.forward(torch.tensor([[7]])), atol=1e-4)
    assert model._states.by_checkpoint == 1


def test_snapshots_serve_only_the_rollbacks_they_cover(hybrid_zoo):
    """llama.cpp keeps the state after each of a decode's last positions but not before its first,
    and does not check: asked to drop the one token of a 1-token decode it says yes and the next
    logits are wrong (the negative control). The backend asks only for what is covered."""
    fresh = exact(hybrid_zoo, "moe", recurrent_rollback="checkpoints")
    fresh.prefill([PROMPTS[0]])
    want = fresh.forward(torch.tensor([[5, 6]]))  # [1, 2, V] after the prompt alone
    model = exact(hybrid_zoo, "moe", recurrent_rollback="snapshots")
    model.prefill([PROMPTS[0]])
    model.forward(torch.tensor([[1]]))
    assert model._lib.llama_memory_seq_rm(model._memory(), 0, len(PROMPTS[0]), -1)  # llama.cpp: yes
    model._lengths = [len(PROMPTS[0])]
    assert not torch.allclose(model.forward(torch.tensor([[5, 6]])), want, atol=1e-2)  # but wrong
    for block in ([[1]], [[1, 2, 3, 4]]):  # a rollback of 1 across a decode, then 4 within one
        model.prefill([PROMPTS[0]])
        model.forward(torch.tensor(block))
        model.rollback([len(PROMPTS[0])] if len(block[0]) == 1 else [len(PROMPTS[0]) + 1])
        if len(block[0]) > 1:
            model.rollback([len(PROMPTS[0])])  # a second one before a decode: not covered either
        assert torch.allclose(model.forward(torch.tensor([[5, 6]])), want, atol=1e-4)
    assert (model._states.by_snapshot, model._states.by_checkpoint) == (1, 2)


# --- lossless speculative decoding ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "gamma", "rollback"),
    [
        (1, 1, "checkpoints"),
        (1, 3, "checkpoints"),
        (3, 3, "checkpoints"),
        (1, 1, "snapshots"),
        (3, 3, "snapshots"),
    ],
)
def test_greedy_sd_on_a_hybrid_pair_equals_greedy_decoding(pair, batch, gamma, rollback):
    """With snapshots the target's rollbacks take them; the draft's (fed a token per decode) cannot."""
    target = llama(pair["target"], recurrent_rollback=rollback)
    draft = llama(pair["draft"], recurrent_rollback=rollback)
    prompts = PROMPTS[:batch]
    expected = [greedy(target, [p], tokens=32)[0] for p in prompts]
    result = sd(target, draft, prompts, gamma)
    counts = totals(result)
    assert 0.2 <= counts.accepted / counts.drafted <= 0.8  # rows keep some drafts, drop others
    assert [o.token_ids for o in result.outputs] == expected
    assert sum(r.state_s for r in result.rounds) > 0
    assert (target._states.by_checkpoint == 0) == (rollback == "snapshots")
    if gamma > 1:  # a gamma-1 draft never holds a token it must drop
        assert draft._states.by_snapshot == 0 and draft._states.by_checkpoint > 0


def test_greedy_sd_on_a_qwen3_next_pair_equals_greedy_decoding(next_pair):
    """llama.cpp keeps no snapshots for qwen3next: auto takes checkpoints, asking for them is refused."""
    target, draft = llama(next_pair["target"]), llama(next_pair["draft"])
    assert target.recurrent_rollback == "checkpoints"
    with pytest.raises(
        SpecmoeError, match=r"keeps no recurrent-state snapshots \(n_rs_seq\) for 'qwen3next'"
    ):
        llama(next_pair["target"], recurrent_rollback="snapshots")
    expected = [greedy(target, [p], tokens=32)[0] for p in PROMPTS]
    result = sd(target, draft, PROMPTS, 3)
    counts = totals(result)
    assert 0.2 <= counts.accepted / counts.drafted <= 0.8
    assert [o.token_ids for o in result.outputs] == expected


def test_without_the_state_restore_sd_is_wrong(pair, monkeypatch):
    """Negative control: a rollback that drops the rejected tokens' KV cells but leaves them in the
    recurrent state (what masking alone would do) changes the output."""
    target, draft = llama(pair["target"]), llama(pair["draft"])
    expected = [greedy(target, [PROMPTS[0]], tokens=32)[0]]
    exact = type(target).rollback

    def leaky(backend, lengths):
        states, ctx = backend._states, backend._handles.ctx
        before = [states.save(ctx, seq) for seq in backend._seq]  # with the rejected tokens in it
        exact(backend, lengths)
        for seq, saved in zip(backend._seq, before, strict=True):
            states.load(ctx, seq, saved)

    monkeypatch.setattr(type(target), "rollback", leaky)
    assert [o.token_ids for o in sd(target, draft, [PROMPTS[0]], 3).outputs] != expected


# --- what stays refused -----------------------------------------------------------------------------


def mamba_gguf(path: Path) -> Path:
    """A one-layer Mamba GGUF with zero weights: llama.cpp loads it, so the refusal is the backend's."""
    gguf = require("gguf")
    embd, inner, state, rank, kernel, vocab = 8, 16, 4, 2, 4, 16
    writer = gguf.GGUFWriter(path, "mamba")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(embd)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_ssm_conv_kernel(kernel)
    writer.add_ssm_inner_size(inner)
    writer.add_ssm_state_size(state)
    writer.add_ssm_time_step_rank(rank)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([chr(ord("a") + i) for i in range(vocab)])
    writer.add_token_types([gguf.TokenType.NORMAL] * vocab)
    writer.add_token_merges(["a b"])
    shapes = {  # numpy order: GGUF's dimensions reversed
        "token_embd.weight": (vocab, embd),
        "output_norm.weight": (embd,),
        "blk.0.attn_norm.weight": (embd,),
        "blk.0.ssm_in.weight": (2 * inner, embd),
        "blk.0.ssm_conv1d.weight": (inner, kernel),
        "blk.0.ssm_conv1d.bias": (inner,),
        "blk.0.ssm_x.weight": (rank + 2 * state, inner),
        "blk.0.ssm_dt.weight": (inner, rank),
        "blk.0.ssm_dt.bias": (inner,),
        "blk.0.ssm_a": (inner, state),
        "blk.0.ssm_d": (inner,),
        "blk.0.ssm_out.weight": (embd, inner),
    }
    for name, shape in shapes.items():
        writer.add_tensor(name, np.zeros(shape, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_recurrent_models_and_unchecked_hybrids_are_refused_in_one_line(hybrid_zoo, tmp_path, monkeypatch):
    require("llama_cpp")
    with pytest.raises(
        SpecmoeError, match=r"is a recurrent model \(architecture 'mamba'\): its state cannot drop"
    ):
        load_model(mamba_gguf(tmp_path / "mamba.gguf"))
    monkeypatch.setattr("specmoe.backends.llamacpp_load.ROLLBACK_HYBRIDS", frozenset({"qwen3next"}))
    with pytest.raises(
        SpecmoeError, match=r"hybrid recurrent model \(architecture 'qwen35'\): its rollback .* untested"
    ):
        load_model(zoo_gguf(hybrid_zoo, "draft-xs", "f16"))


def test_rope_sections_wider_than_the_rotary_dimensions_are_refused_before_llamacpp_aborts(
    hybrid_zoo, tmp_path
):
    """llama.cpp's own converter writes Qwen3.5's [11, 11, 10] split whatever the head size; on the
    zoo's 4 rotary dimensions llama.cpp would abort the process at the first decode."""
    from specmoe.zoo.gguf_derive import copy_metadata

    gguf = require("gguf")
    require("llama_cpp")
    source = gguf.GGUFReader(zoo_gguf(hybrid_zoo, "draft-xs", "f32"))
    path = tmp_path / "wide-sections.gguf"
    writer = gguf.GGUFWriter(path, "qwen35")
    copy_metadata(source, writer, {"qwen35.rope.dimension_sections": [11, 11, 10, 0]})
    for tensor in source.tensors:
        writer.add_tensor(tensor.name, np.asarray(tensor.data), raw_shape=tensor.data.shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        SpecmoeError, match=r"splits its rotary pairs as \[11, 11, 10, 0\].*than its 4 rotary"
    ):
        load_model(path)
