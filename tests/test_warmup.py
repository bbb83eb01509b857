"""Warm-up before timed runs: a model's first configuration warms up until two runs agree."""

from __future__ import annotations

from dataclasses import replace
from itertools import chain, repeat

from suite_files import TINY_ZOO, write_suite, zoo_models

import specmoe.bench.runner as runner_module
from specmoe.bench.runner import SETTLE_MAX_RUNS, ModelPool, Runner, settled
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite


def test_settled_needs_two_agreeing_runs_or_the_cap():
    assert not settled([])
    assert not settled([1.0])
    assert not settled([1.3, 1.0])
    assert settled([1.3, 1.0, 1.02])
    assert settled([float(i) for i in range(1, SETTLE_MAX_RUNS + 1)])


SUITE = {
    "name": "w",
    "zoo": TINY_ZOO,
    "defaults": {"prompts": 1, "repeats": 2, "warmup": 1, "max_new_tokens": 4},
    "models": zoo_models("moe"),
    "groups": [{"name": "g", "target": ["moe"], "prompt_set": ["factual", "code"]}],
}


def test_first_configuration_of_a_model_warms_up_until_settled(tmp_path, tiny_zoo, monkeypatch):
    suite = load_suite(write_suite(tmp_path, **SUITE))
    specs = expand(suite)
    durations = iter([3.0, 2.0, 1.0, 1.0, 5.0, 5.0, 5.0, 5.0, 5.0])  # settles on the 4th warm-up
    calls = []
    real_decode = runner_module.decode

    def timed_decode(*args, **kwargs):
        result = real_decode(*args, **kwargs)
        calls.append(1)
        return replace(result, decode_s=next(durations))

    monkeypatch.setattr(runner_module, "decode", timed_decode)
    runner = Runner(ModelPool(suite, tiny_zoo))
    first, second = [s for s in specs if s.repeat == 0]
    runner.measure(first)
    assert len(calls) == 4 + 1  # four warm-ups (3.0, 2.0, 1.0, 1.0 settles), then the timed run
    runner.measure(replace(first, repeat=1))
    assert len(calls) == 6  # the same configuration: no more warm-up
    runner.measure(second)
    assert len(calls) == 8  # another configuration of the settled model: the suite's one warm-up


def test_the_warm_ups_compile_seconds_go_with_the_runs_row_apart(tmp_path, tiny_zoo, monkeypatch):
    suite = load_suite(write_suite(tmp_path, **SUITE))
    spec = next(s for s in expand(suite) if s.repeat == 0)
    compiled = chain([2.5, 0.5], repeat(0.0))  # the compiled path compiles in the first warm-ups
    real_decode = runner_module.decode

    def compiling_decode(*args, **kwargs):
        return replace(real_decode(*args, **kwargs), compile_s=next(compiled))

    monkeypatch.setattr(runner_module, "decode", compiling_decode)
    runner = Runner(ModelPool(suite, tiny_zoo))
    runner.warm_up(spec)
    measured = runner.timed(spec, "block", 0)
    # at least two warm-ups: a model's first configuration warms up until two runs agree
    assert measured.measure["warmup_compile_s"] == 3.0 and measured.measure["compile_s"] == 0.0
    assert runner.timed(spec, "block", 0).measure["warmup_compile_s"] == 0.0  # reported once
