"""Suite files: the shipped suites' grids, run keys and deduplication, and one-line load errors."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from suite_files import TINY_ZOO, suite_toml, without, zoo_models

from specmoe.bench.plan import plan
from specmoe.drafts import NgramDraft, OracleDraft
from specmoe.errors import SpecmoeError
from specmoe.prompts import load_prompt_set
from specmoe.results.run_config import RunConfig
from specmoe.suite.expand import expand
from specmoe.suite.load import SUITES_DIR, builtin_suite_path, load_suite, resolve_suite_path
from specmoe.suite.schema import GridAxes, keys
from specmoe.suite.types import GRID_AXES, ModelSpec, RunSpec

DEFAULTS = {"prompts": 1, "repeats": 2, "max_new_tokens": 16}
MODELS = zoo_models("moe", "dense-s", "draft-xs")
GROUP = {"name": "g", "target": ["moe"], "draft": ["draft-xs"], "gamma": [2, 4]}


def tiny_suite(*groups: dict[str, Any], **parts: Any) -> str:
    """The suite these tests share, named "t": the tiny zoo's MoE, dense-s and draft-xs, with
    `groups` (GROUP when none given); `parts` replace whole parts (see `suite_toml`)."""
    base = {"zoo": TINY_ZOO, "defaults": DEFAULTS, "models": MODELS, "groups": list(groups) or [GROUP]}
    return suite_toml(**(base | parts))


def group(*drop: str, **changes: Any) -> dict[str, Any]:
    """GROUP without the keys in `drop`, with `changes`."""
    return without(GROUP, *drop) | changes


def defaults(**changes: Any) -> dict[str, Any]:
    return DEFAULTS | changes


def write(tmp_path: Path, text: str, name: str = "x.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load_text(tmp_path: Path, text: str):
    return load_suite(write(tmp_path, text))


# --- shipped suites ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "size"), [("study", 1818), ("moesd", 2760), ("quick", 40), ("wide", 54)])
def test_shipped_suite_sizes(name, size):
    specs = expand(load_suite(builtin_suite_path(name)))
    assert len(specs) == size
    assert len({s.run_id for s in specs}) == size


def test_the_file_format_declares_the_grid_axes_expand_nests_and_size_counts():
    # One list of axes (`GRID_AXES`): the schema's fields, in the order `expand` nests them.
    assert keys(GridAxes) == GRID_AXES


def test_study_reproduces_the_study_design_over_every_prompt():
    specs = expand(load_suite(builtin_suite_path("study")))
    counts = Counter((s.group, s.arm) for s in specs)
    prompts = sum(len(load_prompt_set(kind)) for kind in ("factual", "code", "reasoning", "chinese"))
    assert prompts == 39  # every prompt of every kind is a paired unit, in each of 2 repeats
    assert counts == {
        ("A", "baseline"): prompts * 2,  # moe x every prompt x 2 repeats
        ("B", "sd"): 12 * prompts * 2,  # 4 drafts x 3 gammas x every prompt x 2
        ("C", "baseline"): 4 * prompts * 2,  # 4 dense models
        ("D", "sd"): 6 * prompts * 2,  # 2 dense targets x 3 gammas
        ("F", "baseline"): 6 * 2,  # 6 prompt lengths x 2, one synthetic batch each
        ("F", "sd"): 6 * 2,
    }
    assert {s.max_new_tokens for s in specs} == {256}
    assert {s.temperature for s in specs} == {0.0}
    assert {s.gamma for s in specs if s.arm == "sd"} == {4, 8, 16}
    assert {s.draft for s in specs if s.group == "B"} == {"draft-xs", "draft-s", "draft-moe", "ngram:1-3"}
    lengths = {s.prompt_length for s in specs if s.group == "F"}
    assert lengths == {32, 64, 128, 256, 512, 1024}
    assert all(s.prompt_set is None for s in specs if s.group == "F")


def test_oracle_draws_are_independent_across_units_and_targets():
    sd = [s for s in expand(load_suite(builtin_suite_path("moesd"))) if s.arm == "sd"]
    seeds = {(s.cell_key, s.prompt_batch, s.repeat): s.oracle_seed for s in sd}
    assert len(set(seeds.values())) == len(seeds)  # no two paired units share a coin stream
    one = sd[0]
    assert one.oracle_seed == replace(one).oracle_seed  # and each is reproducible
    assert replace(one, prompt_batch=one.prompt_batch + 1).oracle_seed != one.oracle_seed
    assert one.key_fields["draft"]["draws"] == "per-unit"  # older shared-stream runs keep other keys


def test_moesd_uses_oracle_drafts_and_sweeps_batch_and_sparsity():
    specs = expand(load_suite(builtin_suite_path("moesd")))
    sd = [s for s in specs if s.arm == "sd"]
    assert {s.batch_size for s in specs} == {1, 2, 4, 8, 16, 32, 64}
    assert {s.gamma for s in sd} == {1, 2, 3, 4}
    assert {s.draft for s in sd} == {OracleDraft(0.6), OracleDraft(0.9)}
    assert all(s.oracle_cost == "draft-xs" and s.draft_model.zoo == "draft-xs" for s in sd)
    assert {s.moe_top_k for s in specs if s.target == "moe"} == {1, 2, 4, 8}
    assert {s.moe_top_k for s in specs if s.target == "dense-s"} == {None}


def test_every_sd_arm_is_measured_in_one_block_with_its_baseline():
    for name in ("study", "moesd", "quick", "wide"):
        for block in plan(load_suite(builtin_suite_path(name))):
            (baseline,) = [s for s in block.specs if s.arm == "baseline"]
            assert all(s.baseline().run_id == baseline.run_id for s in block.specs)
            assert len({(s.prompt_batch, s.repeat) for s in block.specs}) == 1


def test_blocks_run_repeat_by_repeat_and_arms_in_varying_seeded_order():
    blocks = plan(load_suite(builtin_suite_path("quick")))
    repeats = [b.specs[0].repeat for b in blocks]
    assert repeats == sorted(repeats)  # every repeat 0 before any repeat 1
    positions = Counter(next(i for i, s in enumerate(b.specs) if s.arm == "baseline") for b in blocks)
    assert len(positions) > 1  # the baseline is not always first
    again = plan(load_suite(builtin_suite_path("quick")))
    assert [b.run_ids for b in blocks] == [b.run_ids for b in again]


def test_expand_is_deterministic():
    path = builtin_suite_path("quick")
    assert [s.run_id for s in expand(load_suite(path))] == [s.run_id for s in expand(load_suite(path))]


def test_run_ids_are_stable_across_processes():
    code = (
        "from specmoe.suite.expand import expand\n"
        "from specmoe.suite.load import builtin_suite_path, load_suite\n"
        "print(','.join(s.run_id for s in expand(load_suite(builtin_suite_path('quick')))))"
    )
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(out.stdout.strip())
    assert outputs == {",".join(s.run_id for s in expand(load_suite(builtin_suite_path("quick"))))}


def test_config_key_golden_value():
    # Changing how keys are computed orphans every stored run: this must only change on purpose.
    model = ModelSpec("moe", "moe", None, "hf", "tiny", 0)
    spec = RunSpec(
        suite="s", group="g", arm="baseline", target="moe", draft=None, gamma=None, prompt_set="factual",
        prompt_length=None, batch_size=1, temperature=0.0, max_new_tokens=32, moe_top_k=2,
        dtype="float32", device="cpu", repeat=1, warmup=1, target_model=model,
    )  # fmt: skip
    assert spec.config_key == "f7658b2523b80c60"
    assert spec.run_id == "f7658b2523b80c60-1"
    # A run without a draft has no gamma; its key and stored config spell that 0, as they always did.
    assert spec.key_fields["gamma"] == 0 and spec.as_dict()["gamma"] == 0


# --- keys and deduplication --------------------------------------------------------------------


def test_same_work_in_two_groups_is_one_run_named_by_the_first(tmp_path):
    specs = expand(load_text(tmp_path, tiny_suite(GROUP, group(name="h"))))
    assert len(specs) == 2 * 3  # (baseline + 2 gammas) x 2 repeats
    assert {s.group for s in specs} == {"g"}


def test_baseline_only_group_shares_runs_with_sd_baselines(tmp_path):
    specs = expand(load_text(tmp_path, tiny_suite({"name": "base", "target": ["moe"]}, GROUP)))
    assert [s.group for s in specs if s.arm == "baseline"] == ["base", "base"]


def test_key_ignores_suite_group_repeat_and_model_alias(tmp_path):
    a = load_text(tmp_path, tiny_suite())
    aliased = {"big": {"zoo": "moe"}} | zoo_models("dense-s", "draft-xs")
    b = load_suite(write(tmp_path, tiny_suite(group(target=["big"]), name="other", models=aliased), "y.toml"))
    keys_a = [(s.config_key, s.repeat) for s in expand(a)]
    keys_b = [(s.config_key, s.repeat) for s in expand(b)]
    assert keys_a == keys_b
    assert len({s.config_key for s in expand(a)}) == 3


def test_key_depends_on_what_the_model_is(tmp_path):
    tiny = expand(load_text(tmp_path, tiny_suite()))
    bench = expand(load_suite(write(tmp_path, tiny_suite(zoo={"preset": "bench"}), "b.toml")))
    seeded = expand(load_suite(write(tmp_path, tiny_suite(zoo=TINY_ZOO | {"seed": 1}), "s.toml")))
    assert not {s.run_id for s in tiny} & {s.run_id for s in bench}
    assert not {s.run_id for s in tiny} & {s.run_id for s in seeded}


def test_baseline_key_matches_the_baseline_arm():
    specs = expand(load_suite(builtin_suite_path("quick")))
    sd = next(s for s in specs if s.arm == "sd" and s.prompt_set == "code")
    baseline = sd.baseline()
    assert baseline.arm == "baseline" and baseline.draft is None and baseline.gamma is None
    assert all(s.gamma is None if s.draft is None else s.gamma >= 1 for s in specs)
    assert sd.baseline_key == baseline.config_key != sd.config_key
    assert baseline.baseline_key == baseline.config_key
    assert (baseline.prompt_set, baseline.batch_size, baseline.moe_top_k) == ("code", 1, 2)


def test_oracle_spellings_are_one_run(tmp_path):
    text = tiny_suite(group(draft=["oracle:0.50", "oracle:.5", "oracle:1"]))
    specs = expand(load_text(tmp_path, text))
    assert sorted({s.draft for s in specs if s.arm == "sd"}) == ["oracle:0.5", "oracle:1.0"]


def test_ngram_drafts_are_canonical_runs_without_a_draft_model(tmp_path):
    text = tiny_suite(group(draft=["ngram", "ngram:1-3", "ngram:01-3", "ngram:2-4"]))
    sd = [s for s in expand(load_text(tmp_path, text)) if s.arm == "sd"]
    assert sorted({s.draft for s in sd}) == ["ngram:1-3", "ngram:2-4"]
    assert {s.draft for s in sd} == {NgramDraft(1, 3), NgramDraft(2, 4)}
    assert all(s.draft_model is None and s.oracle_cost is None for s in sd)
    # The sizes are part of the run's identity.
    assert len({s.config_key for s in sd}) == 2 * 2  # 2 n-gram specs x 2 gammas
    assert {tuple(s.key_fields["draft"]["ngram"]) for s in sd} == {(1, 3), (2, 4)}


def test_zoo_moe_top_k_is_explicit_so_default_override_is_the_same_run(tmp_path):
    plain = expand(load_text(tmp_path, tiny_suite()))
    override = expand(load_suite(write(tmp_path, tiny_suite(group(moe_top_k=[2])), "k.toml")))
    assert {s.moe_top_k for s in plain} == {2}  # the tiny MoE's own top-k
    assert [s.run_id for s in plain] == [s.run_id for s in override]


def test_group_prompt_length_overrides_default_prompt_set(tmp_path):
    text = tiny_suite(group(prompt_length=[8, 32]), defaults=defaults(prompt_set="code"))
    specs = expand(load_text(tmp_path, text))
    assert {(s.prompt_set, s.prompt_length) for s in specs} == {(None, 8), (None, 32)}


def test_path_models_resolve_against_the_suite_file(tmp_path):
    text = tiny_suite(group(target=["local"]), models=MODELS | {"local": {"path": "models/mine"}})
    suite = load_text(tmp_path, text)
    assert suite.models["local"].path == str((tmp_path / "models/mine").resolve())
    assert {s.moe_top_k for s in expand(suite)} == {None}


def test_prompt_set_file_path(tmp_path):
    (tmp_path / "mine.jsonl").write_text('{"prompt": "hi"}\n', encoding="utf-8")
    specs = expand(load_text(tmp_path, tiny_suite(group(prompt_set="mine.jsonl"))))
    assert {s.prompt_set for s in specs} == {str(tmp_path / "mine.jsonl")}


def test_builtin_suite_paths():
    assert builtin_suite_path("quick") == SUITES_DIR / "quick.toml"
    assert resolve_suite_path("quick") == SUITES_DIR / "quick.toml"
    assert resolve_suite_path("a/b.toml") == Path("a/b.toml")
    with pytest.raises(SpecmoeError, match=r"no built-in suite 'nope'.*quick"):
        builtin_suite_path("nope")


# --- one-line errors naming file and key -------------------------------------------------------

BAD_SUITES = [
    # (description, text, key in the message, other expected fragment)
    ("unknown top key", tiny_suite(zooo={}), "zooo", "did you mean 'zoo'"),
    ("unknown group key", tiny_suite(group(gama=[2])), "groups[0].gama", "did you mean 'gamma'"),
    ("unknown default key", tiny_suite(defaults=defaults(repeat=1)), "defaults.repeat", "repeats"),
    (
        "unknown model key",
        tiny_suite(models=MODELS | {"draft-xs": {"zoo": "draft-xs", "bakend": "hf"}}),
        "models.draft-xs.bakend",
        "backend",
    ),
    ("missing model", tiny_suite(group(target=["mo"])), "groups[0].target", "unknown model 'mo'"),
    ("missing draft", tiny_suite(group(draft=["draft-x"])), "groups[0].draft", "'draft-xs'"),
    ("gamma 0", tiny_suite(group(gamma=[2, 0])), "groups[0].gamma", "gamma must be >= 1, got 0"),
    (
        "batch 0",
        tiny_suite(group(batch_size=[1, 0])),
        "groups[0].batch_size",
        "batch_size must be >= 1, got 0",
    ),
    ("repeats 0", tiny_suite(defaults=defaults(repeats=0)), "defaults.repeats", "must be >= 1"),
    (
        "string for int",
        tiny_suite(group(max_new_tokens="64")),
        "groups[0].max_new_tokens",
        "expected an integer",
    ),
    ("float for int", tiny_suite(group(gamma=[2.5])), "groups[0].gamma", "expected an integer"),
    ("bool for int", tiny_suite(group(batch_size=True)), "groups[0].batch_size", "expected an integer"),
    ("string for float", tiny_suite(group(temperature="hot")), "groups[0].temperature", "expected a number"),
    ("schema missing", tiny_suite(schema=None), "schema", "schema = 1"),
    ("schema 2", tiny_suite(schema=2), "schema", "unsupported schema 2"),
    (
        "both zoo and path",
        tiny_suite(models=MODELS | {"moe": {"zoo": "moe", "path": "x"}}),
        "models.moe",
        "exactly one",
    ),
    (
        "neither zoo nor path",
        tiny_suite(models=MODELS | {"moe": {"backend": "hf"}}),
        "models.moe",
        "exactly one",
    ),
    (
        "unknown zoo model",
        tiny_suite(models=MODELS | {"moe": {"zoo": "mOe"}}),
        "models.moe.zoo",
        "no model 'mOe'",
    ),
    (
        "unknown prompt set",
        tiny_suite(group(prompt_set=["factual", "facts"])),
        "groups[0].prompt_set",
        "factual",
    ),
    ("oracle above 1", tiny_suite(group(draft=["oracle:1.5"])), "groups[0].draft", "oracle:P"),
    ("oracle not a number", tiny_suite(group(draft=["oracle:high"])), "groups[0].draft", "[0, 1]"),
    ("ngram max < min", tiny_suite(group(draft=["ngram:3-1"])), "groups[0].draft", "ngram:1-3"),
    ("ngram zero", tiny_suite(group(draft=["ngram:0-2"])), "groups[0].draft", "1 <= MIN"),
    ("ngram not numbers", tiny_suite(group(draft=["ngram:a-b"])), "groups[0].draft", "MIN-MAX"),
    ("ngram one number", tiny_suite(group(draft=["ngram:3"])), "groups[0].draft", "MIN-MAX"),
    (
        "model named ngram",
        tiny_suite(models=MODELS | {"ngram": {"zoo": "moe"}}),
        "models.ngram",
        "bad model name",
    ),
    (
        "oracle cost undefined",
        tiny_suite(group(draft=["oracle:0.5"], oracle_cost="nano")),
        "groups[0].oracle_cost",
        "[models.nano]",
    ),
    ("gamma without draft", tiny_suite(group("draft", gamma=[4])), "groups[0].gamma", "no draft"),
    ("drafts without gamma", tiny_suite(group("gamma")), "groups[0].gamma", "needs gamma"),
    (
        "top-k on dense",
        tiny_suite(group(target=["dense-s"], moe_top_k=[1])),
        "groups[0].moe_top_k",
        "dense",
    ),
    ("top-k too big", tiny_suite(group(moe_top_k=[64])), "groups[0].moe_top_k", "<= 32"),
    ("empty axis", tiny_suite(group(batch_size=[])), "groups[0].batch_size", "must not be empty"),
    ("no groups", tiny_suite(groups=None), "groups", "at least one"),
    ("group without name", tiny_suite(group("name")), "groups[0].name", "needs a name"),
    ("duplicate group", tiny_suite(GROUP, GROUP), "groups[1].name", "duplicate"),
    (
        "prompt set and length",
        tiny_suite(group(prompt_set="code", prompt_length=8)),
        "groups[0].prompt_length",
        "not both",
    ),
    ("unknown dtype", tiny_suite(group(dtype="bf16")), "groups[0].dtype", "bfloat16"),
    ("unknown device", tiny_suite(group(device="gpu")), "groups[0].device", "cuda"),
    ("zoo without preset", tiny_suite(zoo={"seed": 0}), "models.moe.zoo", "[zoo]"),
    ("unknown preset", tiny_suite(zoo={"preset": "tyni"}), "zoo.preset", "available: tiny, bench"),
    ("preset typo", tiny_suite(zoo={"preset": "tin"}), "zoo.preset", "did you mean 'tiny'"),
    ("second group bad", tiny_suite(GROUP, group(name="h", gamma=[0])), "groups[1].gamma", "got 0"),
]


@pytest.mark.parametrize(
    ("text", "key", "fragment"), [c[1:] for c in BAD_SUITES], ids=[c[0] for c in BAD_SUITES]
)
def test_bad_suite_is_one_line_naming_file_and_key(tmp_path, text, key, fragment):
    path = write(tmp_path, text)
    with pytest.raises(SpecmoeError) as info:
        load_suite(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {key}: "), message
    assert fragment in message, message


# Literal text, not `tiny_suite()`: the expected line numbers count its lines.
BASE = """\
schema = 1
name = "t"

