"""The model zoo: preset ratios, deterministic builds, routing statistics, tokenizer, loading.

Only the tiny preset is built; bench is checked from its shapes (analytically and on the meta
device) and by regenerating just the tensors that decide its first layer's routing.
"""

import hashlib
import json
import math
import os
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.models.qwen3_moe.modeling_qwen3_moe import (
    Qwen3MoeAttention,
    Qwen3MoeRMSNorm,
    Qwen3MoeRotaryEmbedding,
    Qwen3MoeTopKRouter,
)

import specmoe.zoo.build as build_module
from specmoe.errors import SpecmoeError
from specmoe.zoo.build import build_zoo, zoo_model
from specmoe.zoo.hf_config import hf_config
from specmoe.zoo.init import init_tensor
from specmoe.zoo.manifest import (
    IN_PROGRESS_NAME,
    format_zoo_table,
    load_manifest,
    resolve_model,
    zoo_rows,
)
from specmoe.zoo.params import count_params
from specmoe.zoo.presets import MOE, PRESETS, RATIO_TARGETS, RATIO_TOLERANCE, get_preset
from specmoe.zoo.routing import expected_distinct_experts, measure_decode_distinct, measure_prefill_distinct
from specmoe.zoo.tokenizer import EOS_TOKEN_ID, corpus_files, train_tokenizer

TINY = PRESETS["tiny"]
BENCH = PRESETS["bench"]
ROUTING_TOLERANCE = 0.10

TEXTS = {
    "english": "Who painted the ceiling of the Sistine Chapel? Michelangelo, between 1508 and 1512.",
    "code": "def quicksort(xs: list[int]) -> list[int]:\n    if len(xs) <= 1:\n        return xs\n"
    "    pivot, *rest = xs\n    return quicksort([x for x in rest if x < pivot]) + [pivot]\n",
    "reasoning": "Problem: A car travels 150 km in 2 hours. Solution: step by step, 150 / 2 = 75 km/h.",
    "chinese": "请用三句话介绍一下长城的历史。长城是中国古代修建的军事防御工程，前后修建了两千多年。",
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory) -> Path:
    return build_zoo("tiny", tmp_path_factory.mktemp("zoo") / "tiny")


@pytest.fixture(scope="module")
def tiny_moe(tiny_zoo):
    return AutoModelForCausalLM.from_pretrained(tiny_zoo / MOE, dtype=torch.float32).eval()


# --- shapes and ratios -------------------------------------------------------------------------


@pytest.mark.parametrize("preset", [TINY, BENCH], ids=lambda p: p.name)
def test_preset_ratios_match_the_family_they_imitate(preset):
    moe = count_params(preset.model(MOE), preset.vocab_size)
    ratios = {"moe": moe.total / moe.active}
    for shape in preset.models:
        if shape.name != MOE:
            ratios[shape.name] = count_params(shape, preset.vocab_size).active / moe.active
    assert set(ratios) == set(RATIO_TARGETS)
    for name, ratio in ratios.items():
        assert abs(ratio / RATIO_TARGETS[name] - 1) <= RATIO_TOLERANCE, (name, ratio)


@pytest.mark.parametrize("preset", [TINY, BENCH], ids=lambda p: p.name)
def test_moe_draft_is_a_sparse_twin_of_draft_s(preset):
    dense, sparse = preset.model("draft-s"), preset.model("draft-moe")
    assert not dense.is_moe and sparse.is_moe and sparse.model_type == "qwen3_moe"
    dense_count, sparse_count = (
        count_params(dense, preset.vocab_size),
        count_params(sparse, preset.vocab_size),
    )
    # Same attention and active MLP width: the active counts differ by the router alone.
    router = sparse.num_layers * sparse.num_experts * sparse.hidden_size
    assert sparse_count.active == dense_count.active + router
    assert sparse_count.total >= 3 * sparse_count.active


@pytest.mark.parametrize(
    "preset, name",
    [(p, s.name) for p in (TINY, BENCH) for s in p.models],
    ids=lambda x: x if isinstance(x, str) else x.name,
)
def test_analytic_param_count_equals_transformers_model(preset, name):
    shape = preset.model(name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(shape, preset))
    assert count_params(shape, preset.vocab_size).total == sum(p.numel() for p in model.parameters())
    assert model.config.model_type == shape.model_type
    assert not model.config.tie_word_embeddings


