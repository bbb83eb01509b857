"""What 2026 engines do, priced: llama.cpp's per-position hybrid rollback, MLX engines on hybrids,
block drafters, experts in host memory, pipeline parallelism refused, and the 2026 hardware files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.perf.drafts import DFLASH_BLOCK, Drafter, DraftMethod
from specmoe.perf.engines import engine_profile, load_engines
from specmoe.perf.firstprinciples import load_config
from specmoe.perf.hardware import load_hardware, parse_hardware
from specmoe.perf.offload import ALL_LAYERS, offloaded_layers
from specmoe.perf.rollback import HybridRollback
from specmoe.perf.setup import configured_setup

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "specmoe" / "perf" / "examples"
HYBRID = EXAMPLES / "qwen3.5-35b-a3b.json"
PARTS_2026 = (
    "rtx5090",
    "rtx-pro-6000",
    "dgx-spark",
    "m5-max",
    "ryzen-ai-max-395",
    "r9700",
    "b200",
)


def _advise(capsys, *args) -> tuple[int, dict | None, str]:
    """Exit status, the --json answer, stderr; a usage error counts as its exit status."""
    try:
        code = main(["advise", *map(str, args)])
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and "--json" in args else None), err


def _common(hardware: str, engine: str, draft: str = "mtp", *extra) -> list:
    return [
        "--config",
        HYBRID,
        "--draft",
        draft,
        "--hardware",
        EXAMPLES / f"{hardware}.json",
        "--engine",
        engine,
        "--batch",
        "1",
        "--acceptance",
        "0.7",
        "--acceptance-kind",
        "alpha",
        "--json",
        *extra,
    ]


@pytest.mark.parametrize("engine", ["llamacpp-cuda", "llamacpp-rocm", "llamacpp-vulkan"])
def test_llamacpp_rolls_a_hybrid_back_per_position_with_its_own_drafters(capsys, engine):
    code, advice, err = _advise(capsys, *_common("rtx5090", engine, "mtp", "--gamma", "3"))
    assert code == 0, err
    assert advice["hybrid_rollback"] == "per_position"
    profile = load_engines()[engine]
    assert profile.rollback_for(DraftMethod.MTP) is HybridRollback.PER_POSITION
    assert profile.rollback_for(DraftMethod.DFLASH) is HybridRollback.PER_POSITION
    # a separate draft model asks for no snapshots: checkpoint and decode again
    assert profile.rollback_for(DraftMethod.MODEL) is HybridRollback.REDECODE


def test_an_older_llamacpp_build_is_one_line_and_prices_the_redecode(capsys, tmp_path):
    older = tmp_path / "older.toml"
    older.write_text('[engines.llamacpp-cuda]\nhybrid_rollback = "redecode"\n', encoding="utf-8")
    args = _common("rtx5090", "llamacpp-cuda", "mtp", "--gamma", "3")
    _, native, _ = _advise(capsys, *args)
    code, old, err = _advise(capsys, *args, "--engines", older)
    assert code == 0, err
    assert old["hybrid_rollback"] == "redecode"
    assert old["rows"][0]["best"]["speedup"] < native["rows"][0]["best"]["speedup"]
    # the override keeps the rest of the shipped profile
    shipped = load_engines()["llamacpp-cuda"]
    assert load_engines(older)["llamacpp-cuda"].layer_s == shipped.layer_s


def test_mlx_engines_answer_mtp_on_a_hybrid_and_refuse_only_a_draft_model(capsys):
    code, advice, err = _advise(capsys, *_common("m3-ultra", "mlx", "mtp", "--gamma", "1,2"))
    assert code == 0, err
    assert advice["rows"][0]["verdict"] and advice["hybrid_rollback"] == "per_position"
    args = ["--config", HYBRID, "--draft-config", EXAMPLES / "qwen3.5-0.8b-study.json"]
    args += ["--hardware", EXAMPLES / "m3-ultra.json", "--engine", "mlx"]
    code, _, err = _advise(capsys, *args)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--draft model" in err and "mtp" in err


def test_a_block_drafter_is_parsed_once_and_checks_its_block():
    assert Drafter.parse("dflash") == Drafter(DraftMethod.DFLASH, DFLASH_BLOCK)
    assert Drafter.parse("DFlash:8").block == 8 and Drafter.parse("dflash:8").proposals == 7
    assert Drafter.parse("eagle3") == Drafter(DraftMethod.EAGLE3)
    for bad in ("dflash:1", "dflash:x", "dflash:65", "eagle3:4"):
        with pytest.raises(SpecmoeError):
            Drafter.parse(bad)


def test_dflash_under_sglang_prices_one_forward_per_block(capsys):
    args = _common("h100-sxm", "sglang", "dflash")
    code, advice, err = _advise(capsys, *args)
    assert code == 0, err
    assert advice["block"] == 16 and advice["rows"][0]["best"]["gamma"] == 15
    target = load_config(HYBRID)
    hw, engine = load_hardware(EXAMPLES / "h100-sxm.json"), load_engines()["sglang"]
    setup = configured_setup(target, hw, engine, DraftMethod.DFLASH, block=16)
    # one forward over the block, whatever γ compose charges it in
    assert setup.draft(15).time(1, 1) * 15 == pytest.approx(setup.draft_times.time(1, 16))
    assert setup.shape.verify(15) == 16
    code, _, err = _advise(capsys, *args, "--gamma", "4")
    assert code == 2 and "dflash:5" in err


def test_experts_in_host_memory_change_the_answer(capsys):
    args = _common("rtx4090", "llamacpp-cuda", "mtp", "--gamma", "1,2,3", "--dtype", "q4_k_m")
    _, device, _ = _advise(capsys, *args)
    code, host, err = _advise(capsys, *args, "--n-cpu-moe", "48")
    assert code == 0, err
    assert host["offloaded_moe_layers"] == 40
    assert host["rows"][0]["target_1_s"] > device["rows"][0]["target_1_s"]
    assert host["rows"][0]["best"]["speedup"] != device["rows"][0]["best"]["speedup"]
    _, every, _ = _advise(capsys, *args, "--cpu-moe")
    assert every["rows"][0]["target_1_s"] == pytest.approx(host["rows"][0]["target_1_s"])


@pytest.mark.parametrize(
    "engine, hardware, extra, message",
    [
        ("vllm", "rtx4090", ("--n-cpu-moe", "8"), "llama.cpp's"),
        ("llamacpp-cuda", "h100-sxm", ("--n-cpu-moe", "8"), "'host' object"),
        ("llamacpp-cuda", "rtx4090", ("--n-cpu-moe", "-1"), "--n-cpu-moe"),
        ("llamacpp-cuda", "rtx4090", ("--n-cpu-moe", "4", "--cpu-moe"), "--cpu-moe"),
    ],
)
def test_expert_offload_refusals_are_one_line(capsys, engine, hardware, extra, message):
    code, _, err = _advise(capsys, *_common(hardware, engine, "mtp", *extra))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_offload_counts_llamacpp_blocks_dense_ones_first():
    assert offloaded_layers(10, 40, 40) == 10
    assert offloaded_layers(48, 40, 40) == 40
    assert offloaded_layers(ALL_LAYERS, 61, 58) == 58
    assert offloaded_layers(2, 61, 58) == 0  # DeepSeek's first three blocks are dense
    dense = load_config(EXAMPLES / "qwen3-8b.json")
    hw, engine = load_hardware(EXAMPLES / "rtx4090.json"), load_engines()["llamacpp-cuda"]
    with pytest.raises(SpecmoeError, match="has none"):
        configured_setup(dense, hw, engine, DraftMethod.NGRAM, cpu_moe=4)


def test_pipeline_parallelism_is_refused_in_one_line(capsys):
    code, _, err = _advise(capsys, *_common("h100-sxm", "vllm", "mtp", "--pp", "4"))
    assert code == 2 and "pipeline parallelism" in err and len(err.strip().splitlines()) == 1
    code, _, err = _advise(capsys, *_common("h100-sxm", "vllm", "mtp", "--pp", "1"))
    assert code == 0, err


def test_tensor_parallel_over_a_network_is_priced_and_says_so(capsys):
    args = [a for a in _common("2x-dgx-spark", "llamacpp-cuda", "mtp", "--gamma", "2") if a != "--json"]
    assert main(["advise", *map(str, args)]) == 0
    assert "network: 2 devices over a network link" in capsys.readouterr().out


@pytest.mark.parametrize("name", PARTS_2026)
def test_the_2026_hardware_files_load_with_their_sources(name):
    data = json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))
    assert len(data["source"]) > 80
    hw = load_hardware(EXAMPLES / f"{name}.json")
    assert hw.bandwidth_bytes_per_s > 1e11 and hw.flops_per_s["bfloat16"] > 1e13


@pytest.mark.parametrize("bad", [-1.0, float("inf"), "fast", True])
def test_a_host_object_checks_its_numbers(bad):
    data = json.loads((EXAMPLES / "rtx4090.json").read_text(encoding="utf-8"))
    data["host"] = {**data["host"], "bandwidth_bytes_per_s": bad}
    with pytest.raises(SpecmoeError, match="finite number > 0"):
        parse_hardware(data, "hw.json")
    data["host"] = {**data["host"], "bandwidth_bytes_per_s": 1e11, "typo": 1}
    with pytest.raises(SpecmoeError, match="unknown host key"):
        parse_hardware(data, "hw.json")


def test_a_rollback_by_draft_must_name_a_draft_method(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[engines.llamacpp-cuda]\nrollback_by_draft = { lookahead = "none" }\n', encoding="utf-8")
    with pytest.raises(SpecmoeError, match="rollback_by_draft"):
        engine_profile("llamacpp-cuda", extra=bad)
