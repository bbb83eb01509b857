"""Hostile models: model configs with impossible sizes (dense and hybrid linear-attention ones
given to `model predict --config` and `advise --config`), impossible batch and draft lists, GPU device
strings on a machine without a GPU, config.json values transformers cannot build, inputs nested past
Python's parser, stores whose throughput was edited, and pickle checkpoints (one under
--allow-pickle loads, a broken one is one line). The table of every probe, with what it did
before: docs/results/cpu/probes-configs-batches-devices.md.

Each refused input runs `specmoe.cli.main` in this process, in a thread with a bound (as in
tests/test_bad_input_files.py), and must end in exit status 2 and one line `specmoe...: error: ...`
without a traceback or "unexpected", and without a store when it names one. Inputs that are right
are checked to work as documented. Copies of prompts and a prompt file edited mid-suite:
tests/test_bad_input_identity.py; audit verdicts: tests/test_bad_input_audit.py.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from suite_files import write_suite
from test_bad_input_files import BOUND_S, Case, run_main

from specmoe.cli import main
from specmoe.extras import installed

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "docs" / "perf-examples"
HARDWARE = EXAMPLES / "h100-sxm.json"
FIT = REPO / "docs" / "results" / "cpu" / "perf_fits" / "moe-float32.json"
DEEP = 100_000  # levels of [ in the hostile JSON files: far past Python's parser
needs_llamacpp = pytest.mark.skipif(not installed("llama_cpp"), reason="the llamacpp extra is not installed")


def _example(name: str) -> dict:
    return json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def _config_files(folder: Path) -> dict[str, Path]:
    """Perf-example configs with one value made impossible (or, for the valid ones, unusual)."""
    moe, hybrid, study = (
        _example("qwen3-30b-a3b"),
        _example("qwen3-next-80b-a3b"),
        _example("qwen3.5-35b-a3b-study"),
    )
    variants = {
        "moe-experts-0": (moe, {"num_experts": 0}),
        "moe-experts-negative": (moe, {"num_experts": -4}),
        "moe-experts-text": (moe, {"num_experts": "128"}),
        "moe-experts-fraction": (moe, {"num_experts": 128.5}),
        "moe-kv-heads-3": (moe, {"num_key_value_heads": 3}),
        "moe-kv-heads-64": (moe, {"num_key_value_heads": 64}),
        "moe-sparse-step-0": (moe, {"decoder_sparse_step": 0}),
        "moe-sparse-step-negative": (moe, {"decoder_sparse_step": -1}),
        "moe-mlp-only-layers-int": (moe, {"mlp_only_layers": 5}),
        "moe-text-config-list": (moe, {"text_config": [1]}),
        "hybrid-interval-0": (hybrid, {"full_attention_interval": 0}),
        "hybrid-interval-1000": (hybrid, {"full_attention_interval": 1000}),
        "hybrid-conv-0": (hybrid, {"linear_conv_kernel_dim": 0}),
        "hybrid-conv-negative": (hybrid, {"linear_conv_kernel_dim": -3}),
        "hybrid-layer-types-mamba": (
            hybrid,
            {"layer_types": ["linear_attention", "mamba"] * 24, "full_attention_interval": None},
        ),
        "hybrid-layer-types-text": (hybrid, {"layer_types": "full_attention"}),
        "hybrid-shared-expert-negative": (hybrid, {"shared_expert_intermediate_size": -512}),
    }
    paths = {}
    for name, (base, changes) in variants.items():
        config = copy.deepcopy(base)
        for key, value in changes.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(config), encoding="utf-8")
    # Qwen3.5-MoE as transformers saves it: the language model's shape under text_config
    for name, experts in (("qwen3_5_moe-nested", 128), ("qwen3_5_moe-nested-experts-0", 0)):
        nested = {"model_type": "qwen3_5_moe", "text_config": {**study, "num_experts": experts}}
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(nested), encoding="utf-8")
    paths["deep"] = folder / "deep.json"
    paths["deep"].write_text('{"a": ' + "[" * DEEP + "]" * DEEP + "}", encoding="utf-8")
    return paths


def _model_dirs(zoo: Path, folder: Path, deep: Path) -> dict[str, Path]:
    """The tiny zoo's MoE with one config.json value changed (the weights are the MoE's own)."""
    changes = {
        "top-k-0": {"num_experts_per_tok": 0},
        "top-k-99": {"num_experts_per_tok": 99},
        "vocab-0": {"vocab_size": 0},
        "heads-0": {"num_attention_heads": 0},
        "eps-int-0": {"rms_norm_eps": 0},
        "experts-text": {"num_local_experts": "32"},
    }
    dirs = {}
    for name, change in changes.items():
        dirs[name] = folder / f"moe-{name}"
        shutil.copytree(zoo / "moe", dirs[name])
        config = json.loads((dirs[name] / "config.json").read_text(encoding="utf-8"))
        (dirs[name] / "config.json").write_text(json.dumps(config | change), encoding="utf-8")
    dirs["deep"] = folder / "moe-deep"
    shutil.copytree(zoo / "moe", dirs["deep"])
    shutil.copy(deep, dirs["deep"] / "config.json")
    return dirs


def _suites(zoo: Path, folder: Path, gguf: Path) -> dict[str, Path]:
    defaults = {"repeats": 1, "warmup": 0, "max_new_tokens": 2, "dtype": "float32", "prompt_set": "factual"}
    defaults["prompts"] = 1
    tables = {
        "device-cuda": ({"t": {"path": zoo / "moe"}}, {"device": ["cuda"]}),
        "gguf-device-cuda": ({"t": {"path": gguf}}, {"device": ["cuda"]}),
        "top-k-99": ({"t": {"path": zoo / "moe"}}, {"moe_top_k": [99]}),
    }
    return {
        name: write_suite(
            folder, name, defaults=defaults, models=models, groups=[{"name": "g", "target": ["t"], **group}]
        )
        for name, (models, group) in tables.items()
    }


def _deep_toml(folder: Path) -> Path:
    path = folder / "deep.toml"
    path.write_text('schema = 1\nname = "deep"\nx = ' + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    return path


def _tampered_stores(good_db: Path, folder: Path) -> dict[str, Path]:
    import sqlite3

    stores = {}
    for name, value in (("negative", -50.0), ("zero", 0.0)):
        stores[name] = folder / f"tampered-{name}.db"
        shutil.copy(good_db, stores[name])
        with sqlite3.connect(stores[name]) as conn:
            conn.execute("UPDATE runs SET tokens_per_s = ? WHERE arm = 'baseline'", (value,))
        conn.close()
    return stores


def _predict(config: Path, *extra: str) -> tuple[str, ...]:
    return (
        "model",
        "predict",
        "--config",
        str(config),
        "--hardware",
        str(HARDWARE),
        "--batch",
        "1,8",
        *extra,
    )


def _advise(config: Path, *extra: str, draft: tuple[str, ...] = ("--draft", "ngram")) -> tuple[str, ...]:
    return (
        "advise", "--config", str(config), *draft, "--hardware", str(HARDWARE), "--engine", "vllm",
        "--acceptance", "0.6", "--acceptance-kind", "alpha", *extra,
    )  # fmt: skip


# predict --config <variant> -> a part of the refusal
PREDICT_REFUSALS = {
    "predict-config-num-experts-0": (
        "moe-experts-0",
        "num_experts is 0 but num_experts_per_tok is 8: an MoE",
    ),
    "predict-config-experts-negative": (
        "moe-experts-negative",
        "'num_experts' must be an integer >= 0, got -4",
    ),
    "predict-config-experts-text": ("moe-experts-text", "'num_experts' must be an integer >= 0, got '128'"),
    "predict-config-experts-fraction": (
        "moe-experts-fraction",
        "'num_experts' must be an integer >= 0, got 128.5",
    ),
    "predict-config-kv-heads-3": ("moe-kv-heads-3", "heads 32 is not a multiple of num_key_value_heads 3"),
    "predict-config-kv-heads-64": ("moe-kv-heads-64", "heads 32 is not a multiple of num_key_value_heads 64"),
    "predict-config-sparse-step-0": (
        "moe-sparse-step-0",
        "'decoder_sparse_step' must be an integer >= 1, got 0",
    ),
    "predict-config-sparse-step-negative": ("moe-sparse-step-negative", "'decoder_sparse_step' must be an"),
    "predict-config-mlp-only-layers-int": (
        "moe-mlp-only-layers-int",
        "'mlp_only_layers' must be a list of layer",
    ),
    "predict-config-text-config-list": ("moe-text-config-list", "'text_config' must be an object"),
    "predict-hybrid-interval-0": (
        "hybrid-interval-0",
        "'full_attention_interval' must be an integer >= 1, got 0",
    ),
    "predict-hybrid-conv-0": ("hybrid-conv-0", "'linear_conv_kernel_dim' must be an integer >= 1, got 0"),
    "predict-hybrid-conv-negative": (
        "hybrid-conv-negative",
        "'linear_conv_kernel_dim' must be an integer >= 1",
    ),
    "predict-hybrid-layer-types-mamba": (
        "hybrid-layer-types-mamba",
        "layer_types holds 'mamba', a layer this",
    ),
    "predict-hybrid-layer-types-text": (
        "hybrid-layer-types-text",
        "'layer_types' must be a list of layer kinds",
    ),
    "predict-hybrid-shared-expert-negative": (
        "hybrid-shared-expert-negative",
        "'shared_expert_intermediate_size'",
    ),
    "predict-qwen3_5_moe-nested-experts-0": (
        "qwen3_5_moe-nested-experts-0",
        "num_experts is 0 but num_experts_per",
    ),
}
# generate --target <the tiny MoE with one config.json value changed> -> a part of the refusal
GENERATE_REFUSALS = {
    "generate-config-top-k-0": ("top-k-0", "num_experts_per_tok must be between 1 and the 32 experts, got 0"),
    "generate-config-top-k-99": (
        "top-k-99",
        "num_experts_per_tok must be between 1 and the 32 experts, got 99",
    ),
    "generate-config-vocab-0": ("vocab-0", "'vocab_size' must be an integer >= 1, got 0"),
    "generate-config-heads-0": ("heads-0", "'num_attention_heads' must be an integer >= 1, got 0"),
    "generate-config-eps-int-0": ("eps-int-0", "Field 'rms_norm_eps' expected float, got int (value: 0)"),
    "generate-config-experts-text": ("experts-text", "'num_local_experts' must be an integer >= 0, got '32'"),
    "generate-config-nested-100000-deep": ("deep", "is not valid JSON (arrays or objects nested too deeply"),
}
TOO_DEEP = "arrays or objects nested too deeply to read"


def cases(zoo: Path, folder: Path, good_db: Path, gguf: Path) -> dict[str, Case]:
    configs = _config_files(folder)
    models = _model_dirs(zoo, folder, configs["deep"])
    suites = _suites(zoo, folder, gguf)
    stores = _tampered_stores(good_db, folder)
    hybrid = EXAMPLES / "qwen3-next-80b-a3b.json"
    plain = _predict(hybrid)[:-2]  # without its --batch

    def generate(target: Path, *extra: str) -> tuple[str, ...]:
        return ("generate", "--target", str(target), "--prompt", "hi", "--max-new-tokens", "2", *extra)

    def run(name: str, *extra: str) -> tuple[str, ...]:
        return ("bench", "run", str(suites[name]), "--db", str(folder / f"{name}.db"), "--quiet", *extra)

    def suite(name: str, expect: str, *extra: str) -> Case:
        return Case(run(name, *extra), expect, folder / f"{name}.db")

    def summary(store: str, expect: str) -> Case:
        return Case(("bench", "summary", "--db", str(stores[store])), expect)

    tau = ("--acceptance", "2.0", "--acceptance-kind", "tau", "--acceptance-gamma", "0")
    found = {name: Case(_predict(configs[c]), expect) for name, (c, expect) in PREDICT_REFUSALS.items()}
    found |= {name: Case(generate(models[m]), expect) for name, (m, expect) in GENERATE_REFUSALS.items()}
    deep_suite = _deep_toml(folder)
    return found | {
        # the refusals beside predict-config-num-experts-0
        "suite-nested-5000-deep": Case(
            ("bench", "run", str(deep_suite), "--db", str(folder / "deep.db")),
            "deep.toml: arrays or tables nested too deeply to read",
            folder / "deep.db",
        ),
        "suite-set-nested-3000-deep": suite(
            "top-k-99",
            "--set gamma=...: lists nested too deeply",
            "--set",
            "gamma=" + "[" * 3000 + "]" * 3000,
        ),
        "store-tokens-per-s-negative": summary(
            "negative", "tokens_per_s must be a finite number > 0, got -50.0"
        ),
        "store-tokens-per-s-zero": summary("zero", "tokens_per_s must be a finite number > 0, got 0.0"),
        # configs to advise --config / --draft-config, and JSON past the parser
        "advise-hybrid-conv-negative": Case(
            _advise(configs["hybrid-conv-negative"]),
            "'linear_conv_kernel_dim' must be an integer >= 1, got -3",
        ),
        "advise-draft-config-experts-0": Case(
            _advise(hybrid, draft=("--draft-config", str(configs["moe-experts-0"]))),
            "num_experts is 0 but num_experts_per_tok is 8",
        ),
        "advise-config-nested-100000-deep": Case(_advise(configs["deep"]), TOO_DEEP),
        "predict-fit-nested-100000-deep": Case(("model", "predict", str(configs["deep"])), TOO_DEEP),
        # batch and draft lists
        "predict-batch-empty": Case((*plain, "--batch", ""), "argument --batch: empty; pass a list"),
        "advise-batch-empty": Case(_advise(hybrid, "--batch", ""), "argument --batch: empty; pass a list"),
        "advise-gamma-empty": Case(_advise(hybrid, "--gamma", ""), "argument --gamma: empty; pass a list"),
        "predict-batch-10-million": Case(
            (*plain, "--batch", "1,10000000"), "--batch: 10000000 is above the limit of 4096"
        ),
        "predict-fit-batch-1e9": Case(
            ("model", "predict", str(FIT), "--batch", "1000000000"), "--batch: 1000000000 is above the limit"
        ),
        "profile-batch-1-million": Case(
            (
                "profile",
                "--model",
                str(zoo / "draft-xs"),
                "--batch",
                "1000000",
                "--out",
                str(folder / "p.json"),
            ),
            "--batch: 1000000 is above the limit of 4096",
        ),
        "advise-draft-vocab-0": Case(
            _advise(hybrid, "--draft-vocab", "0", draft=("--draft", "eagle3")),
            "--draft-vocab: must be >= 1, got 0",
        ),
        "advise-acceptance-gamma-0": Case(
            (*_advise(hybrid)[:-4], *tau), "argument --acceptance-gamma: must be >= 1, got 0"
        ),
        # GPU device strings on a machine without a GPU
        "generate-device-cuda-colon": Case(
            generate(zoo / "draft-xs", "--device", "cuda:"), "unknown device 'cuda:'"
        ),
        "generate-gguf-device-cuda-minus-1": Case(
            generate(gguf, "--device", "cuda:-1"), "unknown device 'cuda:-1'"
        ),
        "suite-device-cuda": suite(
            "device-cuda", "group g: device cuda was asked for but torch sees no CUDA GPU; set device"
        ),
        "suite-gguf-device-cuda": suite(
            "gguf-device-cuda", "group g: device cuda was asked for but this llama-cpp-python has no GPU"
        ),
        "suite-top-k-99": suite(
            "top-k-99", "model t: moe_top_k must be between 1 and the model's 32 experts"
        ),
    }


VALID = {
    # right inputs that stay accepted: a hybrid whose every layer is linear attention (as transformers
    # reads an interval past the layers), a nested multimodal config, a repeated batch size
    "hybrid-interval-1000": lambda c: _predict(c["hybrid-interval-1000"]),
    "qwen3_5_moe-nested": lambda c: _advise(c["qwen3_5_moe-nested"]),
    "batch-repeated": lambda c: (*_predict(EXAMPLES / "qwen3-next-80b-a3b.json")[:-2], "--batch", "4,4"),
}
NEEDS_NO_GPU = {"generate-device-cuda-colon", "suite-device-cuda"}
NEEDS_LLAMACPP = {"generate-gguf-device-cuda-minus-1", "suite-gguf-device-cuda"}


@pytest.fixture(scope="module")
def setting(tiny_zoo, tmp_path_factory) -> tuple[Path, dict[str, Case]]:
    from tiny_suites import tiny_sd_suite

    from specmoe.backends.llamacpp_probe import write_model
    from specmoe.bench.suite_run import run_suite
    from specmoe.suite.load import load_suite

    folder = tmp_path_factory.mktemp("round4")
    good_db = folder / "good.db"
    suite = tiny_sd_suite(folder, "good", {"prompts": 1, "max_new_tokens": 2, "repeats": 1, "warmup": 0})
    run_suite(load_suite(suite), good_db, tiny_zoo, progress=False)
    gguf = folder / "tiny.gguf"
    write_model(gguf)  # the llama.cpp self-test's model: a valid GGUF of a few hundred KB
    return folder, cases(tiny_zoo, folder, good_db, gguf)


CASE_IDS = [
    *PREDICT_REFUSALS,
    *GENERATE_REFUSALS,
    "suite-nested-5000-deep", "suite-set-nested-3000-deep", "store-tokens-per-s-negative",
    "store-tokens-per-s-zero", "advise-hybrid-conv-negative", "advise-draft-config-experts-0",
    "advise-config-nested-100000-deep", "predict-fit-nested-100000-deep",
    "predict-batch-empty", "advise-batch-empty", "advise-gamma-empty", "predict-batch-10-million",
    "predict-fit-batch-1e9", "profile-batch-1-million", "advise-draft-vocab-0", "advise-acceptance-gamma-0",
    "generate-device-cuda-colon", "generate-gguf-device-cuda-minus-1", "suite-device-cuda",
    "suite-gguf-device-cuda", "suite-top-k-99",
]  # fmt: skip


@pytest.mark.parametrize("name", CASE_IDS)
def test_hostile_input_is_refused_in_one_line(setting, name, capsys, monkeypatch):
    if name in NEEDS_NO_GPU and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    if name in NEEDS_LLAMACPP:
        if not installed("llama_cpp"):
            pytest.skip("the llamacpp extra is not installed")
        from specmoe.backends.llamacpp_load import llama_lib

        if name == "suite-gguf-device-cuda" and llama_lib().llama_supports_gpu_offload():
            pytest.skip("this llama-cpp-python has a GPU backend")
    _, all_cases = setting
    case = all_cases[name]
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    status = run_main(case.argv)
    assert status is not None, f"still running after {BOUND_S} s: a hang"
    lines = capsys.readouterr().err.strip().splitlines()
    assert status == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("specmoe") and ": error: " in lines[0], lines[0]
    assert "unexpected" not in lines[0] and "Traceback" not in lines[0], lines[0]
    assert case.expect in lines[0], lines[0]
    if case.db is not None:
        assert not case.db.exists()


@pytest.mark.parametrize("name", sorted(VALID))
def test_right_inputs_stay_accepted(name, tmp_path, capsys):
    argv = VALID[name](_config_files(tmp_path))
    assert run_main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    if name == "batch-repeated":  # one row per (B, γ): the repeated 4 is the same batch size
        assert sum(1 for line in out.splitlines() if line.split()[:1] == ["4"]) == 4  # γ = 1..4


def test_every_case_is_listed(setting):
    assert sorted(setting[1]) == sorted(CASE_IDS)


# --- --allow-pickle loads what it promises ---------------------------------------------------------


def _pickle_copy(model: Path, folder: Path, extra: dict) -> Path:
    """`model` with its safetensors weights saved as pytorch_model.bin, `extra` pickled beside them."""
    out = folder / f"{model.name}-pickle"
    shutil.copytree(model, out)
    tensors = {}
    for file in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(file))
        file.unlink()
    (out / "model.safetensors.index.json").unlink(missing_ok=True)
    torch.save({**tensors, **extra}, out / "pytorch_model.bin")
    return out


def test_allow_pickle_loads_a_checkpoint_the_weights_only_unpickler_refuses(tiny_zoo, tmp_path, capsys):
    # An older checkpoint: a numpy scalar pickled beside the tensors. torch's weights-only unpickler,
    # which transformers uses whatever it is told, refuses it: "unexpected UnpicklingError" before.
    model = _pickle_copy(tiny_zoo / "draft-xs", tmp_path, {"training_step": np.int64(5)})
    argv = ["generate", "--target", str(model), "--prompt", "Hello", "--max-new-tokens", "6", "--json"]
    assert main([*argv, "--allow-pickle"]) == 0
    pickled = json.loads(capsys.readouterr().out)["outputs"][0]["token_ids"]
    assert main([*argv[:2], str(tiny_zoo / "draft-xs"), *argv[3:]]) == 0
    assert pickled == json.loads(capsys.readouterr().out)["outputs"][0]["token_ids"]  # the same weights
    assert main(argv) == 2  # without the flag: still refused, in one line
    assert "holds only pickle weights" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["cut to a third", "not a pickle"])
def test_a_broken_pickle_checkpoint_is_one_line(tiny_zoo, tmp_path, capsys, damage):
    model = _pickle_copy(tiny_zoo / "draft-xs", tmp_path, {})
    data = (model / "pytorch_model.bin").read_bytes()
    broken = data[: len(data) // 3] if damage == "cut to a third" else b"not a pickle\n"
    (model / "pytorch_model.bin").write_bytes(broken)
    argv = ["generate", "--target", str(model), "--prompt", "hi", "--max-new-tokens", "2", "--allow-pickle"]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "pytorch_model.bin: not a readable pickle checkpoint" in lines[0], lines
    assert "unexpected" not in lines[0]