[zoo]
preset = "tiny"

[defaults]
prompts = 1
repeats = 2
max_new_tokens = 16

[models.moe]
zoo = "moe"

[models.dense-s]
zoo = "dense-s"

[models.draft-xs]
zoo = "draft-xs"
"""

GROUP_TEXT = """
[[groups]]
name = "g"
target = ["moe"]
draft = ["draft-xs"]
gamma = [2, 4]
"""


@pytest.mark.parametrize(
    ("text", "line"),
    [(BASE + "oops = = 1\n" + GROUP_TEXT, "line 20"), (BASE + GROUP_TEXT + "gamma = [2,\n", "line 26")],
)
def test_toml_syntax_error_names_the_line(tmp_path, text, line):
    path = write(tmp_path, text)
    with pytest.raises(SpecmoeError) as info:
        load_suite(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: TOML syntax error") and line in message, message


def test_missing_suite_file_is_one_line(tmp_path):
    with pytest.raises(SpecmoeError) as info:
        load_suite(tmp_path / "nope.toml")
    assert "\n" not in str(info.value) and "suite file not found" in str(info.value)


def test_compile_is_a_setting_in_the_key_only_when_set(tmp_path):
    eager = expand(load_text(tmp_path, tiny_suite()))
    compiled = expand(load_text(tmp_path, tiny_suite(defaults=defaults(compile=True))))
    assert all(s.compile for s in compiled) and not any(s.compile for s in eager)
    assert {s.run_id for s in eager}.isdisjoint(s.run_id for s in compiled)
    assert eager[0].config_key == replace(compiled[0], compile=False).config_key
    with pytest.raises(SpecmoeError, match="compile must be true or false"):
        load_text(tmp_path, tiny_suite(defaults=defaults(compile="yes")))


def test_a_note_is_stored_with_each_run_and_left_out_of_its_key(tmp_path):
    plain = expand(load_text(tmp_path, tiny_suite()))
    noted = expand(load_text(tmp_path, tiny_suite(defaults=defaults(note="first try"))))
    assert [s.run_id for s in noted] == [s.run_id for s in plain]
    assert all(s.as_dict()["note"] == "first try" for s in noted)
    assert all("note" not in s.as_dict() for s in plain)  # unset: stored configs as before
    assert RunConfig.from_dict(noted[0].as_dict()).note == "first try"


def test_chat_is_a_setting_refused_with_synthetic_prompts(tmp_path):
    chat = expand(load_text(tmp_path, tiny_suite(defaults=defaults(chat=True))))
    assert all(s.chat for s in chat)
    assert (
        chat[0].config_key
        == replace(chat[0], chat=True).config_key
        != replace(chat[0], chat=False).config_key
    )
    text = tiny_suite(group(prompt_length=[8]), defaults=defaults(chat=True))
    with pytest.raises(SpecmoeError, match="no text to template"):
        load_text(tmp_path, text)
