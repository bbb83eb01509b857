"""Config-built models: any supported config.json as a random-weight HF directory, checked,
deterministic, routing near-uniformly, loadable and lossless through the decode loop.

Real configs from docs/perf-examples are built with their widths cut by overrides (so the
architecture, expert count and top-k are the real ones) to run in seconds on a CPU.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from specmoe.api import load_model
from specmoe.cli import main
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.errors import SpecmoeError
from specmoe.zoo.config_build import build_config_zoo, config_model, count_model_params
from specmoe.zoo.config_source import read_config_source
from specmoe.zoo.manifest import load_manifest
from specmoe.zoo.routing import expected_distinct_experts, measure_prefill_distinct
from specmoe.zoo.tokenizer import EOS_TOKEN_ID, VOCAB_SIZE

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "perf-examples"
SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
# Per example: overrides that keep its architecture, experts and top-k and cut its widths.
CUTS = {
    "olmoe-1b-7b": {**SMALL, "intermediate_size": 32, "num_key_value_heads": 4, "vocab_size": 4096},
    "qwen3-30b-a3b": {**SMALL, "moe_intermediate_size": 16, "num_key_value_heads": 2, "head_dim": 16},
    "qwen3-0.6b": {**SMALL, "intermediate_size": 96, "num_key_value_heads": 2, "head_dim": 16},
    "deepseek-v2-lite": {
        **SMALL,
        "intermediate_size": 96,
        "moe_intermediate_size": 16,
        "num_key_value_heads": 4,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 8,
    },
    "qwen3.5-35b-a3b-study": {
        **SMALL,
        "num_hidden_layers": 4,  # one full-attention layer in four
        "intermediate_size": 96,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 16,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "vocab_size": 4096,
    },
    "gpt-oss-20b": {
        **SMALL,
        "intermediate_size": 32,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 4096,
        "layer_types": ["sliding_attention", "full_attention"],
    },
}


def source(name: str, **changes):
    return read_config_source(EXAMPLES / f"{name}.json", {**CUTS[name], **changes})


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """olmoe and a Qwen3-0.6B-shaped draft with olmoe's vocabulary, one zoo."""
    out = tmp_path_factory.mktemp("configs") / "zoo"
    sources = [source("olmoe-1b-7b"), source("qwen3-0.6b", vocab_size=4096)]
    return build_config_zoo(sources, out, seed=0, dtype="bfloat16")


def test_manifest_records_source_seed_dtype_and_counts(built):
    manifest = load_manifest(built)
    assert manifest["preset"] == "config"
    entry = manifest["models"]["olmoe-1b-7b"]
    raw = (EXAMPLES / "olmoe-1b-7b.json").read_bytes()
    import hashlib

    assert entry["source"]["config"] == "olmoe-1b-7b.json"
    assert entry["source"]["config_sha256"] == hashlib.sha256(raw).hexdigest()
    assert entry["source"]["overrides"] == CUTS["olmoe-1b-7b"]
    assert (entry["seed"], entry["dtype"], entry["experts"], entry["top_k"]) == (0, "bfloat16", 64, 8)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(built / "olmoe-1b-7b")
    assert entry["total_params"] == sum(p.numel() for p in model.parameters())
    # Active: all but the 56 of 64 routed experts a token does not use, in each layer.
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    assert entry["active_params"] == entry["total_params"] - experts * 56 // 64
    assert model.config.vocab_size == 4096 and model.config.eos_token_id == EOS_TOKEN_ID


def test_a_config_model_is_a_normal_hf_directory_and_decodes_losslessly(built):
    target = load_model(built / "olmoe-1b-7b", dtype="float64")
    draft = load_model(built / "qwen3-0.6b", dtype="float64")
    twin = load_model(built / "olmoe-1b-7b", dtype="float64")  # the target as its own draft
    prompts = [[5, 80, 300, 12], [7, 7, 1000]]
    config = DecodeConfig(max_new_tokens=12, gamma=3, ignore_eos=True)
    plain = [decode(target, [p], config).outputs[0].token_ids for p in prompts]
    for drafter in (ModelDrafter(draft), ModelDrafter(twin)):  # rejections; then acceptances
        assert [o.token_ids for o in decode(target, prompts, config, drafter).outputs] == plain
    # Greedy text stays within the tokenizer: every id it writes has text.
    assert all(t < VOCAB_SIZE for ids in plain for t in ids)


def test_same_arguments_same_bytes_and_a_rebuild_is_a_no_op(built, tmp_path):
    again = build_config_zoo([source("olmoe-1b-7b"), source("qwen3-0.6b", vocab_size=4096)], tmp_path / "z")
    for name in ("olmoe-1b-7b", "qwen3-0.6b"):
        assert (again / name / "model.safetensors").read_bytes() == (
            built / name / "model.safetensors"
        ).read_bytes()
    stamp = (built / "zoo.json").stat().st_mtime_ns
    build_config_zoo([source("olmoe-1b-7b"), source("qwen3-0.6b", vocab_size=4096)], built)
    assert (built / "zoo.json").stat().st_mtime_ns == stamp


def test_seeds_and_configs_give_independent_weights():
    base = config_model(source("qwen3-0.6b"), seed=0, dtype="float32")
    other_seed = config_model(source("qwen3-0.6b"), seed=1, dtype="float32")
    other_config = config_model(source("qwen3-0.6b", intermediate_size=64), seed=0, dtype="float32")
    name = "model.layers.0.self_attn.q_proj.weight"
    weights = [dict(m.named_parameters())[name].flatten() for m in (base, other_seed, other_config)]
    for other in weights[1:]:
        assert abs(torch.corrcoef(torch.stack([weights[0], other]))[0, 1]) < 0.1