def test_bench_moe_is_over_a_gigabyte_and_the_family_fits_in_memory():
    sizes = {s.name: count_params(s, BENCH.vocab_size).bf16_bytes for s in BENCH.models}
    assert sizes[MOE] >= 1e9
    assert sum(sizes.values()) < 4e9  # bf16, all six; leaves room for fp32 copies in 24 GiB


def test_overrides_change_the_moe_only_and_are_validated():
    swept = get_preset("tiny", num_experts=16, top_k=4)
    moe = swept.model(MOE)
    assert (moe.num_experts, moe.top_k) == (16, 4)
    assert moe.moe_intermediate_size == TINY.model(MOE).moe_intermediate_size
    assert [s for s in swept.models if s.name != MOE] == [s for s in TINY.models if s.name != MOE]
    config = hf_config(moe, swept)
    assert (config.num_experts, config.num_experts_per_tok) == (16, 4)
    base, new = count_params(TINY.model(MOE), 2048), count_params(moe, 2048)
    # Each layer loses 16 experts and 16 router rows.
    assert new.total - base.total == (16 - 32) * (base.per_expert + moe.hidden_size) * moe.num_layers
    # Each token now runs 2 more experts against a router that is 16 rows smaller.
    assert (
        new.active - base.active == ((4 - 2) * base.per_expert + (16 - 32) * moe.hidden_size) * moe.num_layers
    )
    for bad in ({"top_k": 0}, {"num_experts": 2, "top_k": 3}, {"num_experts": 0}):
        with pytest.raises(SpecmoeError, match="invalid MoE override"):
            get_preset("tiny", **bad)
    with pytest.raises(SpecmoeError, match="unknown zoo preset 'huge'; available: tiny, bench"):
        get_preset("huge")


def test_overridden_moe_routes_over_the_new_expert_count():
    swept = get_preset("tiny", num_experts=8, top_k=3)
    model = zoo_model(swept.model(MOE), swept)
    assert model.model.layers[0].mlp.gate.weight.shape == (8, 64)
    distinct = measure_prefill_distinct(model, swept.vocab_size, n_max=16, trials=4)
    assert distinct[:, 0].tolist() == [3.0, 3.0]  # one token: exactly top_k experts
    assert distinct.max() <= 8


# --- building ------------------------------------------------------------------------------------


def test_build_writes_hf_directories_and_a_manifest(tiny_zoo):
    manifest = load_manifest(tiny_zoo)
    assert (manifest["preset"], manifest["seed"]) == ("tiny", 0)
    assert manifest["overrides"] == {"num_experts": None, "top_k": None}
    assert manifest["eos_token_id"] == manifest["pad_token_id"] == EOS_TOKEN_ID
    assert list(manifest["models"]) == list(TINY.model_names)
    assert not (tiny_zoo / IN_PROGRESS_NAME).exists()
    for name, entry in manifest["models"].items():
        directory = tiny_zoo / entry["path"]
        config = json.loads((directory / "config.json").read_text())
        assert config["dtype"] == "bfloat16"
        assert config["eos_token_id"] == EOS_TOKEN_ID
        assert config["max_position_embeddings"] == 4096
        assert json.loads((directory / "generation_config.json").read_text())["eos_token_id"] == EOS_TOKEN_ID
        assert (directory / "tokenizer.json").is_file() and (directory / "tokenizer_config.json").is_file()
        counts = count_params(TINY.model(name), TINY.vocab_size)
        assert (entry["total_params"], entry["active_params"]) == (counts.total, counts.active)
        weights = directory / "model.safetensors"
        assert entry["safetensors_sha256"] == _sha256(weights)
        # The file is the bf16 payload plus a small JSON header.
        assert entry["bytes_bf16"] < weights.stat().st_size < entry["bytes_bf16"] + 1_000_000
        with safe_open(weights, "pt") as handle:
            names = handle.keys()
            assert {handle.get_slice(name).get_dtype() for name in names} == {"BF16"}
    assert manifest["models"][MOE]["experts"] == 32 and manifest["models"][MOE]["top_k"] == 2


def test_moe_checkpoint_uses_the_canonical_per_expert_layout(tiny_zoo):
    with safe_open(tiny_zoo / MOE / "model.safetensors", "pt") as handle:
        keys = set(handle.keys())
    assert "model.layers.0.mlp.experts.31.gate_proj.weight" in keys
    assert "model.layers.1.mlp.experts.0.down_proj.weight" in keys
    assert not any(k.endswith("gate_up_proj") for k in keys)


