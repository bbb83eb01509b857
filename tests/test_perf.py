"""Performance model: profiler and expert counts on the tiny zoo, fit round trips on synthetic
timings, first-principles sanity, and one clear line for bad input. No assertion depends on timing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from synthetic_profiles import synthetic_profile

from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.perf.advise import advise
from specmoe.perf.files import write_json
from specmoe.perf.firstprinciples import first_principles_constants
from specmoe.perf.fit import MAX_POINTS, fit_profile, select_points
from specmoe.perf.hardware import Hardware, measure_hardware, parse_hardware
from specmoe.perf.model import Constants, MoEShape, forward_time, roofline
from specmoe.perf.predict import ModelTimes, ProfileTimes, predict
from specmoe.perf.profile import profile_model
from specmoe.perf.structure import parse_architecture
from specmoe.theory import expected_active_experts

GRID = [(b, t) for b in (1, 2, 4, 8, 16) for t in (1, 2, 3, 4, 5, 8)]
MOE = MoEShape(num_experts=64, top_k=4)
MOE_TRUE = Constants(
    overhead_s=2e-3, sequence_s=5e-4, dense_s=3e-3, expert_s=4e-4, knee_tokens=6.0, sharpness=3.0
)
DENSE_TRUE = Constants(overhead_s=1e-3, sequence_s=3e-4, dense_s=9e-3, knee_tokens=5.0, sharpness=2.5)


def _synthetic_profile(constants: Constants, shape: MoEShape, grid=GRID, noise=0.0, seed=0) -> dict:
    return synthetic_profile(constants, shape, grid, noise, seed)


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specmoe: error:")
    for word in words:
        assert word in lines[0]


# --- the formula -------------------------------------------------------------------------------


def test_roofline_is_a_smooth_max_of_one_and_x():
    x = np.array([1e-3, 0.5, 1.0, 2.0, 1e3])
    assert np.allclose(roofline(x, math.inf), np.maximum(1, x))
    assert np.allclose(roofline(x, 1.0), 1 + x)
    smooth = roofline(x, 4.0)
    assert (
        np.all(smooth >= np.maximum(1, x))
        and smooth[0] == pytest.approx(1)
        and smooth[-1] == pytest.approx(1e3)
    )
    assert np.isfinite(roofline(1e6, 16.0))


def test_expert_term_follows_active_experts_while_memory_bound():
    # Knee far away: the expert term is w_e · N(n), so T(1, t) − T(1, 1) tracks N(t) − K.
    constants = Constants(expert_s=1e-3, knee_tokens=1e6)
    for t in (2, 5, 9):
        extra = forward_time(constants, MOE, 1, t) - forward_time(constants, MOE, 1, 1)
        assert extra == pytest.approx(1e-3 * (expected_active_experts(t, 64, 4) - 4))


# --- profiler on the tiny zoo ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_moe_profile(tiny_zoo) -> dict:
    return profile_model(
        tiny_zoo / "moe", [1, 2], [1, 3], context=8, dtype="float32", repeats=2, warmup=1, trace_samples=2
    )


def test_profiler_times_every_point_of_the_grid(tiny_moe_profile):
    profile = tiny_moe_profile
    assert [(p["batch"], p["tokens"]) for p in profile["points"]] == [(1, 1), (1, 3), (2, 1), (2, 3)]
    for point in profile["points"]:
        assert len(point["times_s"]) == 2 and all(s > 0 for s in point["times_s"])
        assert point["min_s"] <= point["median_s"] <= point["max_s"]
    model = profile["model"]
    assert model["is_moe"] and (model["num_experts"], model["top_k"]) == (32, 2)
    assert model["bytes_experts"] > model["bytes_dense"] > 0


def test_expert_counts_sit_beside_the_balanced_expectation(tiny_moe_profile):
    rows = {(r["batch"], r["tokens"]): r for r in tiny_moe_profile["experts"]}
    assert set(rows) == {(1, 1), (1, 3), (2, 1), (2, 3)}
    for (b, t), row in rows.items():
        n = b * t
        assert row["n_tokens"] == n and len(row["distinct_per_layer"]) == 2
        assert row["expected"] == pytest.approx(expected_active_experts(n, 32, 2))
        for distinct in row["distinct_per_layer"]:
            assert 2 <= distinct <= min(32, 2 * n)  # one token picks exactly K distinct experts
    assert rows[(1, 1)]["distinct_mean"] == 2
    assert rows[(2, 3)]["distinct_mean"] == pytest.approx(rows[(2, 3)]["expected"], rel=0.35)


def test_dense_profile_has_no_expert_counts(tiny_zoo):
    profile = profile_model(
        tiny_zoo / "dense-s", [1], [1, 2], context=4, dtype="float32", repeats=1, warmup=0
    )
    assert not profile["model"]["is_moe"] and "experts" not in profile
    assert len(profile["points"]) == 2


def test_profile_fit_predict_advise_from_the_command_line(capsys, tiny_zoo, tmp_path):
    profile, fit, draft = tmp_path / "moe.json", tmp_path / "fit.json", tmp_path / "draft.json"
    common = ("--context", 8, "--repeats", 2, "--warmup", 1, "--dtype", "float32", "--quiet")
    code, out, _ = _cli(
        capsys,
        "profile",
        "--model",
        tiny_zoo / "moe",
        "--batch",
        "1,2",
        "--tokens",
        "1,2,3",
        "--out",
        profile,
        *common,
    )
    assert code == 0 and profile.is_file()
    code, out, _ = _cli(
        capsys,
        "profile",
        "--model",
        tiny_zoo / "draft-xs",
        "--batch",
        "1,2",
        "--tokens",
        "1",
        "--out",
        draft,
        *common,
    )
    assert code == 0
    code, out, _ = _cli(capsys, "model", "fit", profile, "--out", fit)
    assert code == 0 and "expert_s" in out
    assert json.loads(fit.read_text())["quality"]["fit_points"] == 6
    code, out, _ = _cli(
        capsys,
        "model",
        "predict",
        fit,
        "--batch",
        "1,2",
        "--gamma",
        "2",
        "--alpha",
        "0.8",
        "--draft",
        draft,
        "--json",
    )
    assert code == 0
    rows = json.loads(out)["rows"]
    assert [(r["batch"], r["gamma"]) for r in rows] == [(1, 2), (2, 2)]
    assert all(r["draft_s"] > 0 and set(r["speedup"]) == {"0.8"} for r in rows)
    code, out, _ = _cli(capsys, "advise", fit, "--draft", draft, "--alpha", "0.7", "--batch", "1,2")
    assert code == 0 and out.count("B=") == 2


# --- fit and predict on synthetic timings ------------------------------------------------------


@pytest.mark.parametrize(("true", "shape"), [(MOE_TRUE, MOE), (DENSE_TRUE, MoEShape())])
def test_fit_recovers_known_constants(true, shape):
    fit = fit_profile(_synthetic_profile(true, shape))
    assert (
        fit["quality"]["fit_points"] == MAX_POINTS
        and fit["quality"]["heldout_points"] == len(GRID) - MAX_POINTS
    )
    for name, entry in fit["parameters"].items():
        assert entry["value"] == pytest.approx(getattr(true, name), rel=1e-4), name
    assert fit["quality"]["heldout_worst_abs_rel"] < 1e-6


def test_fit_with_noise_reports_uncertainties_that_cover_the_truth():
    fit = fit_profile(_synthetic_profile(MOE_TRUE, MOE, noise=0.01, seed=3))
    for name in ("overhead_s", "dense_s", "expert_s"):
        entry = fit["parameters"][name]
        assert entry["std"] is not None and entry["std"] > 0
        assert abs(entry["value"] - getattr(MOE_TRUE, name)) < 5 * entry["std"] + 0.05 * getattr(
            MOE_TRUE, name
        )
    assert fit["quality"]["heldout_median_abs_rel"] < 0.03


def test_point_selection_is_spread_deterministic_and_capped():
    chosen = select_points(GRID)
    assert len(chosen) == MAX_POINTS and chosen == select_points(list(reversed(GRID)))
    assert {(1, 1), (1, 8), (16, 1), (16, 8)} <= set(chosen) <= set(GRID)
    assert {b for b, _ in chosen} == {1, 2, 4, 8, 16} and {t for _, t in chosen} == {1, 2, 3, 4, 5, 8}
    assert select_points(GRID[:5]) == sorted(GRID[:5])


def test_predict_round_trip_through_a_fit_file(capsys, tmp_path):
    path = write_json(tmp_path / "fit.json", fit_profile(_synthetic_profile(MOE_TRUE, MOE)))
    code, out, _ = _cli(
        capsys, "model", "predict", path, "--batch", "1,4", "--gamma", "2,4", "--alpha", "0,1", "--json"
    )
    assert code == 0
    for row in json.loads(out)["rows"]:
        b, g = row["batch"], row["gamma"]
        t1, tv = forward_time(MOE_TRUE, MOE, b, 1), forward_time(MOE_TRUE, MOE, b, g + 1)
        assert row["efficiency"] == pytest.approx(t1 / tv, rel=1e-5)
        assert row["speedup"]["0"] == pytest.approx(t1 / tv, rel=1e-5)  # free draft, nothing accepted
        assert row["speedup"]["1"] == pytest.approx((g + 1) * t1 / tv, rel=1e-5)


def test_advise_says_plainly_when_sd_will_not_pay():
    # Memory-bound up to 8 tokens, then compute-bound: SD pays at B = 1, not at B = 64.
    target = ModelTimes("t", Constants(dense_s=10e-3, knee_tokens=8.0), MoEShape(), 0, True)
    draft = ProfileTimes("d", {1: ((1.0, 64.0), (1e-3, 3e-3))}, "draft.json")
    advice = advise(target, [draft], [0.8], [1, 64])
    first, last = advice["rows"]
    assert first["pays"] and first["best"]["speedup"] > 1
    assert not last["pays"] and last["best"]["speedup"] < 1
    from specmoe.perf.terminal import format_advice

    text = format_advice(advice)
    assert "B=64" in text and "SD will not pay" in text and "decode without a draft" in text


def test_sparser_routing_stays_memory_bound_longer():
    # MoESD §3: once every expert is active, a sparser router gives each expert fewer tokens, so a
    # verify pass stays under the knee longer. B = 128: all 64 experts active for K = 2 and K = 16.
    constants = Constants(overhead_s=1e-3, dense_s=1e-4, expert_s=1e-4, knee_tokens=100.0, sharpness=4.0)
    eta = {}
    for k in (2, 16, 64):
        target = ModelTimes("k", constants, MoEShape(64, k), 0, True)
        eta[k] = predict(target, None, [128], [4], [0.8])["rows"][0]["efficiency"]
    assert eta[2] > 0.9 and eta[2] > eta[16] > eta[64]


# --- first principles --------------------------------------------------------------------------

CONFIG = {
    "model_type": "qwen3_moe",
    "hidden_size": 1024,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": 2048,
    "intermediate_size": 512,
    "moe_intermediate_size": 512,
    "num_experts": 64,
    "num_experts_per_tok": 4,
    "torch_dtype": "bfloat16",
}
GPU = Hardware("gpu", 4.8e12, {"bfloat16": 9.89e14}, 1)


def _efficiency(config: dict, hardware: Hardware, batch: int, gamma: int) -> float:
    arch = parse_architecture(config, "config.json")
    target = ModelTimes(
        "x", first_principles_constants(arch, hardware), MoEShape(arch.num_experts, arch.top_k), 512, False
    )
    return predict(target, None, [batch], [gamma], [0.8])["rows"][0]["efficiency"]


def test_first_principles_dense_routing_is_free_while_memory_bound():
    dense = {**CONFIG, "num_experts_per_tok": 64}  # ρ = 1: every token uses every expert
    assert _efficiency(dense, GPU, 1, 3) == pytest.approx(1.0, abs=0.02)
    assert _efficiency(CONFIG, GPU, 1, 3) < 0.5  # top-4 of 64: four tokens load ~3.6x the experts
    no_experts = {k: v for k, v in CONFIG.items() if "expert" not in k}
    assert not parse_architecture(no_experts, "config.json").is_moe
    assert _efficiency(no_experts, GPU, 1, 3) == pytest.approx(1.0, abs=0.02)


def test_first_principles_time_never_rises_with_bandwidth():
    arch = parse_architecture(CONFIG, "config.json")
    shape = MoEShape(arch.num_experts, arch.top_k)
    for batch, tokens in [(1, 1), (1, 5), (16, 5), (256, 8)]:
        times = [
            forward_time(
                first_principles_constants(arch, Hardware("h", bw, {"bfloat16": 1e14})),
                shape,
                batch,
                tokens,
                512,
            )
            for bw in (1e11, 5e11, 1e12, 4e12)
        ]
        assert np.all(np.diff(times) <= 0) and times[0] > times[-1], (batch, tokens)


EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "perf-examples"


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [("mixtral-8x7b", 46.7e9, 12.9e9), ("qwen2-57b-a14b", 57.4e9, 14.2e9), ("dense-8b", 8.03e9, 8.03e9)],
)
def test_shipped_configs_count_the_published_parameters(name, total, active):
    arch = parse_architecture(json.loads((EXAMPLES / f"{name}.json").read_text()), name)
    embedding = arch.vocab * arch.hidden  # untied input table, read one row per token
    assert arch.params_dense + arch.num_experts * arch.params_per_expert + embedding == pytest.approx(
        total, rel=0.01
    )
    assert arch.params_dense + arch.top_k * arch.params_per_expert + embedding == pytest.approx(
        active, rel=0.01
    )


def test_shipped_hardware_files_parse():
    names = {path.stem for path in EXAMPLES.glob("*.json") if "kind" in json.loads(path.read_text())}
    assert {"h100-sxm", "h200-sxm", "2x-h200-ep", "m2-ultra"} <= names
    for name in names:
        hardware = parse_hardware(json.loads((EXAMPLES / f"{name}.json").read_text()), name)
        assert hardware.bandwidth_bytes_per_s > 1e11 and hardware.flops_for("bfloat16") > 1e13


def test_expert_parallelism_needs_enough_experts():
    arch = parse_architecture(CONFIG, "config.json")
    with pytest.raises(SpecmoeError, match="device_count 128 exceeds the 64 experts"):
        first_principles_constants(arch, Hardware("h", 1e12, {"bfloat16": 1e14}, 128))


def test_unfitted_prediction_from_the_command_line(capsys, tmp_path):
    config = write_json(tmp_path / "config.json", CONFIG)
    hardware = write_json(
        tmp_path / "gpu.json", {"bandwidth_bytes_per_s": 4.8e12, "flops_per_s": {"bfloat16": 9.89e14}}
    )
    code, out, _ = _cli(
        capsys,
        "model",
        "predict",
        "--config",
        config,
        "--hardware",
        hardware,
        "--batch",
        "1,64",
        "--gamma",
        "3",
    )
    assert code == 0 and "UNFITTED" in out


def test_measured_hardware_reads_back_as_a_hardware_file():
    hardware = measure_hardware("cpu", read_mib=1, matmul_size=32, repeats=1)
    parsed = parse_hardware(json.loads(json.dumps(hardware)), "hw.json")
    assert parsed.bandwidth_bytes_per_s > 0 and set(parsed.flops_per_s) == {"float32", "bfloat16"}


# --- bad input: one clear line -----------------------------------------------------------------


def test_fewer_points_than_constants_is_one_clear_error(capsys, tmp_path):
    profile = _synthetic_profile(MOE_TRUE, MOE, grid=[(1, 1), (1, 2), (2, 1)])
    with pytest.raises(SpecmoeError, match="3 timed points but the MoE model has 6 constants"):
        fit_profile(profile)
    path = write_json(tmp_path / "small.json", profile)
    code, _, err = _cli(capsys, "model", "fit", path, "--out", tmp_path / "fit.json")
    _one_line_error(code, err, "3 timed points", "profile at least 6")
    assert not (tmp_path / "fit.json").exists()


def test_more_than_21_points_asked_for_is_refused(capsys, tmp_path):
    path = write_json(tmp_path / "p.json", _synthetic_profile(MOE_TRUE, MOE))
    code, _, err = _cli(capsys, "model", "fit", path, "--out", tmp_path / "fit.json", "--max-points", "30")
    _one_line_error(code, err, "--max-points", "21")


def test_unknown_keys_are_one_clear_error(capsys, tmp_path):
    with pytest.raises(SpecmoeError, match="unknown key 'bandwith_bytes_per_s'"):
        parse_hardware({"bandwith_bytes_per_s": 1e12, "flops_per_s": 1e14}, "hw.json")
    with pytest.raises(SpecmoeError, match="unknown expert key 'num_expert'"):
        parse_architecture({**CONFIG, "num_expert": 8}, "config.json")
    config = write_json(tmp_path / "config.json", {**CONFIG, "kv_lora_rank": 512})
    hardware = write_json(
        tmp_path / "hw.json", {"bandwidth_bytes_per_s": 1e12, "flops_per_s": 1e14, "gpus": 8}
    )
    code, _, err = _cli(capsys, "model", "predict", "--config", config, "--hardware", hardware)
    _one_line_error(code, err, "unknown key 'gpus'", "allowed keys")
    good_hw = write_json(tmp_path / "ok.json", {"bandwidth_bytes_per_s": 1e12, "flops_per_s": 1e14})
    code, _, err = _cli(capsys, "model", "predict", "--config", config, "--hardware", good_hw)
    _one_line_error(code, err, "qk_rope_head_dim")  # MLA half-described: the missing key is named


def test_missing_config_key_names_the_key():
    config = {k: v for k, v in CONFIG.items() if k != "hidden_size"}
    with pytest.raises(SpecmoeError, match="'hidden_size' must be an integer"):
        parse_architecture(config, "config.json")


def test_negative_batch_size_is_one_clear_error(capsys, tmp_path, tiny_zoo):
    path = write_json(tmp_path / "fit.json", fit_profile(_synthetic_profile(MOE_TRUE, MOE)))
    code, _, err = _cli(capsys, "model", "predict", path, "--batch", "4,-2")
    _one_line_error(code, err, "--batch", "-2")
    with pytest.raises(SpecmoeError, match="--batch: -1 is not allowed"):
        profile_model(tiny_zoo / "moe", "-1", "1")
    with pytest.raises(SpecmoeError, match="batch size must be >= 1"):
        forward_time(MOE_TRUE, MOE, -3, 1)


def test_wrong_file_kind_is_one_clear_error(capsys, tmp_path):
    profile = write_json(tmp_path / "p.json", _synthetic_profile(MOE_TRUE, MOE))
    code, _, err = _cli(capsys, "model", "predict", profile)
    _one_line_error(code, err, "specmoe-profile", "expected specmoe-fit")
    code, _, err = _cli(capsys, "model", "predict", Path(tmp_path / "missing.json"))
    _one_line_error(code, err, "not found")


def test_advice_from_a_fit_carries_the_fits_error_and_will_not_call_a_close_row():
    from specmoe.perf.advise import with_fit_error
    from specmoe.perf.fit import fit_error
    from specmoe.perf.terminal import format_advice

    rows = [
        {
            "batch": b,
            "target_1_s": 1e-3,
            "pays": s >= 1,
            "best": {
                "draft": "d",
                "alpha": 0.8,
                "gamma": 2,
                "speedup": s,
                "efficiency": 0.5,
                "extrapolated": False,
            },
        }
        for b, s in ((1, 1.5), (4, 1.05), (16, 0.6))
    ]
    assert fit_error({"quality": {"heldout_median_abs_rel": 0.2, "fit_median_abs_rel": 0.01}}) == 0.2
    advice = with_fit_error({"target": "t", "fitted": True, "rows": rows}, 0.2)
    assert [r["within_error"] for r in advice["rows"]] == [False, True, False]
    assert advice["rows"][0]["band"] == pytest.approx([1.5 / 1.4, 1.5 * 1.4])
    text = format_advice(advice)
    assert "median 20.0%" in text and "a poor fit" in text
    assert "B=4    too close to call" in text and "B=1    use d" in text and "B=16   SD will not pay" in text
