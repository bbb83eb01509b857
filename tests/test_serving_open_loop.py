"""Open-loop server runs: seeded Poisson arrivals at `request_rate`, stored with the run."""

from __future__ import annotations

import itertools
import json
import math
import statistics

import pytest
from fake_servers import StubConfig, StubServer
from suite_files import without, write_suite
from test_serving_suite import GROUP, error, load, served

from specmoe.bench.suite_run import run_suite
from specmoe.errors import SpecmoeError
from specmoe.results.store import Store
from specmoe.serving.arrivals import arrival_times
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite

OPEN = without(GROUP, "concurrency") | {"request_rate": [2.0, "inf"], "requests": 8}


def test_arrivals_are_seeded_poisson_and_inf_is_all_at_once():
    times = arrival_times(2000, rate=4.0, seed=3)
    assert times == arrival_times(2000, rate=4.0, seed=3)
    assert times != arrival_times(2000, rate=4.0, seed=4)
    assert times[0] == 0.0 and all(b >= a for a, b in itertools.pairwise(times))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Exponential gaps with mean 1 / rate: the sample mean of 1999 draws is within 10% (about 4.5
    # standard errors), and the standard deviation equals the mean.
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.1)
    assert statistics.stdev(gaps) == pytest.approx(0.25, rel=0.15)
    assert arrival_times(5, rate=math.inf, seed=0) == [0.0] * 5
    assert arrival_times(0, rate=1.0, seed=0) == []


def test_request_rate_is_an_axis_keyed_only_when_set(tmp_path):
    specs = expand(load(tmp_path, served(OPEN)))
    assert {(s.request_rate, s.concurrency, s.requests) for s in specs} == {(2.0, 8, 8), (math.inf, 8, 8)}
    inf = next(s for s in specs if s.request_rate == math.inf)
    assert inf.key_fields["request_rate"] == "inf" and inf.as_dict()["request_rate"] == "inf"
    json.dumps(inf.as_dict(), allow_nan=False)  # storable
    closed = expand(load(tmp_path, served()))
    assert all("request_rate" not in s.key_fields for s in closed)
    capped = expand(load(tmp_path, served(OPEN | {"concurrency": 2})))
    assert {s.concurrency for s in capped} == {2}


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (without(OPEN, "requests"),
         "groups[0].request_rate: an open-loop run (request_rate) needs requests = N"),
        (OPEN | {"request_rate": [2.0, 0]},
         'groups[0].request_rate: request_rate must be a number of requests/s > 0 or "inf", got 0'),
        (OPEN | {"request_rate": [2.0, "fast"]},
         'groups[0].request_rate: request_rate must be a number of requests/s > 0 or "inf", got \'fast\''),
    ],
)  # fmt: skip
def test_bad_open_loop_settings_are_one_line(tmp_path, group, message):
    assert error(tmp_path, served(group)).startswith(message)


def test_request_rate_on_a_local_group_is_refused(tmp_path):
    message = error(tmp_path, served({"name": "g", "target": "moe", "request_rate": 4}, local=True))
    assert message.startswith("groups[0].request_rate: request_rate applies to served targets")


def test_open_loop_run_sends_on_schedule_and_stores_it(tmp_path):
    plain = StubServer(StubConfig(model="m", step_s=0.001))
    sd = StubServer(StubConfig(model="m", step_s=0.001, gamma=3, accepted=2))
    with plain, sd:
        models = {
            name: {"url": s.url, "model": "m", "engine": "vllm"}
            for name, s in (("plain", plain), ("spec", sd))
        }
        group = {
            "name": "o",
            "target": "plain",
            "draft": "spec",
            "gamma": 3,
            "request_rate": 50.0,
            "requests": 6,
            "concurrency": 2,
            "max_new_tokens": 8,
        }
        path = write_suite(tmp_path, None, file="open.toml", models=models, groups=[group])
        run_suite(load_suite(path), tmp_path / "r.db", None, progress=False)
    with Store(tmp_path / "r.db") as store:
        rows = store.rows()
    schedule = arrival_times(6, 50.0, seed=0)
    for row in rows:
        assert row.config["request_rate"] == 50.0 and row.config["concurrency"] == 2
        requests = [r for r in row.rounds_trace if r["kind"] == "request"]
        assert [r["scheduled_s"] for r in requests] == schedule  # both arms face the same arrivals
        assert all(r["sent_s"] >= r["scheduled_s"] for r in requests)  # never sent early
    assert max(plain.config.max_in_flight, sd.config.max_in_flight) <= 2


def _synthetic_suite(tmp_path, plain_url: str, sd_url: str, tokenizer: str, endpoint: str = "completions"):
    server = {"model": "m", "engine": "vllm", "tokenizer": tokenizer, "endpoint": endpoint}
    models = {"plain": {"url": plain_url} | server, "spec": {"url": sd_url} | server}
    group = {
        "name": "len",
        "target": "plain",
        "draft": "spec",
        "gamma": 3,
        "prompt_length": [5, 9],
        "concurrency": 3,
        "max_new_tokens": 4,
    }
    return write_suite(tmp_path, None, file="len.toml", models=models, groups=[group])


def test_synthetic_prompts_for_servers_are_exact_token_ids(tmp_path, tiny_zoo):
    plain = StubServer(StubConfig(model="m", step_s=0.001))
    sd = StubServer(StubConfig(model="m", step_s=0.001, gamma=3, accepted=2))
    with plain, sd:
        suite = load_suite(_synthetic_suite(tmp_path, plain.url, sd.url, str(tiny_zoo / "moe")))
        specs = expand(suite)
        assert {(s.prompt_length, s.prompt_set) for s in specs} == {(5, None), (9, None)}
        assert all(s.target_model.identity["tokenizer"] == str(tiny_zoo / "moe") for s in specs)
        run_suite(suite, tmp_path / "r.db", None, progress=False)
    sent = [body["prompt"] for body in plain.config.requests + sd.config.requests]
    assert all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in sent)
    assert {len(p) for p in sent} == {5, 9}
    # Each request of a run has its own prompt (seed = its index), the same in both arms.
    five = [p for p in plain.config.requests if len(p["prompt"]) == 5]
    assert len({tuple(p["prompt"]) for p in five}) == 3


def test_synthetic_server_prompts_need_completions(tmp_path, tiny_zoo):
    path = _synthetic_suite(tmp_path, "http://h:1", "http://h:2", str(tiny_zoo / "moe"), endpoint="chat")
    with pytest.raises(SpecmoeError, match=r"synthetic prompts are token ids, sent to /v1/completions"):
        load_suite(path)


def test_missing_server_tokenizer_is_one_line(tmp_path):
    path = _synthetic_suite(tmp_path, "http://h:1", "http://h:2", str(tmp_path / "no-such-dir"))
    with pytest.raises(SpecmoeError, match=r"models\.plain\.tokenizer: no model directory at"):
        load_suite(path)
