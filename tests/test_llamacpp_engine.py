"""llama.cpp as a findings engine: Q4_K_M exports through llama.cpp's quantiser, profiles through
the llama.cpp backend with bandwidth floors, and the per-engine verdict and cost-ratio tables.

Needs the `llamacpp` extra for the export and profile tests (they skip without it, fail under CI).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_gguf import require  # tests/ is on sys.path under pytest's default import mode
from test_llamacpp import PROMPTS, greedy, llama

from specmoe.decoding.drafters import ModelDrafter
from specmoe.errors import SpecmoeError
from specmoe.findings.by_engine import NOT_MEASURED, cost_ratios, verdict_table
from specmoe.findings.plan import ENGINE_SETUPS, engine_setup, plan
from specmoe.perf.floor import add_floors, floor_seconds
from specmoe.suite.overrides import SuiteOverrides, apply_overrides
from specmoe.zoo.gguf import zoo_gguf
from specmoe.zoo.gguf_quantize import tensor_types, types_path

BLOCK = 256  # k-quant super-block: rows narrower than this cannot be q4_K / q6_K


@pytest.fixture(scope="module")
def q4_files(tiny_zoo) -> dict[str, Path]:
    require("llama_cpp")
    return {m: zoo_gguf(tiny_zoo, m, "q4_k_m") for m in ("moe", "draft-xs")}


def test_q4_k_m_export_records_each_tensors_type_and_falls_back_where_rows_are_narrow(q4_files, tiny_zoo):
    record = json.loads(types_path(q4_files["moe"]).read_text())
    assert record == tensor_types(q4_files["moe"])  # the record is what the file holds
    reader = require("gguf").GGUFReader(q4_files["moe"])
    assert int(reader.get_field("general.file_type").contents()) == 15  # LLAMA_FTYPE_MOSTLY_Q4_K_M
    for tensor in reader.tensors:
        kind = record["types"][tensor.name]
        if tensor.name.endswith("norm.weight"):
            assert kind == "f32"
        if int(tensor.shape[0]) % BLOCK:  # ggml's shape[0] is the row length
            assert kind not in ("q4_k", "q6_k"), tensor.name
    assert zoo_gguf(tiny_zoo, "moe", "q4_k_m") == q4_files["moe"]  # cached, not exported again


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_sd_on_q4_k_m_equals_greedy_decoding_on_it(q4_files, gamma):
    target, draft = llama(q4_files["moe"]), llama(q4_files["draft-xs"])
    expected = [greedy(target, [p])[0] for p in PROMPTS]
    assert greedy(target, PROMPTS, ModelDrafter(draft), gamma) == expected


def test_profile_through_llamacpp_records_gguf_bytes_and_floors(q4_files, tmp_path):
    from specmoe.perf.fit import fit_profile
    from specmoe.perf.profile import profile_model

    hw = {"name": "made up", "bandwidth_bytes_per_s": 1e10}
    profile = profile_model(
        q4_files["moe"], [1, 2], [1, 2, 3], context=8, repeats=1, warmup=0, threads=1, hardware=hw
    )
    model = profile["model"]
    assert profile["engine"] == "llamacpp" and model["dtype"] == "q4_k_m" and model["is_moe"]
    assert model["bytes_experts"] > 0 and model["bytes_dense"] > 0
    assert "experts" not in profile and "expert selection" in profile["experts_note"]
    assert profile["settings"]["threads"] == 1
    for point in profile["points"]:
        assert point["floor_s"] == pytest.approx(floor_seconds(model, point["batch"] * point["tokens"], 1e10))
    assert fit_profile(profile)["model"]["dtype"] == "q4_k_m"


def test_floor_reads_the_weights_a_pass_touches():
    model = {"is_moe": True, "num_experts": 64, "top_k": 4, "bytes_dense": 100e6, "bytes_experts": 3.2e9}
    assert floor_seconds(model, 1, 30e9) == pytest.approx(0.010)  # 100 MB + 4/64 of 3.2 GB
    assert floor_seconds(model, 10_000, 30e9) == pytest.approx(3.3e9 / 30e9)  # every expert
    profile = {"model": model, "points": [{"batch": 1, "tokens": 1, "median_s": 0.020}]}
    (point,) = add_floors(profile, {"bandwidth_bytes_per_s": 30e9})["points"]
    assert point["floor_fraction"] == pytest.approx(0.5)


def test_suite_overrides_set_a_key_in_every_model_or_one():
    raw = {"models": {"moe": {"zoo": "moe"}, "draft-xs": {"zoo": "draft-xs"}}, "groups": []}
    every = apply_overrides(raw, SuiteOverrides(settings=(("models.*.gguf", "q4_k_m"),)))
    assert {m["gguf"] for m in every["models"].values()} == {"q4_k_m"}
    one = apply_overrides(raw, SuiteOverrides(settings=(("models.moe.gguf", "q8_0"),)))
    assert one["models"]["moe"]["gguf"] == "q8_0" and "gguf" not in one["models"]["draft-xs"]
    with pytest.raises(SpecmoeError, match=r"no model 'nope'.*available: moe, draft-xs"):
        apply_overrides(raw, SuiteOverrides(settings=(("models.nope.gguf", "q8_0"),)))


def test_llamacpp_study_steps_pair_with_the_transformers_step():
    steps = {s.name: s for s in plan("cpu")}
    base = steps["study"]
    for quant in ("q8_0", "q4_k_m"):
        step = steps[f"study-llamacpp-{quant}"]
        assert step.suite == "study-gguf" and step.threads == 1
        assert step.overrides.groups == base.overrides.groups
        assert step.overrides.settings == (*base.overrides.settings, ("models.*.gguf", quant))
    assert [s.name for s in plan("cpu", ("llamacpp-q4_k_m",))] == ["study-llamacpp-q4_k_m"]
    moesd = steps["moesd-llamacpp-q8_0"]  # the transformers sweep's batch sizes and top-k, γ 4 alone
    settings = dict(moesd.overrides.settings)
    assert moesd.suite == "moesd" and moesd.threads == 1 and settings["batch.gamma"] == [4]
    assert (settings["models.*.backend"], settings["models.*.gguf"]) == ("llamacpp", "q8_0")
    for key in ("batch.batch_size", "sparsity.batch_size", "sparsity.moe_top_k", "repeats"):
        assert settings[key] == dict(steps["moesd"].overrides.settings)[key]
    with pytest.raises(SpecmoeError, match="unknown findings engine 'x'"):
        plan("cpu", ("x",))


def test_a_shipped_export_without_its_store_is_kept(tmp_path, caplog):
    from specmoe.findings.run import run_step

    step = next(s for s in plan("cpu") if s.name == "study")
    (tmp_path / "study.csv").write_text("shipped\n")
    with caplog.at_level("INFO", logger="specmoe"):
        assert run_step(step, tmp_path).read_text() == "shipped\n"
    assert "kept the exported study.csv" in caplog.text


def _profile(tmp_path: Path, folder: str, name: str, times: dict[int, float], moe: bool) -> None:
    model = {"is_moe": moe, "num_experts": 64 if moe else 0, "top_k": 4 if moe else 0}
    model |= {"bytes_dense": 100e6, "bytes_experts": 3.2e9 if moe else 0, "dtype": name.split("-")[-1]}
    points = [{"batch": 1, "tokens": t, "median_s": s} for t, s in times.items()]
    (tmp_path / folder).mkdir(exist_ok=True)
    (tmp_path / folder / f"{name}.json").write_text(json.dumps({"model": model, "points": points}))


def test_cost_ratios_come_from_the_engines_own_batch_one_profiles(tmp_path):
    q8 = engine_setup("llamacpp-q8_0")
    assert cost_ratios(tmp_path, q8) is None
    _profile(tmp_path, "profiles-llamacpp", "moe-q8_0", {1: 0.020, 5: 0.050, 9: 0.080}, moe=True)
    _profile(tmp_path, "profiles-llamacpp", "draft-xs-q8_0", {1: 0.005}, moe=False)
    (tmp_path / "hw.json").write_text(json.dumps({"bandwidth_bytes_per_s": 30e9}))
    ratios = cost_ratios(tmp_path, q8)
    assert (ratios.draft, ratios.verify5, ratios.verify9) == pytest.approx((0.25, 2.5, 4.0))
    assert ratios.over_floor == pytest.approx(2.0)  # floor 10 ms
    assert ratios.dense_draft is None  # no dense-s profile


def test_verdict_table_has_one_column_per_engine_and_a_ratio_beside_measured_verdicts(tmp_path):
    from specmoe.findings.by_engine import EngineVerdicts
    from specmoe.findings.regime import Regime

    _profile(tmp_path, "profiles-llamacpp", "moe-q8_0", {1: 0.020, 5: 0.050}, moe=True)
    _profile(tmp_path, "profiles-llamacpp", "draft-xs-q8_0", {1: 0.005}, moe=False)
    regime = Regime(True, "")
    found = [
        EngineVerdicts(e, dict.fromkeys("abcdef", NOT_MEASURED), regime, regime, cost_ratios(tmp_path, e), 0)
        for e in ENGINE_SETUPS
    ]
    found[1] = EngineVerdicts(
        found[1].engine, dict.fromkeys("abcdef", "holds"), regime, regime, found[1].ratios, 400
    )
    table = verdict_table(found).splitlines()
    assert table[0] == "| claim | transformers bf16 | llama.cpp Q8_0 | llama.cpp Q4_K_M |"
    assert "**holds** · draft ÷ step 0.25" in table[2]  # claim (a) turns on the draft's cost
    assert "**holds** · MoE v(5) 2.5×" in table[3]  # claim (b) on the verify pass's amortisation
    assert table[2].endswith(f"**{NOT_MEASURED}** |")