def test_interrupted_build_is_detected_then_resumed_to_identical_bytes(tiny_zoo, tmp_path, monkeypatch):
    out = tmp_path / "zoo"
    real_write_model = build_module._write_model

    def fail_on_second_model(shape, *args):
        if shape.name != MOE:
            raise KeyboardInterrupt
        return real_write_model(shape, *args)

    monkeypatch.setattr(build_module, "_write_model", fail_on_second_model)
    with pytest.raises(KeyboardInterrupt):
        build_zoo("tiny", out)
    monkeypatch.undo()
    with pytest.raises(SpecmoeError, match="did not finish"):
        load_manifest(out)
    with pytest.raises(SpecmoeError, match="pick another --out"):
        build_zoo("tiny", out, seed=1)  # an interrupted build only resumes with its own arguments
    build_zoo("tiny", out)
    for name in TINY.model_names:
        assert _sha256(out / name / "model.safetensors") == _sha256(tiny_zoo / name / "model.safetensors")
    assert _sha256(out / MOE / "tokenizer.json") == _sha256(tiny_zoo / MOE / "tokenizer.json")


def test_different_seeds_give_different_weights():
    shape = TINY.model(MOE)
    name = "model.layers.0.mlp.gate.weight"
    assert torch.equal(init_tensor(name, (32, 64), shape, 0), init_tensor(name, (32, 64), shape, 0))
    assert not torch.equal(init_tensor(name, (32, 64), shape, 0), init_tensor(name, (32, 64), shape, 1))


def test_rebuilding_with_the_same_arguments_is_a_no_op(tiny_zoo):
    weights = tiny_zoo / MOE / "model.safetensors"
    before = (weights.stat().st_mtime_ns, (tiny_zoo / "zoo.json").stat().st_mtime_ns)
    assert build_zoo("tiny", tiny_zoo) == tiny_zoo
    assert (weights.stat().st_mtime_ns, (tiny_zoo / "zoo.json").stat().st_mtime_ns) == before


def test_building_different_arguments_into_a_used_directory_is_refused(tiny_zoo, tmp_path):
    with pytest.raises(SpecmoeError, match=r"preset=tiny, seed=0.*pick another --out.*seed=1"):
        build_zoo("tiny", tiny_zoo, seed=1)
    with pytest.raises(SpecmoeError, match="pick another --out"):
        build_zoo("tiny", tiny_zoo, num_experts=16)
    unrelated = tmp_path / "notes"
    unrelated.mkdir()
    (unrelated / "todo.txt").write_text("x")
    with pytest.raises(SpecmoeError, match=r"is not empty.*pick another --out"):
        build_zoo("tiny", unrelated)
    (unrelated / IN_PROGRESS_NAME).write_text('{"preset": "ti')  # a marker cut short
    with pytest.raises(SpecmoeError, match=r"is not empty.*pick another --out"):
        build_zoo("tiny", unrelated)


def test_a_finished_build_of_the_same_arguments_is_copied_not_built_again(tiny_zoo, tmp_path, monkeypatch):
    def no_build(*args, **kwargs):
        raise AssertionError("built again although a finished build could be copied")

    monkeypatch.setattr(build_module, "_build", no_build)
    lines: list[str] = []
    out = build_zoo("tiny", tmp_path / "copy", reuse=tiny_zoo, progress=lines.append)
    assert any("copying" in line and "no training" in line for line in lines)
    for name in TINY.model_names:
        assert _sha256(out / name / "model.safetensors") == _sha256(tiny_zoo / name / "model.safetensors")
    assert load_manifest(out) == load_manifest(tiny_zoo) and not (out / IN_PROGRESS_NAME).exists()
    with pytest.raises(AssertionError, match="built again"):  # other arguments: nothing to copy
        build_zoo("tiny", tmp_path / "other", seed=1, reuse=tiny_zoo)


def test_zoo_build_of_a_trained_preset_offers_the_user_cache(tmp_path, monkeypatch):
    import specmoe.zoo.preset_build as preset_build
    from specmoe.cli import main

    calls = []
    monkeypatch.setattr(preset_build, "build_zoo", lambda *args, **kwargs: calls.append(kwargs) or args[1])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["zoo", "build", "--preset", "trained", "--out", str(tmp_path / "t"), "--seed", "3"]) == 0
    assert main(["zoo", "build", "--preset", "tiny", "--out", str(tmp_path / "z")]) == 0
    assert calls[0]["reuse"] == tmp_path / "specmoe" / "zoo" / "trained-seed3"
    assert calls[1]["reuse"] is None  # a random preset builds in seconds


