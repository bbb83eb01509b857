"""Suites that name servers: schema, errors, run keys, and how SD and no-SD servers pair up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from suite_files import TINY_ZOO, suite_toml, without, zoo_models

from specmoe.errors import SpecmoeError
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite

PLAIN = {"url": "http://10.0.0.5:8000/v1", "model": "Qwen/Qwen3-235B-A22B", "engine": "vllm"}
EAGLE = {
    "url": "http://10.0.0.6:8000",
    "model": "Qwen/Qwen3-235B-A22B",
    "engine": "vllm",
    "api_key_env": "VLLM_KEY",
    "endpoint": "chat",
    "timeout_s": 120,
}
GROUP = {
    "name": "sd",
    "target": ["plain"],
    "draft": ["eagle"],
    "gamma": [3],
    "concurrency": [1, 4, 16],
    "repeats": 2,
    "max_new_tokens": 128,
}
LOCAL = zoo_models("moe", "draft-xs")  # from the tiny zoo


def served(*groups: dict[str, Any], eagle: dict[str, Any] = EAGLE, local: bool = False, **parts: Any) -> str:
    """Suite "serve": the plain and eagle servers (and the tiny zoo's LOCAL models when `local`),
    with `groups` (GROUP when none given); `parts` replace whole parts (see `suite_toml`)."""
    models = {"plain": PLAIN, "eagle": eagle} | (LOCAL if local else {})
    zoo = TINY_ZOO if local else None
    return suite_toml("serve", zoo=zoo, models=models, groups=list(groups) or [GROUP], **parts)


def load(tmp_path: Path, text: str):
    path = tmp_path / "serve.toml"
    path.write_text(text)
    return load_suite(path)


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(SpecmoeError) as err:
        load(tmp_path, text)
    message = str(err.value)
    assert "\n" not in message
    return message.split(": ", 1)[1]  # without the file name


def test_servers_are_models_with_a_url(tmp_path):
    suite = load(tmp_path, served())
    plain, eagle = suite.models["plain"].server, suite.models["eagle"].server
    assert plain.url == "http://10.0.0.5:8000" and plain.endpoint == "completions"
    assert (eagle.api_key_env, eagle.endpoint, eagle.timeout_s) == ("VLLM_KEY", "chat", 120.0)
    assert suite.models["plain"].backend == "openai"


def test_each_sd_server_run_is_paired_with_the_plain_server_at_the_same_concurrency(tmp_path):
    specs = expand(load(tmp_path, served()))
    baselines = {s.run_id: s for s in specs if s.arm == "baseline"}
    sds = [s for s in specs if s.arm == "sd"]
    assert len(baselines) == len(sds) == 3 * 2
    for sd in sds:
        base = baselines[f"{sd.baseline_key}-{sd.repeat}"]
        assert base.concurrency == sd.concurrency and base.target_model.server.url == "http://10.0.0.5:8000"
        assert sd.draft_model.server.url == "http://10.0.0.6:8000" and sd.gamma == 3
    assert sorted({s.concurrency for s in specs}) == [1, 4, 16]
    assert {s.batch_size for s in specs} == {1}


def test_run_keys_follow_what_is_measured_not_secrets_or_timeouts(tmp_path):
    keys = {s.run_id for s in expand(load(tmp_path, served()))}
    quieter = served(eagle=EAGLE | {"timeout_s": 30, "api_key_env": "OTHER_KEY"})
    assert {s.run_id for s in expand(load(tmp_path, quieter))} == keys
    moved = served(eagle=EAGLE | {"url": "http://10.0.0.7:8000"})
    assert {s.run_id for s in expand(load(tmp_path, moved))} != keys
    more = served(GROUP | {"requests": 32})
    assert not {s.run_id for s in expand(load(tmp_path, more))} & keys


def test_a_served_target_defaults_to_concurrency_1_and_a_local_one_has_none(tmp_path):
    (spec,) = expand(load(tmp_path, served({"name": "base", "target": "plain"})))
    assert (spec.arm, spec.concurrency, spec.requests) == ("baseline", 1, None)
    assert "concurrency" in spec.key_fields


def test_resources_per_run_are_settings(tmp_path):
    group = load(tmp_path, served(without(GROUP, "repeats") | {"cpus": 0.5, "gpus": 2})).groups[0]
    assert (group.cpus, group.gpus) == (0.5, 2.0)
    default = load(tmp_path, served()).groups[0]
    assert (default.cpus, default.gpus) == (1.0, None)


@pytest.mark.parametrize(
    ("eagle", "message"),
    [
        (EAGLE | {"url": "10.0.0.6:8000"},
         "models.eagle.url: not a server URL: '10.0.0.6:8000'; write http://host:port"),
        (without(EAGLE, "model"),
         'models.eagle.model: a served model needs model = "<its name on the server>" (GET /v1/models)'),
        (EAGLE | {"engine": "vlm"},
         "models.eagle.engine: unknown engine 'vlm' (did you mean 'vllm'?); "
         "choose from vllm, sglang, llamacpp-server, generic"),
        (EAGLE | {"endpoint": "responses"},
         "models.eagle.endpoint: unknown endpoint 'responses'; choose from completions, chat"),
        (EAGLE | {"api_key_env": "sk-abc-123"},
         "models.eagle.api_key_env: not an environment variable name; give the name of the variable "
         "that holds the key (e.g. OPENAI_API_KEY), never the key itself"),
        (EAGLE | {"timeout_s": 0}, "models.eagle.timeout_s: timeout_s must be > 0, got 0"),
        (EAGLE | {"backend": "hf"},
         'models.eagle.backend: a model with url = is served: backend must be "openai"'),
    ],
)  # fmt: skip
def test_bad_server_entries_are_one_line(tmp_path, eagle, message):
    assert error(tmp_path, served(eagle=eagle)) == message


def test_openai_backend_without_a_url_says_what_to_give(tmp_path):
    text = suite_toml(
        None, models={"x": {"path": "m.gguf", "backend": "openai"}}, groups=[{"name": "g", "target": "x"}]
    )
    assert error(tmp_path, text) == (
        'models.x.backend: backend "openai" talks to a server: give url = "http://host:port" and '
        'model = "<served name>" instead of zoo = or path ='
    )


def test_server_keys_on_a_local_model_are_refused(tmp_path):
    models = {"moe": {"zoo": "moe", "engine": "vllm"}}
    text = suite_toml(None, zoo=TINY_ZOO, models=models, groups=[{"name": "g", "target": "moe"}])
    assert error(tmp_path, text) == (
        "models.moe.engine: engine applies to served models (url = ...) only; remove it"
    )


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({"target": ["plain", "moe"]},
         "groups[0].target: a group's targets must be all servers (url =) or all local; split the group"),
        ({"target": "plain", "draft": ["draft-xs"], "gamma": [4]},
         "groups[0].draft: 'draft-xs' is not a server; the SD arm of a served target is a second server "
         "of the same model with speculative decoding on (url =)"),
        ({"target": "plain", "draft": ["oracle:0.5"], "gamma": [4]},
         "groups[0].draft: 'oracle:0.5' is not a server"),
        ({"target": "moe", "draft": ["eagle"], "gamma": [4]},
         "groups[0].draft: 'eagle' is a server: only a served target's SD arm can be"),
        ({"target": "moe", "concurrency": [4]},
         "groups[0].concurrency: concurrency applies to served targets (url =) only; "
         "local targets use batch_size"),
        ({"target": "plain", "batch_size": [8]},
         "groups[0].batch_size: servers batch requests themselves: set concurrency = [...] instead"),
        ({"target": "plain", "prompt_length": [64]},
         "groups[0].prompt_length: synthetic prompts for server 'plain' need its tokenizer: add "
         'tokenizer = "<HF dir or hub ID>" to [models.plain], or use prompt_set'),
        ({"target": "plain", "moe_top_k": [2]},
         "groups[0].moe_top_k: moe_top_k cannot change a served model; remove it from this group"),
        ({"target": "plain", "concurrency": [0]}, "groups[0].concurrency: concurrency must be >= 1, got 0"),
        ({"target": "plain", "requests": 0}, "groups[0].requests: requests must be >= 1, got 0"),
        ({"target": "plain", "cpus": 0}, "groups[0].cpus: cpus must be > 0, got 0"),
    ],
)  # fmt: skip
def test_bad_serving_groups_are_one_line(tmp_path, group, message):
    assert error(tmp_path, served({"name": "g"} | group, local=True)).startswith(message)


def test_sd_and_plain_servers_must_serve_the_same_model(tmp_path):
    assert error(tmp_path, served(eagle=EAGLE | {"model": "other"})) == (
        "groups[0].draft: server 'eagle' serves 'other' but target 'plain' serves 'Qwen/Qwen3-235B-A22B'; "
        "both arms must serve the same model"
    )


def test_a_default_concurrency_does_not_touch_local_groups(tmp_path):
    local = {"name": "local", "target": "moe"}
    text = served(without(GROUP, "concurrency"), local, local=True, defaults={"concurrency": [1, 4]})
    specs = expand(load(tmp_path, text))
    assert {s.concurrency for s in specs if s.group == "local"} == {None}
    assert {s.concurrency for s in specs if s.group == "sd"} == {1, 4}
