"""`specmoe advise --config`: weight formats, attention kinds, engine profiles, drafters, break-even.

Every expected number here is worked out by hand from the formulas in the modules' docstrings.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from specmoe.cli import main as cli_main
from specmoe.errors import SpecmoeError
from specmoe.perf.breakeven import (
    AcceptanceKind,
    Verdict,
    acceptance,
    breakeven_alpha,
    from_alpha,
    verdict,
)
from specmoe.perf.compose import RoundShape, expected_speedup
from specmoe.perf.drafts import EAGLE3_DRAFT_VOCAB, DraftMethod, head_architecture
from specmoe.perf.engines import EngineProfile, engine_profile, load_engines
from specmoe.perf.firstprinciples import first_principles_constants
from specmoe.perf.formats import format_of_quantization, weight_format
from specmoe.perf.hardware import Hardware, parse_hardware
from specmoe.perf.structure import parse_architecture
from specmoe.theory import expected_tokens_per_round

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "perf-examples"
DENSE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "torch_dtype": "bfloat16",
}
H, FFN, L, Q, KV, D, V = 64, 128, 2, 4, 2, 16, 100
ATTENTION = H * D * (2 * Q + 2 * KV)  # q, o: Q heads; k, v: KV heads
DENSE_PARAMS = L * (ATTENTION + 2 * H + 3 * H * FFN) + H + V * H


# --- weight formats ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "bits"),
    [
        ("q4_0", 4.5),  # 16 B of nibbles + 2 B scale per 32
        ("q8_0", 8.5),  # 32 B + 2 B scale per 32
        ("q4_k", 4.5),  # 144 B per 256
        ("q6_k", 6.5625),  # 210 B per 256
        ("int4", 4 + 20 / 128),  # fp16 scale + 4-bit zero per 128
        ("mlx-4bit", 4.5),  # fp16 scale + fp16 bias per 64
        ("fp8", 8.0),
        ("Q4_K_M", 4.84),
        ("bf16", 16.0),
    ],
)
def test_formats_count_their_scales(name, bits):
    assert weight_format(name).bits == pytest.approx(bits)


def test_unknown_format_is_one_clear_error():
    with pytest.raises(SpecmoeError, match=r"unknown weight format 'q9_z'.*q4_k_m"):
        weight_format("q9_z")


def test_quantisation_blocks_map_to_formats():
    assert format_of_quantization({"quant_method": "fp8", "fmt": "e4m3"}).name == "fp8"
    assert format_of_quantization({"quant_method": "awq", "bits": 4}).name == "int4"
    assert format_of_quantization({"group_size": 32, "bits": 4}).bits == pytest.approx(5.0)  # MLX
    assert format_of_quantization({"quant_method": "hqq", "nbits": 2}) is None
    with pytest.raises(SpecmoeError, match="not one this model can cost; pass --dtype"):
        parse_architecture({**DENSE, "quantization_config": {"quant_method": "hqq"}}, "c.json")
    arch = parse_architecture({**DENSE, "quantization_config": {"quant_method": "hqq"}}, "c.json", "q4_0")
    assert arch.bytes_per_param == pytest.approx(4.5 / 8)


def test_kv_cache_keeps_16_bits_under_quantised_weights():
    arch = parse_architecture(DENSE, "c.json", "q4_k_m")
    assert arch.kv.name == "float16" and arch.kv_bytes_per_token == 2 * L * KV * D * 2
    assert parse_architecture(DENSE, "c.json", "q4_k_m", "q8_0").kv_bytes_per_token == pytest.approx(
        2 * L * KV * D * 8.5 / 8
    )


# --- attention kinds ---------------------------------------------------------------------------


def test_dense_counts_by_hand():
    arch = parse_architecture(DENSE, "c.json")
    assert arch.params_dense == DENSE_PARAMS
    assert arch.kv_elements_per_token == L * 2 * KV * D


def test_mla_caches_the_latent_and_counts_its_projections():
    config = {
        **DENSE,
        "kv_lora_rank": 16,
        "q_lora_rank": 32,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
    }
    arch = parse_architecture(config, "c.json")
    query = H * 32 + 32 * Q * (16 + 8)
    keys_values = H * (16 + 8) + 16 * Q * (16 + 16)
    attention = query + keys_values + Q * 16 * H
    assert arch.params_attention == attention
    assert arch.params_dense == L * (attention + 2 * H + 3 * H * FFN) + H + V * H
    assert arch.kv_elements_per_token == L * (16 + 8)  # the latent and its rope part, per layer


def test_hybrid_linear_attention_keeps_a_constant_state():
    config = {
        **DENSE,
        "num_hidden_layers": 4,
        "full_attention_interval": 4,  # layer 3 is full attention, 0-2 linear
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
    }
    arch = parse_architecture(config, "c.json")
    assert arch.attention_layers == 1
    assert arch.kv_elements_per_token == 2 * KV * D  # one layer caches
    mixed = 2 * 2 * 8 + 4 * 8
    assert arch.state_bytes == 3 * (4 * 8 * 8 + mixed * 3) * 4  # float32 state + conv taps
    types = {**config, "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    assert parse_architecture(types, "c.json").kv_elements_per_token == arch.kv_elements_per_token


# --- first principles with an engine -----------------------------------------------------------

GPU = Hardware("gpu", 1e12, {"bfloat16": 1e14, "float16": 1e14}, device="cuda")


def test_engine_costs_enter_the_constants_by_hand():
    engine = EngineProfile(
        name="e",
        description="d",
        device="cuda",
        forward_s=1e-3,
        layer_s=1e-4,
        bandwidth_efficiency=0.5,
        compute_efficiency={"gguf": 0.25},
        reread={"gguf": 3.0},
    )
    arch = parse_architecture(DENSE, "c.json", "q8_0")
    c = first_principles_constants(arch, GPU, "hw", engine)
    assert c.overhead_s == pytest.approx(1e-3 + 2 * 1e-4)
    assert c.dense_s == pytest.approx(DENSE_PARAMS * 8.5 / 8 / 0.5e12)
    assert c.knee_tokens == pytest.approx(0.25e14 * (8.5 / 8) / (2 * 0.5e12))
    assert c.reread_tokens == 3.0


def test_links_charge_all_reduces_and_all_to_alls():
    moe = {**DENSE, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    arch = parse_architecture(moe, "c.json")
    two = Hardware("2gpu", 1e12, {"bfloat16": 1e14}, 2, link_bandwidth_bytes_per_s=1e11, link_latency_s=1e-5)
    c = first_principles_constants(arch, two)
    hidden = H * 2
    per_token = (2 * L * (2 * 1 / 2 * hidden) + 2 * L * (2 * hidden * 1 / 4)) / 1e11
    assert c.token_s == pytest.approx(per_token)
    assert c.overhead_s == pytest.approx((2 * L + 2 * L) * 1e-5)
    with pytest.raises(SpecmoeError, match="device_count 2 needs link_bandwidth_bytes_per_s"):
        parse_hardware({"bandwidth_bytes_per_s": 1e12, "flops_per_s": 1e14, "device_count": 2}, "hw.json")


# --- engine profiles ----------------------------------------------------------------------------


def test_shipped_profiles_load_and_name_their_device():
    profiles = load_engines()
    expected = {
        "hf-eager",
        "hf-compiled",
        "vllm",
        "sglang",
        "llamacpp-cuda",
        "llamacpp-metal",
        "llamacpp-cpu",
        "mlx",
    }
    assert expected <= set(profiles)
    assert profiles["llamacpp-metal"].device == "mps" and profiles["llamacpp-cpu"].device == "cpu"


def test_engine_errors_are_one_line(tmp_path):
    with pytest.raises(SpecmoeError, match=r"unknown engine 'vllmm'; available: .*vllm"):
        engine_profile("vllmm")
    with pytest.raises(SpecmoeError, match="runs on mps, the hardware file is a cuda device"):
        engine_profile("llamacpp-metal", "cuda")
    bad = tmp_path / "mine.toml"
    bad.write_text('[engines.fast]\ndescription = "x"\ndevice = "cuda"\nbandwidth_efficiency = 1.5\n')
    with pytest.raises(SpecmoeError, match=r"engines\.fast\.bandwidth_efficiency"):
        load_engines(bad)
    good = tmp_path / "ok.toml"
    good.write_text('[engines.vllm]\ndescription = "mine"\ndevice = "cuda"\nround_s = 0.005\n')
    assert engine_profile("vllm", "cuda", good).round_s == 0.005


# --- drafters -------------------------------------------------------------------------------------


def test_heads_weigh_one_layer_and_an_lm_head():
    target = parse_architecture(DENSE, "c.json")
    layer = ATTENTION + 3 * H * FFN + 2 * H
    eagle = head_architecture(target, DraftMethod.EAGLE, 4)
    assert eagle.layers == 1 and eagle.params_dense == layer + 2 * H * H + V * H
    eagle3 = head_architecture(target, DraftMethod.EAGLE3, 4)
    assert eagle3.params_dense == layer + 3 * H * H + EAGLE3_DRAFT_VOCAB * H
    assert eagle.kv_elements_per_token == 2 * KV * D  # one layer's cache


def test_an_mtp_module_of_an_moe_is_one_moe_layer():
    moe = {**DENSE, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    target = parse_architecture(moe, "c.json")
    mtp = head_architecture(target, DraftMethod.MTP, 1)
    assert (mtp.num_experts, mtp.top_k, mtp.moe_layers) == (8, 2, 1)
    assert mtp.params_per_expert == 3 * H * 32


def test_draft_methods_parse_with_one_error():
    assert DraftMethod.parse("EAGLE-2") is DraftMethod.EAGLE
    assert DraftMethod.parse("prompt-lookup") is DraftMethod.NGRAM
    with pytest.raises(SpecmoeError, match="unknown draft method 'lookahead'"):
        DraftMethod.parse("lookahead")


# --- acceptance and break-even ---------------------------------------------------------------------


def test_acceptance_in_three_definitions():
    acc = from_alpha(0.5, 2)
    assert acc.tau == pytest.approx(1.75) and acc.rate == pytest.approx(0.375)
    back = acceptance(1.75, AcceptanceKind.TAU, 2)
    assert back.alpha == pytest.approx(0.5, abs=1e-9)
    assert acceptance(0.375, AcceptanceKind.RATE, 2).alpha == pytest.approx(0.5, abs=1e-9)
    with pytest.raises(SpecmoeError, match=r"lies in \[1, 3\]"):
        acceptance(3.5, AcceptanceKind.TAU, 2)


def test_breakeven_solves_the_golden_ratio():
    # a free drafter and a verify costing two plain steps: S = (1 + α + α²) / 2 at γ = 2
    alpha = breakeven_alpha(lambda a: float(expected_tokens_per_round(a, 2)) / 2)
    assert alpha == pytest.approx((math.sqrt(5) - 1) / 2, abs=1e-5)
    assert breakeven_alpha(lambda a: 0.5) is None
    assert breakeven_alpha(lambda a: 1.5) == 0.0


def test_verdict_rule():
    # band ×/÷ 1.5, shortfall 1.5: the rule as first fixed
    assert verdict(0.6, None, 1.5, 1.5) is Verdict.NO_GO
    assert verdict(1.0, None, 1.5, 1.5) is Verdict.DEPENDS
    assert verdict(2.0, 1.65, 1.5, 1.5) is Verdict.GO
    assert verdict(2.0, 0.6, 1.5, 1.5) is Verdict.NO_GO
    assert verdict(2.0, 0.8, 1.5, 1.5) is Verdict.DEPENDS


def test_a_no_go_survives_the_largest_shortfall_seen():
    # predicted 0.6×: below 1× at the band's optimistic end (0.9×), but a held-out row once
    # measured 2.2× its prediction, so 1.32× cannot be ruled out
    assert verdict(2.0, 0.6, 1.5, 2.2) is Verdict.DEPENDS
    assert verdict(0.6, None, 1.5, 2.2) is Verdict.DEPENDS
    assert verdict(2.0, 0.4, 1.5, 2.2) is Verdict.NO_GO
    # GO keeps the band; a shortfall below the band never makes NO-GO easier to say
    assert verdict(2.0, 1.65, 1.5, 2.2) is Verdict.GO
    assert verdict(2.0, 0.8, 1.5, 1.1) is Verdict.DEPENDS


class _Flat:
    """T(B, t) = 1 + (t − 1)/10: each extra token per row costs a tenth of a step."""

    def time(self, batch, tokens):
        return 1.0 + (tokens - 1) / 10


def test_a_tree_verifies_its_size_and_drafts_its_width():
    alpha = 0.5
    chain = expected_speedup(_Flat(), _Flat(), alpha, 2, 1, shape=RoundShape(wide_after_full=False))
    assert chain == pytest.approx(1.75 / (2 * 1.0 + 1.2))
    tree = expected_speedup(_Flat(), _Flat(), alpha, 2, 1, shape=RoundShape(verify_tokens=10, draft_width=4))
    assert tree == pytest.approx(1.75 / (2 * 1.3 + 1.9))


# --- the command ------------------------------------------------------------------------------------


def _advise(capsys, *args):
    code = cli_main(["advise", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_advise_from_configs_answers_per_batch(capsys):
    code, out, _ = _advise(
        capsys,
        "--config",
        EXAMPLES / "qwen3-30b-a3b.json",
        "--draft",
        "eagle3",
        "--hardware",
        EXAMPLES / "h100-sxm.json",
        "--engine",
        "sglang",
        "--batch",
        "1,64",
        "--gamma",
        "3",
        "--acceptance",
        "3",
        "--acceptance-kind",
        "tau",
        "--json",
    )
    assert code == 0
    advice = json.loads(out)
    assert [row["batch"] for row in advice["rows"]] == [1, 64]
    for row in advice["rows"]:
        assert row["verdict"] in {v.value for v in Verdict}
        best = row["best"]
        assert best["acceptance"]["tau"] == pytest.approx(3.0, abs=1e-6)
        low, high = best["band"]
        assert low < best["speedup"] < high
        if best["breakeven"] is not None:
            assert 1.0 <= best["breakeven"]["tau"] <= 4.0


def test_advise_text_names_the_three_definitions(capsys):
    code, out, _ = _advise(
        capsys,
        "--config",
        EXAMPLES / "qwen3-30b-a3b.json",
        "--draft-config",
        EXAMPLES / "qwen3-0.6b.json",
        "--hardware",
        EXAMPLES / "m2-ultra.json",
        "--engine",
        "llamacpp-metal",
        "--dtype",
        "q4_k_m",
        "--batch",
        "1",
    )
    assert code == 0 and "UNFITTED" in out and "rate" in out and "τ" in out
    assert any(v.value in out for v in Verdict)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", EXAMPLES / "qwen3-8b.json", "--draft", "ngram"], "--hardware FILE and --engine NAME"),
        (
            [
                "--config",
                EXAMPLES / "qwen3-8b.json",
                "--draft",
                "ngram",
                "--hardware",
                EXAMPLES / "m2-ultra.json",
                "--engine",
                "vllm",
            ],
            "runs on cuda",
        ),
        (
            [
                "--config",
                EXAMPLES / "qwen3-8b.json",
                "--hardware",
                EXAMPLES / "h100-sxm.json",
                "--engine",
                "vllm",
            ],
            "say what drafts",
        ),
        (
            [
                "--config",
                EXAMPLES / "qwen3-8b.json",
                "--draft",
                "ngram",
                "--hardware",
                EXAMPLES / "h100-sxm.json",
                "--engine",
                "vllm",
                "--acceptance",
                "0.5",
            ],
            "--acceptance-gamma",
        ),
        ([], "advise needs a target FIT"),
    ],
)
def test_advise_bad_input_is_one_line(capsys, args, message):
    code, _, err = _advise(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


# --- the calibration data -------------------------------------------------------------------------


def test_calibration_rows_are_complete_and_possible():
    path = ROOT / "specmoe" / "calibration" / "data" / "published.csv"
    rows = list(csv.DictReader(path.open(encoding="utf-8", newline="")))
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows) and len(rows) >= 25
    for row in rows:
        assert row["role"] in {"reported", "anchored", "anchor", "excluded"}, row["id"]
        assert row["source"] and row["where"], row["id"]
        if row["role"] == "excluded":
            assert "; " in row["note"], f"{row['id']}: an excluded row says why"
            continue
        assert (EXAMPLES / f"{row['target']}.json").is_file(), row["id"]
        assert (EXAMPLES / f"{row['hardware']}.json").is_file(), row["id"]
        assert row["engine"] in load_engines(), row["id"]
        if row["role"] == "anchored":
            assert by_id[row["anchor"]]["role"] in {"anchor", "reported"}, row["id"]
        if row["role"] == "reported":  # a speedup above its own τ is impossible (1 + rate·γ)
            gamma = int(row["gamma"])
            tau = acceptance(float(row["acceptance"]), AcceptanceKind(row["acceptance_kind"]), gamma).tau
            assert float(row["speedup"]) <= tau, row["id"]


def test_advise_prices_a_short_decode_at_the_batch_size_it_shrinks_from(capsys):
    # A benchmark's 32 tokens per sequence: the slowest of 16 rows sets the loop's length, so SD
    # pays less than in a long decode's steady state; a single row loses only its cut-short round.
    common = ["--config", EXAMPLES / "qwen3-30b-a3b.json", "--draft-config", EXAMPLES / "qwen3-0.6b.json"]
    common += ["--hardware", EXAMPLES / "h100-sxm.json", "--engine", "vllm", "--batch", "16", "--gamma", "4"]
    common += ["--acceptance", "0.7", "--acceptance-kind", "alpha", "--json"]
    _, steady, _ = _advise(capsys, *common)
    _, short, _ = _advise(capsys, *common, "--output-tokens", "32")
    steady, short = json.loads(steady), json.loads(short)
    assert steady["output_tokens"] is None and short["output_tokens"] == 32
    assert short["rows"][0]["best"]["speedup"] < steady["rows"][0]["best"]["speedup"]
    code, _, err = _advise(capsys, *common, "--output-tokens", "0")
    assert code != 0 and "--output-tokens must be at least 1" in err


def test_a_latent_attention_config_need_not_split_its_hidden_size_into_heads():
    # GLM-4.7-Flash: MLA with 20 heads over 2048; its per-head widths are stated, no head_dim.
    config = json.loads((EXAMPLES / "glm-4.7-flash.json").read_text())
    arch = parse_architecture(config, "glm-4.7-flash.json")
    assert arch.num_experts == 64 and arch.top_k == 4 and arch.layers == 47
    grouped = {k: v for k, v in config.items() if k not in ("kv_lora_rank", "q_lora_rank")}
    with pytest.raises(SpecmoeError, match="not a multiple of num_attention_heads"):
        parse_architecture(grouped, "gqa.json")
