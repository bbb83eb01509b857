"""Replaying stored greedy SD runs with the target's routers traced reproduces them and counts the
experts their verify passes activated."""

from __future__ import annotations

import json

from suite_files import TINY_ZOO, write_suite, zoo_models

from specmoe.bench.runner import ModelPool
from specmoe.bench.suite_run import plan_specs, run_suite
from specmoe.findings.routing import replay_rows
from specmoe.suite.load import load_suite
from specmoe.zoo import resolve_model

SUITE = {
    "name": "routing",
    "zoo": TINY_ZOO,
    "defaults": {"prompts": 1, "repeats": 1, "max_new_tokens": 10, "dtype": "float32"},
    "models": zoo_models("moe", "draft-xs"),
    "groups": [{"name": "g", "target": ["moe"], "draft": ["ngram", "draft-xs"], "gamma": [3]}],
}


def test_a_replay_reproduces_each_run_and_counts_its_verify_experts(tiny_zoo, tmp_path):
    suite = load_suite(write_suite(tmp_path, **SUITE))
    rows = run_suite(suite, tmp_path / "r.db", tiny_zoo, progress=False)
    routed = replay_rows(rows, plan_specs(suite), ModelPool(suite, tiny_zoo), progress=lambda _: None)
    sd = {r.run_id: r for r in rows if r.arm == "sd"}
    assert {r.run_id for r in routed} == set(sd)  # baselines are not replayed
    config = json.loads((resolve_model("moe", tiny_zoo) / "config.json").read_text())
    experts, top_k = config["num_local_experts"], config["num_experts_per_tok"]
    for r in routed:
        assert r.matches and r.verify_passes == sd[r.run_id].counts.target_forwards
        assert top_k <= r.active <= experts
