"""Suites that name servers: schema, errors, run keys, and how SD and no-SD servers pair up."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmoe.bench.suite_expand import expand
from specmoe.bench.suite_load import load_suite
from specmoe.errors import SpecmoeError

SERVERS = """
schema = 1
name = "serve"
[models.plain]
url = "http://10.0.0.5:8000/v1"
model = "Qwen/Qwen3-235B-A22B"
engine = "vllm"
[models.eagle]
url = "http://10.0.0.6:8000"
model = "Qwen/Qwen3-235B-A22B"
engine = "vllm"
api_key_env = "VLLM_KEY"
endpoint = "chat"
timeout_s = 120
"""
GROUP = """
[[groups]]
name = "sd"
target = ["plain"]
draft = ["eagle"]
gamma = [3]
concurrency = [1, 4, 16]
repeats = 2
max_new_tokens = 128
"""


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
    suite = load(tmp_path, SERVERS + GROUP)
    plain, eagle = suite.models["plain"].server, suite.models["eagle"].server
    assert plain.url == "http://10.0.0.5:8000" and plain.endpoint == "completions"
    assert (eagle.api_key_env, eagle.endpoint, eagle.timeout_s) == ("VLLM_KEY", "chat", 120.0)
    assert suite.models["plain"].backend == "openai"


def test_each_sd_server_run_is_paired_with_the_plain_server_at_the_same_concurrency(tmp_path):
    specs = expand(load(tmp_path, SERVERS + GROUP))
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
    keys = {s.run_id for s in expand(load(tmp_path, SERVERS + GROUP))}
    quieter = SERVERS.replace("timeout_s = 120", "timeout_s = 30").replace("VLLM_KEY", "OTHER_KEY")
    assert {s.run_id for s in expand(load(tmp_path, quieter + GROUP))} == keys
    moved = SERVERS.replace("10.0.0.6", "10.0.0.7")
    assert {s.run_id for s in expand(load(tmp_path, moved + GROUP))} != keys
    more = GROUP.replace("repeats = 2", "repeats = 2\nrequests = 32")
    assert not {s.run_id for s in expand(load(tmp_path, SERVERS + more))} & keys


def test_a_served_target_defaults_to_concurrency_1_and_a_local_one_has_none(tmp_path):
    text = SERVERS + '[[groups]]\nname = "base"\ntarget = "plain"\n'
    (spec,) = expand(load(tmp_path, text))
    assert (spec.arm, spec.concurrency, spec.requests) == ("baseline", 1, None)
    assert "concurrency" in spec.key_fields


def test_resources_per_run_are_settings(tmp_path):
    group = load(tmp_path, SERVERS + GROUP.replace("repeats = 2", "cpus = 0.5\ngpus = 2")).groups[0]
    assert (group.cpus, group.gpus) == (0.5, 2.0)
    default = load(tmp_path, SERVERS + GROUP).groups[0]
    assert (default.cpus, default.gpus) == (1.0, None)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('url = "http://10.0.0.6:8000"', 'url = "10.0.0.6:8000"'),
         "models.eagle.url: not a server URL: '10.0.0.6:8000'; write http://host:port"),
        (('model = "Qwen/Qwen3-235B-A22B"\nengine = "vllm"\napi', 'engine = "vllm"\napi'),
         'models.eagle.model: a served model needs model = "<its name on the server>" (GET /v1/models)'),
        (('engine = "vllm"\napi', 'engine = "vlm"\napi'),
         "models.eagle.engine: unknown engine 'vlm' (did you mean 'vllm'?); "
         "choose from vllm, sglang, llamacpp-server, generic"),
        (('endpoint = "chat"', 'endpoint = "responses"'),
         "models.eagle.endpoint: unknown endpoint 'responses'; choose from completions, chat"),
        (('api_key_env = "VLLM_KEY"', 'api_key_env = "sk-abc-123"'),
         "models.eagle.api_key_env: not an environment variable name; give the name of the variable "
         "that holds the key (e.g. OPENAI_API_KEY), never the key itself"),
        (("timeout_s = 120", "timeout_s = 0"), "models.eagle.timeout_s: timeout_s must be > 0, got 0"),
        (('url = "http://10.0.0.6:8000"', 'url = "http://10.0.0.6:8000"\nbackend = "hf"'),
         'models.eagle.backend: a model with url = is served: backend must be "openai"'),
    ],
)  # fmt: skip
def test_bad_server_entries_are_one_line(tmp_path, change, message):
    assert error(tmp_path, SERVERS.replace(*change) + GROUP) == message


def test_openai_backend_without_a_url_says_what_to_give(tmp_path):
    text = (
        'schema = 1\n[models.x]\npath = "m.gguf"\nbackend = "openai"\n[[groups]]\nname = "g"\ntarget = "x"\n'
    )
    assert error(tmp_path, text) == (
        'models.x.backend: backend "openai" talks to a server: give url = "http://host:port" and '
        'model = "<served name>" instead of zoo = or path ='
    )


def test_server_keys_on_a_local_model_are_refused(tmp_path):
    text = 'schema = 1\n[zoo]\npreset = "tiny"\n[models.moe]\nzoo = "moe"\nengine = "vllm"\n'
    assert error(tmp_path, text + '[[groups]]\nname = "g"\ntarget = "moe"\n') == (
        "models.moe.engine: engine applies to served models (url = ...) only; remove it"
    )


LOCAL = '[zoo]\npreset = "tiny"\n[models.moe]\nzoo = "moe"\n[models.draft-xs]\nzoo = "draft-xs"\n'


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ('target = ["plain", "moe"]',
         "groups[0].target: a group's targets must be all servers (url =) or all local; split the group"),
        ('target = "plain"\ndraft = ["draft-xs"]\ngamma = [4]',
         "groups[0].draft: 'draft-xs' is not a server; the SD arm of a served target is a second server "
         "of the same model with speculative decoding on (url =)"),
        ('target = "plain"\ndraft = ["oracle:0.5"]\ngamma = [4]',
         "groups[0].draft: 'oracle:0.5' is not a server"),
        ('target = "moe"\ndraft = ["eagle"]\ngamma = [4]',
         "groups[0].draft: 'eagle' is a server: only a served target's SD arm can be"),
        ('target = "moe"\nconcurrency = [4]',
         "groups[0].concurrency: concurrency applies to served targets (url =) only; "
         "local targets use batch_size"),
        ('target = "plain"\nbatch_size = [8]',
         "groups[0].batch_size: servers batch requests themselves: set concurrency = [...] instead"),
        ('target = "plain"\nprompt_length = [64]',
         "groups[0].prompt_length: synthetic prompts for server 'plain' need its tokenizer: add "
         'tokenizer = "<HF dir or hub ID>" to [models.plain], or use prompt_set'),
        ('target = "plain"\nmoe_top_k = [2]',
         "groups[0].moe_top_k: moe_top_k cannot change a served model; remove it from this group"),
        ('target = "plain"\nconcurrency = [0]', "groups[0].concurrency: concurrency must be >= 1, got 0"),
        ('target = "plain"\nrequests = 0', "groups[0].requests: requests must be >= 1, got 0"),
        ('target = "plain"\ncpus = 0', "groups[0].cpus: cpus must be > 0, got 0"),
    ],
)  # fmt: skip
def test_bad_serving_groups_are_one_line(tmp_path, group, message):
    assert error(tmp_path, SERVERS + LOCAL + f'[[groups]]\nname = "g"\n{group}\n').startswith(message)


def test_sd_and_plain_servers_must_serve_the_same_model(tmp_path):
    other = SERVERS.replace(
        'model = "Qwen/Qwen3-235B-A22B"\nengine = "vllm"\napi', 'model = "other"\nengine = "vllm"\napi'
    )
    assert error(tmp_path, other + GROUP) == (
        "groups[0].draft: server 'eagle' serves 'other' but target 'plain' serves 'Qwen/Qwen3-235B-A22B'; "
        "both arms must serve the same model"
    )


def test_a_default_concurrency_does_not_touch_local_groups(tmp_path):
    text = (
        SERVERS
        + LOCAL
        + "[defaults]\nconcurrency = [1, 4]\n"
        + GROUP.replace("concurrency = [1, 4, 16]\n", "")
    )
    text += '[[groups]]\nname = "local"\ntarget = "moe"\n'
    specs = expand(load(tmp_path, text))
    assert {s.concurrency for s in specs if s.group == "local"} == {None}
    assert {s.concurrency for s in specs if s.group == "sd"} == {1, 4}