def test_model_files_are_readable_by_others_when_the_umask_allows(tiny_zoo):
    umask = os.umask(0)
    os.umask(umask)
    mode = (tiny_zoo / MOE / "model.safetensors").stat().st_mode & 0o777
    assert mode == 0o666 & ~umask


# --- listing and resolving -----------------------------------------------------------------------


def test_zoo_rows_and_table(tiny_zoo):
    rows = zoo_rows(tiny_zoo)
    assert [row["name"] for row in rows] == list(TINY.model_names)
    moe = rows[0]
    assert (moe["arch"], moe["total_params"], moe["active_params"]) == ("qwen3_moe", 6582656, 684416)
    assert moe["bytes"] == 2 * 6582656
    table = format_zoo_table(rows).splitlines()
    assert table[0].split() == ["name", "arch", "experts", "total", "active", "bf16", "size"]
    assert table[1].split() == ["moe", "qwen3_moe", "2/32", "6.6M", "684.4K", "13.17", "MB"]
    assert table[-2].split()[:3] == ["draft-xs", "qwen3", "-"]
    assert table[-1].split()[:3] == ["draft-moe", "qwen3_moe", "2/16"]


def test_resolve_model_accepts_paths_and_zoo_names(tiny_zoo):
    assert resolve_model("draft-s", tiny_zoo) == tiny_zoo / "draft-s"
    assert resolve_model(str(tiny_zoo / "moe"), None) == tiny_zoo / "moe"


def test_resolve_model_explains_how_to_get_a_missing_model(tiny_zoo, tmp_path):
    hint = "build it with `specmoe zoo build --preset tiny --out DIR`"
    with pytest.raises(SpecmoeError, match=r"model 'nope' not found: .*has: moe, dense-l") as err:
        resolve_model("nope", tiny_zoo)
    assert hint in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SpecmoeError, match=r"model 'moe' not found: .*holds no built zoo") as err:
        resolve_model("moe", tmp_path)
    assert hint in str(err.value)
    with pytest.raises(SpecmoeError, match="no zoo directory was given"):
        resolve_model(str(tmp_path / "missing"), None)
    with pytest.raises(SpecmoeError, match="no zoo at"):
        load_manifest(tmp_path)


# --- tokenizer -------------------------------------------------------------------------------------


def test_tokenizer_training_is_deterministic(tiny_zoo):
    retrained = train_tokenizer(corpus_files()).to_str(pretty=True)
    assert retrained == (tiny_zoo / MOE / "tokenizer.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", sorted(TEXTS))
def test_tokenizer_round_trips_and_compresses(tiny_zoo, kind):
    tokenizer = AutoTokenizer.from_pretrained(tiny_zoo / "draft-xs")
    text = TEXTS[kind]
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    # Byte fallback alone would be 1 token per byte; merges must have been learnt for every kind.
    assert len(ids) / len(text.encode()) < 0.6, kind


def test_tokenizer_special_tokens(tiny_zoo):
    tokenizer = AutoTokenizer.from_pretrained(tiny_zoo / MOE)
    assert len(tokenizer) == 2048
    assert tokenizer.eos_token == tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.eos_token_id == tokenizer.pad_token_id == EOS_TOKEN_ID
    assert tokenizer.encode("hi") == tokenizer.encode("hi", add_special_tokens=True)  # no BOS/EOS added
    emoji = "naïve ☃ 🙂"  # not in the corpus: byte-level fallback still round-trips
    assert tokenizer.decode(tokenizer.encode(emoji)) == emoji


# --- loading and numerics ------------------------------------------------------------------------


