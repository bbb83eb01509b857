"""Suites that name config-built models (`models.X.config = "...json"`), and the shipped
moesd-gpu suite, checked on the CPU: loading, keys, overrides, building into the cache, a run."""

from __future__ import annotations

from pathlib import Path

import pytest
from suite_files import suite_toml

from specmoe.bench.suite_run import run_suite
from specmoe.bench.suite_zoo import prepare_zoo
from specmoe.drafts import OracleDraft
from specmoe.errors import SpecmoeError
from specmoe.suite.expand import expand
from specmoe.suite.load import builtin_suite_path, load_suite
from specmoe.suite.model_paths import local_files
from specmoe.suite.overrides import SuiteOverrides
from specmoe.suite.size import check_size

# resolved: docs/perf-examples links to specmoe/perf/examples, and the suite stores resolved paths
EXAMPLES = (Path(__file__).resolve().parent.parent / "docs" / "perf-examples").resolve()
OLMOE_JSON = str(EXAMPLES / "olmoe-1b-7b.json")
# OLMoE's and Qwen3-0.6B's architectures, experts and top-k, widths cut to run in a second.
OLMOE = {"hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4}
OLMOE |= {"num_key_value_heads": 4, "vocab_size": 4096}
DRAFT = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
DRAFT |= {"num_key_value_heads": 1, "head_dim": 16, "vocab_size": 4096}


def config_suite(tmp_path: Path, **model_changes) -> Path:
    """A one-group suite on a config-built OLMoE with an oracle paying for a config-built draft."""
    models = {
        "olmoe": {"config": str(EXAMPLES / "olmoe-1b-7b.json"), "overrides": OLMOE},
        "draft": {"config": str(EXAMPLES / "qwen3-0.6b.json"), "overrides": DRAFT},
    } | model_changes
    text = suite_toml(
        "c",
        zoo={"seed": 1},
        defaults={"prompts": 1, "max_new_tokens": 6, "dtype": "float32", "oracle_cost": "draft"},
        models=models,
        groups=[{"name": "g", "target": ["olmoe"], "draft": ["oracle:0.9"], "gamma": [2]}],
    )
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_config_models_are_keyed_by_content_seed_and_weights(tmp_path):
    suite = load_suite(config_suite(tmp_path))
    model = suite.models["olmoe"]
    assert model.config == str(EXAMPLES / "olmoe-1b-7b.json") and dict(model.config_overrides) == OLMOE
    assert set(model.identity) == {"config", "seed", "weights", "backend"}
    assert model.identity["seed"] == 1 and model.identity["weights"] == "bfloat16"
    other = load_suite(config_suite(tmp_path, olmoe={"config": str(EXAMPLES / "olmoe-1b-7b.json")}))
    assert other.models["olmoe"].identity != model.identity  # other overrides: another model
    assert len(expand(suite)) == 2


def test_relative_config_paths_are_taken_from_the_suite_file(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "o.json").write_bytes((EXAMPLES / "olmoe-1b-7b.json").read_bytes())
    path = config_suite(tmp_path, olmoe={"config": "configs/o.json", "overrides": OLMOE})
    assert load_suite(path).models["olmoe"].config == str(tmp_path / "configs" / "o.json")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"config": "missing.json"}, "models.olmoe.config: config file not found"),
        ({"config": OLMOE_JSON, "overrides": {"hiden_size": 8}}, "no key 'hiden_size'"),
        ({"zoo": "moe", "overrides": {"vocab_size": 4096}}, "overrides = changes a config model's config"),
        ({"config": OLMOE_JSON, "zoo": "moe"}, "give exactly one of zoo ="),
        ({"config": OLMOE_JSON, "backend": "llamacpp"}, 'backend "hf"'),
    ],
)
def test_bad_config_models_are_one_line_naming_the_key(tmp_path, entry, message):
    with pytest.raises(SpecmoeError) as err:
        load_suite(config_suite(tmp_path, olmoe=entry))
    assert "models.olmoe" in str(err.value) and message in str(err.value) and "\n" not in str(err.value)


def test_set_points_a_model_at_a_config(tmp_path):
    overrides = SuiteOverrides((("models.olmoe.config", str(EXAMPLES / "qwen3-0.6b.json")),))
    suite = load_suite(config_suite(tmp_path), overrides)
    assert suite.models["olmoe"].config == str(EXAMPLES / "qwen3-0.6b.json")


def test_a_suite_builds_its_config_models_into_the_cache_and_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    suite = load_suite(config_suite(tmp_path))
    assert prepare_zoo(suite, None) is None  # no preset: nothing else to build
    where = local_files(suite.models["olmoe"], None)
    assert where is not None and where.is_relative_to(tmp_path / "cache" / "specmoe" / "zoo" / "configs")
    assert "-seed1-bfloat16" in where.parent.name and (where / "config.json").is_file()
    rows = run_suite(suite, tmp_path / "r.db", None, progress=False)
    assert sorted(r.arm for r in rows) == ["baseline", "sd"]
    assert all(r.counts.emitted == 6 for r in rows)
    assert rows[0].env["weights"]  # the built files are fingerprinted like any path's


def test_moesd_gpu_is_the_documented_sweep():
    suite = load_suite(builtin_suite_path("moesd-gpu"))
    specs = expand(suite)
    assert check_size(suite) == len(specs) == 270
    assert all(m.config is not None for m in suite.models.values())
    sd = [s for s in specs if s.arm == "sd"]
    assert {s.target for s in specs} == {"olmoe", "dense", "qwen3-moe"}
    assert {s.draft for s in sd} == {OracleDraft(0.6), OracleDraft(0.9)}
    assert {s.gamma for s in sd} == {1, 2, 3, 4}
    assert {s.batch_size for s in specs} == {1, 4, 16, 64, 128}
    assert {(s.device, s.dtype) for s in specs} == {("cuda", "bfloat16")}
    # Each oracle pays for a draft with its target's vocabulary.
    vocab = {name: dict(m.config_overrides).get("vocab_size") for name, m in suite.models.items()}
    assert vocab["dense"] == vocab["draft-olmoe"] == 50304 and vocab["draft-qwen3"] is None
    assert {(s.target, s.oracle_cost) for s in sd} == {
        ("olmoe", "draft-olmoe"),
        ("dense", "draft-olmoe"),
        ("qwen3-moe", "draft-qwen3"),
    }
