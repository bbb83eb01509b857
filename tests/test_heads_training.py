"""The zoo's head training: its unrolled steps are exactly the head drafting on its own states, and a
trained head's tensors are a checkpoint the decode loop loads (an MTP module inside its target's
safetensors under Qwen3.5's names; an EAGLE-3 head directory). Two training steps on tiny models:
the weights are barely trained, the code paths all run."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch
from head_models import WEIGHTS, small_hybrid_moe
from safetensors.torch import load_file, save_file
from transformers import DynamicCache

from specmoe.api import load_model
from specmoe.backends.hf_heads import STATE_LAYER
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.make_drafter import make_drafter
from specmoe.drafts import ModelDraft, MtpDraft
from specmoe.zoo.heads import _write_eagle3
from specmoe.zoo.presets import EAGLE3, MTP, PRESETS
from specmoe.zoo.tokenizer import corpus_files, train_tokenizer
from specmoe.zoo.train_data import TrainingData
from specmoe.zoo.train_heads import _eagle3, _mtp, train_head, unrolled_logits

WINDOW = 12


def _plan(preset: str):
    zoo = PRESETS[preset]
    plan = replace(zoo.training, steps=2, batch_size=2, teacher_windows=1, teacher_prefix=4)
    return replace(zoo, training=replace(plan, seq_len=WINDOW))


def _data(vocab: int) -> TrainingData:
    generator = torch.Generator().manual_seed(0)
    windows = torch.randint(1, vocab, (8, WINDOW), generator=generator)
    return TrainingData(windows[:6], windows[6:], ())


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    path = small_hybrid_moe(tmp_path_factory.mktemp("teacher") / "moe", vocab=96)
    return path, load_model(path, dtype="float64").model


@torch.no_grad()
def test_unrolled_steps_are_the_head_drafting_on_its_own_states(hybrid):
    """Step s's logits at position q equal the head run as it drafts: the target's pairs up to q - s + 1
    in its cache, then s - 1 steps each reading its own state and the next token of the text."""
    _, teacher = hybrid
    parts = _mtp(teacher.float(), seed=0)
    torch.manual_seed(1)
    for param in parts.model.parameters():  # away from the target's copy, so every input matters
        if param.requires_grad:  # the head's own, not the target's LM head
            param.add_(0.05 * torch.randn_like(param))
    parts.model.eval()
    window = torch.randint(1, 96, (1, WINDOW), generator=torch.Generator().manual_seed(2))
    out = teacher(input_ids=window, output_hidden_states=True)
    hidden = torch.stack([out.hidden_states[i] for i in parts.layers], -2)[:, :-1]
    unrolled = list(unrolled_logits(parts, hidden, window, 3))
    for step, q in ((1, 6), (2, 6), (3, 9), (3, 2)):
        exact = q - step + 1  # the last position the target's own pair holds
        cache = DynamicCache(config=parts.model.config)
        pairs = torch.cat([parts.features(hidden[:, : exact + 1]), parts.embed(window[:, 1 : exact + 2])], -1)
        run = parts.model(
            inputs_embeds=pairs, position_ids=torch.arange(exact + 1)[None], past_key_values=cache
        )
        for position in range(exact + 1, q + 1):
            state = run.hidden_states[STATE_LAYER][:, -1:]
            pair = torch.cat([state, parts.embed(window[:, position + 1 : position + 2])], -1)
            run = parts.model(
                inputs_embeds=pair, position_ids=torch.tensor([[position]]), past_key_values=cache
            )
        torch.testing.assert_close(unrolled[step - 1][0, q], run.logits[0, -1], rtol=1e-4, atol=1e-4)


def test_a_trained_mtp_module_is_a_checkpoint_the_engine_drafts_with(hybrid, tmp_path):
    path, teacher = hybrid
    zoo = _plan("hybrid-trained")
    data = _data(96)
    order = torch.tensor([[0, 1], [2, 3]])
    head = train_head(MTP, teacher.float(), zoo.model("moe"), zoo, 0, data, order)
    assert all(key.startswith("mtp.") for key in head.tensors) and "mtp.fc.weight" in head.tensors
    assert "mtp.layers.0.mlp.experts.7.down_proj.weight" in head.tensors  # one tensor per expert
    assert len(head.held_out_agreement) == zoo.training.head_unroll
    target = shutil.copytree(path, tmp_path / "moe")
    save_file({**load_file(target / WEIGHTS), **head.tensors}, target / WEIGHTS, metadata={"format": "pt"})
    model = load_model(target, dtype="float64")
    prompts = [[5, 6, 7, 8], [9, 10]]
    config = DecodeConfig(max_new_tokens=8, gamma=2, ignore_eos=True)
    expected = [
        o.token_ids for o in decode(model, prompts, DecodeConfig(max_new_tokens=8, ignore_eos=True)).outputs
    ]
    assert [
        o.token_ids for o in decode(model, prompts, config, make_drafter(MtpDraft(), model)).outputs
    ] == expected


def test_a_trained_eagle3_head_is_a_directory_the_engine_drafts_with(tiny_zoo, tmp_path):
    zoo = _plan("trained")  # tiny's shapes: the tiny zoo's MoE stands in for the trained one
    teacher = load_model(tiny_zoo / "moe", dtype="float32").model
    order = torch.tensor([[0, 1], [2, 3]])
    head = train_head(EAGLE3, teacher, zoo.model("moe"), zoo, 0, _data(zoo.vocab_size), order)
    entry = _write_eagle3(head, train_tokenizer(corpus_files()), tmp_path)
    assert entry["reads_layers"] == [0, 1, 2] and entry["draft_vocab"] == 1024
    config = json.loads((tmp_path / "eagle3" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    assert {"fc.weight", "midlayer.self_attn.q_proj.weight", "lm_head.weight", "d2t", "t2d"} <= set(
        load_file(tmp_path / "eagle3" / WEIGHTS)
    )
    target = load_model(tiny_zoo / "moe", dtype="float64")
    drafter = make_drafter(ModelDraft("eagle3"), target, load_model(tmp_path / "eagle3", dtype="float64"))
    assert drafter.tokenizer_digest == target.tokenizer_digest  # the family's tokenizer files
    result = decode(target, [[11, 12, 13]], DecodeConfig(max_new_tokens=6, gamma=2, ignore_eos=True), drafter)
    expected = decode(target, [[11, 12, 13]], DecodeConfig(max_new_tokens=6, ignore_eos=True))
    assert result.outputs[0].token_ids == expected.outputs[0].token_ids


def test_the_eagle3_heads_draft_vocabulary_is_the_most_frequent_tokens(tiny_zoo):
    zoo = _plan("trained")
    teacher = load_model(tiny_zoo / "moe", dtype="float32").model
    data = TrainingData(
        torch.tensor([[5, 5, 5, 7, 7, 9] * 2] * 4), torch.zeros(1, WINDOW, dtype=torch.long), ()
    )
    parts = _eagle3(
        teacher, zoo.model("moe"), replace(zoo, training=replace(zoo.training, eagle3_draft_vocab=3)), 0, data
    )
    assert parts.vocab.tolist() == [5, 7, 9]
    model = parts.model
    assert (torch.arange(3) + model.d2t).tolist() == [5, 7, 9] and model.t2d.nonzero().flatten().tolist() == [
        5,
        7,
        9,
    ]


def test_a_build_writes_an_mtp_module_into_its_target(tmp_path, monkeypatch):
    """The build path of a preset with an MTP head (hybrid-trained's, on the trained MoE and draft-xs
    alone to stay short): mtp.* inside moe's safetensors, the config key Qwen3.5 spells, zoo.json's
    heads table with acceptance beside draft-xs's."""
    from specmoe.zoo import build_zoo, load_manifest, zoo_rows
    from specmoe.zoo.params import count_params

    trained = PRESETS["trained"]
    plan = replace(trained.training, drafts=("draft-xs",), heads=(MTP,))
    models = tuple(s for s in trained.models if s.name in ("moe", "draft-xs"))
    monkeypatch.setitem(PRESETS, "mtp-test", replace(trained, name="mtp-test", models=models, training=plan))
    zoo = build_zoo("mtp-test", tmp_path / "zoo", train_steps=2)
    manifest = load_manifest(zoo)
    config = json.loads((zoo / "moe" / "config.json").read_text())
    assert config["mtp_num_hidden_layers"] == 1
    tensors = load_file(zoo / "moe" / WEIGHTS)
    assert (
        "mtp.pre_fc_norm_embedding.weight" in tensors
        and "mtp.layers.0.mlp.experts.31.up_proj.weight" in tensors
    )
    own = sum(t.numel() for key, t in tensors.items() if not key.startswith("mtp."))
    assert (
        own == manifest["models"]["moe"]["total_params"] == count_params(models[0], trained.vocab_size).total
    )
    entry = manifest["heads"][MTP]
    assert (entry["kind"], entry["target"], entry["path"]) == ("mtp", "moe", "moe")
    assert (
        list(entry["acceptance"])
        == list(manifest["models"]["draft-xs"]["acceptance"])
        == ["1", "2", "3", "4"]
    )
    assert any(row["name"] == "mtp" and row["arch"] == "mtp head in moe" for row in zoo_rows(zoo))
    assert entry["active_params"] < entry["params"]  # 2 of its 32 routed experts per token
    target = load_model(zoo / "moe", dtype="float64")  # transformers leaves the module alone
    assert make_drafter(MtpDraft(), target).hidden_layers == (2,)