def test_models_load_in_float64_and_give_sane_logits(tiny_zoo):
    tokenizer = AutoTokenizer.from_pretrained(tiny_zoo / "dense-s")
    input_ids = tokenizer(TEXTS["english"], return_tensors="pt").input_ids
    for name in TINY.model_names:
        model, info = AutoModelForCausalLM.from_pretrained(
            tiny_zoo / name, dtype=torch.float64, output_loading_info=True
        )
        assert model.dtype == torch.float64
        assert not any(info.values()), info
        # transformers 5 runs MoE experts through torch._grouped_mm by default, which has no
        # float64 kernel; the per-expert loop does.
        model.set_experts_implementation("eager")
        with torch.no_grad():
            logits = model(input_ids).logits[0]  # [T, V]
        assert torch.isfinite(logits).all()
        assert 2.0 < logits.std().item() < 4.5  # init targets std 3
        # Positions disagree on their favourite token; EOS is never it.
        assert len(set(logits.argmax(-1).tolist())) > input_ids.shape[1] // 2
        assert EOS_TOKEN_ID not in logits.argmax(-1).tolist()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_greedy_decoding_is_varied_and_finite(tiny_zoo, dtype):
    tokenizer = AutoTokenizer.from_pretrained(tiny_zoo / MOE)
    model = AutoModelForCausalLM.from_pretrained(tiny_zoo / MOE, dtype=dtype).eval()
    continuations = []
    for text in TEXTS.values():
        input_ids = tokenizer(text, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(
                input_ids,
                max_new_tokens=32,
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
            )
        new = out.sequences[0, input_ids.shape[1] :].tolist()
        assert len(new) == 32  # never stopped at EOS
        assert all(torch.isfinite(step).all() for step in out.logits)
        assert len(set(new)) >= 16, new
        continuations.append(tuple(new))
    assert len(set(continuations)) == len(continuations)


# --- routing ---------------------------------------------------------------------------------------


def test_reference_formula_matches_independent_random_routing():
    generator = torch.Generator().manual_seed(0)
    experts, k, n, trials = 16, 3, 7, 4000
    picks = torch.rand(trials, n, experts, generator=generator).argsort(-1)[..., :k]
    distinct = torch.tensor([len(torch.unique(p)) for p in picks], dtype=torch.float)
    assert distinct.mean().item() == pytest.approx(expected_distinct_experts(experts, k, n), rel=0.01)


def _assert_close_to_reference(distinct: torch.Tensor, experts: int, k: int) -> None:
    # distinct: [L, N], column n-1 holds the mean for n tokens.
    expected = torch.tensor(
        [expected_distinct_experts(experts, k, n) for n in range(1, distinct.shape[1] + 1)]
    )
    worst = ((distinct / expected) - 1).abs().max().item()
    assert worst <= ROUTING_TOLERANCE, f"worst relative deviation {worst:.3f}"


def test_tiny_moe_prefill_routing_matches_balanced_reference(tiny_moe):
    distinct = measure_prefill_distinct(tiny_moe, TINY.vocab_size, n_max=64, trials=32)
    assert distinct.shape == (2, 64)
    _assert_close_to_reference(distinct, 32, 2)


def test_tiny_moe_decode_routing_matches_balanced_reference(tiny_moe):
    distinct = measure_decode_distinct(tiny_moe, TINY.vocab_size, context=32, n_max=32, trials=16)
    _assert_close_to_reference(distinct, 32, 2)


def test_bench_first_layer_router_input_is_token_dominated():
    """Bench layer 0 exactly as built (embedding, attention, router from their own seeds), on
    random sequences: its routing must already follow N(n), with no expert weights generated."""
    shape = BENCH.model(MOE)
    config = hf_config(shape, BENCH)
    config._attn_implementation = "eager"
    prefix = "model.layers.0."

    def weight(name: str, dims: tuple[int, ...]) -> torch.Tensor:
        return init_tensor(name, dims, shape, seed=0).to(torch.bfloat16).float()

    embedding = weight("model.embed_tokens.weight", (BENCH.vocab_size, shape.hidden_size))
    attention = Qwen3MoeAttention(config, layer_idx=0)
    for name, param in attention.named_parameters():
        param.data = weight(f"{prefix}self_attn.{name}", tuple(param.shape))
    router = Qwen3MoeTopKRouter(config)
    router.weight.data = weight(f"{prefix}mlp.gate.weight", (shape.num_experts, shape.hidden_size))
    norm = Qwen3MoeRMSNorm(shape.hidden_size)
    rotary = Qwen3MoeRotaryEmbedding(config)

    tokens, trials = 64, 8
    causal = torch.full((tokens, tokens), -math.inf).triu(1)[None, None]
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(tokens)
    with torch.no_grad():
        for _ in range(trials):
            ids = torch.randint(1, BENCH.vocab_size, (1, tokens), generator=generator)
            residual = embedding[ids]  # [1, T, H]
            position = rotary(residual, torch.arange(tokens)[None])
            residual = residual + attention(norm(residual), position, causal)[0]
            _, _, selected = router(norm(residual))  # [T, K]
            counts += torch.tensor([len(torch.unique(selected[:n])) for n in range(1, tokens + 1)])
    _assert_close_to_reference((counts / trials)[None], shape.num_experts, shape.top_k)
    # Equal-norm router rows make every expert equally likely a priori.
    row_norms = router.weight.norm(dim=-1)
    assert (row_norms.max() / row_norms.min()).item() < 1.01