@pytest.mark.parametrize("name", ["olmoe-1b-7b", "deepseek-v2-lite", "qwen3.5-35b-a3b-study", "gpt-oss-20b"])
def test_random_routers_route_near_uniformly(name):
    """Every layer within 10% of balanced routing N(n) for n <= 16 tokens (docs/zoo.md)."""
    src = source(name)
    model = config_model(src, seed=0, dtype="float32")
    summary = count_model_params(model, src.shape)
    measured = measure_prefill_distinct(model, VOCAB_SIZE, n_max=16, trials=16)  # [L, 16]
    reference = torch.tensor(
        [expected_distinct_experts(summary.experts, summary.top_k, n) for n in range(1, 17)]
    )
    assert ((measured - reference).abs() / reference).max() < 0.10


@pytest.mark.parametrize("name", ["qwen3-0.6b", "olmoe-1b-7b"])
def test_logits_are_spread_and_do_not_repeat_the_input(name):
    """Tied (qwen3-0.6b) and untied tables alike: logits of std about 3 over the tokenizer's ids,
    and the top token is rarely the input token (a tied table would otherwise score itself)."""
    model = config_model(source(name), seed=0, dtype="float32")
    ids = torch.randint(1, VOCAB_SIZE, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids).logits[0]  # [64, V]
    assert 2.0 < logits[:, :VOCAB_SIZE].std().item() < 4.0
    assert (logits.argmax(-1) == ids[0]).float().mean().item() < 0.2
    assert (logits.argmax(-1) < VOCAB_SIZE).all()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "olmoee"}, "unknown model_type 'olmoee' (did you mean 'olmoe'?)"),
        ({"auto_map": {"AutoModelForCausalLM": "x.Y"}}, "needs its own Python code (auto_map)"),
        ({"hidden_size": 0}, "hidden_size = 0 describes no model"),
        ({"num_experts": -1}, "num_experts = -1 describes no model"),
        ({"vocab_size": 1000}, "below the project tokenizer's 2048 tokens"),
        ({"num_experts_per_tok": 65}, "65 experts per token of 64"),
    ],
)
def test_bad_configs_are_refused_in_one_line(tmp_path, change, message):
    raw = json.loads((EXAMPLES / "olmoe-1b-7b.json").read_text())
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**raw, **change}))
    with pytest.raises(SpecmoeError, match="^" + re.escape(str(path))) as err:
        read_config_source(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unknown_override_and_broken_files_are_refused(tmp_path):
    typo = re.escape("olmoe configs have no key 'hiden_size' (did you mean 'hidden_size'?)")
    with pytest.raises(SpecmoeError, match=typo):
        read_config_source(EXAMPLES / "olmoe-1b-7b.json", {"hiden_size": 64})
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(SpecmoeError, match="is not UTF-8 JSON"):
        read_config_source(tmp_path / "x.json")
    with pytest.raises(SpecmoeError, match="config file not found"):
        read_config_source(tmp_path / "missing.json")


def test_a_key_of_the_file_can_be_overridden_though_the_class_lacks_it():
    # Qwen3-MoE's config class sets head_dim only when given; the file gives it.
    assert read_config_source(EXAMPLES / "qwen3-30b-a3b.json", {"head_dim": 16}).hf_config().head_dim == 16


def test_a_composite_config_builds_its_text_model(tmp_path):
    """Qwen3.5's config.json nests the hybrid decoder under text_config: sizes are checked, experts
    counted and overrides applied there."""
    text = {**CUTS["qwen3.5-35b-a3b-study"], "num_experts": 32, "num_experts_per_tok": 4}
    (tmp_path / "qwen3.5.json").write_text(json.dumps({"model_type": "qwen3_5_moe", "text_config": text}))
    src = read_config_source(tmp_path / "qwen3.5.json", {"num_hidden_layers": 2})
    assert src.raw["text_config"]["num_hidden_layers"] == 2 and "num_hidden_layers" not in src.raw
    model = config_model(src, seed=0, dtype="float32")
    summary = count_model_params(model, src.shape)
    assert (summary.experts, summary.top_k) == (32, 4) and summary.active < summary.total
    assert len(model.model.layers) == 2
    (tmp_path / "bad.json").write_text(
        json.dumps({"model_type": "qwen3_5_moe", "text_config": {"hidden_size": 0}})
    )
    with pytest.raises(SpecmoeError, match="hidden_size = 0 describes no model"):
        read_config_source(tmp_path / "bad.json")


def test_quantization_is_dropped_and_recorded():
    src = source("gpt-oss-20b")
    assert "quantization_config" in src.dropped and "quantization_config" not in src.raw


def test_cli_builds_into_the_cache_and_prints_each_model_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    overrides = [f"--override={k}={json.dumps(v)}" for k, v in CUTS["qwen3-0.6b"].items()]
    argv = ["zoo", "build", "--config", str(EXAMPLES / "qwen3-0.6b.json"), *overrides, "--seed", "3"]
    assert main(argv) == 0
    (printed,) = capsys.readouterr().out.splitlines()
    path = Path(printed)
    assert path.parent.parent == tmp_path / "cache" / "specmoe" / "zoo" / "configs"
    assert path.parent.name.startswith("qwen3-0.6b-") and path.parent.name.endswith("-seed3-bfloat16")
    assert (path / "config.json").is_file() and (path / "tokenizer.json").is_file()
    assert main([*argv, "--preset", "tiny"]) == 2
    assert "--preset applies to presets, not to --config builds" in capsys.readouterr().err
    assert main(["zoo", "build", "--device", "cuda", "--out", str(tmp_path / "z")]) == 2
    assert "--device applies to --config builds" in capsys.readouterr().err
