"""The Ray executor on a local Ray instance (2 CPUs): the same rows as the local executor, and a
worker killed mid-task costs a retry, never a row."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import ray
from audited import counts_pass
from refusing_models import tiny_bloom
from suite_files import TINY_ZOO, write_suite, zoo_models

from specmoe.bench.executors import RayExecutor, _init, resources
from specmoe.bench.plan import plan
from specmoe.bench.suite_run import run_suite
from specmoe.errors import SpecmoeError
from specmoe.results.store import Store
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite

SUITE = {
    "name": "tiny-ray",
    "zoo": TINY_ZOO,
    "defaults": {"prompts": 1, "max_new_tokens": 8, "dtype": "float32"},
    "models": zoo_models("moe", "draft-xs"),
}
SD_GROUP = {
    "name": "sd",
    "target": ["moe"],
    "draft": ["draft-xs", "oracle:1.0"],
    "oracle_cost": "draft-xs",
    "gamma": [2],
}


@pytest.fixture(scope="module")
def local_ray():
    # One instance for the module: starting Ray takes seconds. Workers inherit this process's
    # environment (one OpenMP thread, offline hub) from conftest.
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.fixture()
def suite(tmp_path):
    return load_suite(write_suite(tmp_path, groups=[SD_GROUP], **SUITE))


def test_ray_yields_the_same_rows_as_the_local_executor(local_ray, suite, tiny_zoo, tmp_path):
    local = run_suite(suite, tmp_path / "local.db", tiny_zoo, progress=False)
    remote = run_suite(suite, tmp_path / "ray.db", tiny_zoo, progress=False, executor=RayExecutor())
    assert sorted(r.run_id for r in remote) == sorted(r.run_id for r in local)
    assert len(remote) == len(expand(suite)) == 3
    by_id = {r.run_id: r for r in local}
    for row in remote:
        twin = by_id[row.run_id]
        # Greedy decoding of the same model on the same CPU: the same tokens, so the same counts.
        assert row.counts == twin.counts and row.config == twin.config
        assert counts_pass(row) and counts_pass(twin)
        assert (row.env["executor"], row.env["attempts"]) == ("ray", 1)
        assert "executor" not in twin.env
    with Store(tmp_path / "ray.db") as store:
        assert store.failures() == []


def test_a_worker_killed_mid_task_is_retried_not_lost(local_ray, suite, tiny_zoo, tmp_path):
    faults = tmp_path / "faults"
    faults.mkdir()
    rows = run_suite(
        suite, tmp_path / "r.db", tiny_zoo, progress=False, executor=RayExecutor(fault_dir=faults)
    )
    assert sorted(r.run_id for r in rows) == sorted(s.run_id for s in expand(suite))
    # One block (the baseline and both SD arms on one prompt) is one task; its worker died, so the
    # whole block ran again and every arm of it records the lost attempt.
    (block,) = plan(suite)
    assert (faults / "killed").read_text() == block.specs[0].run_id
    assert {r.run_id: r.env["attempts"] for r in rows} == dict.fromkeys(block.run_ids, 2)
    with Store(tmp_path / "r.db") as store:
        assert len(store) == 3  # each run once
        failures = store.failures()
    assert sorted(f.run_id for f in failures) == sorted(block.run_ids)
    assert all((f.attempt, f.final) == (1, False) for f in failures)
    assert {f.error for f in failures} == {
        "WorkerCrashedError: the process running the task died or was lost"
    }


def test_a_run_out_of_retries_is_recorded_and_reported(local_ray, suite, tiny_zoo, tmp_path):
    faults = tmp_path / "faults"
    faults.mkdir()
    executor = RayExecutor(max_retries=0, fault_dir=faults)
    with pytest.raises(SpecmoeError) as err:
        run_suite(suite, tmp_path / "r.db", tiny_zoo, progress=False, executor=executor)
    message = str(err.value)
    assert "\n" not in message and message.startswith("3 of 3 runs failed every attempt (first: ")
    assert message.endswith("run the suite again to retry them")
    with Store(tmp_path / "r.db") as store:
        assert len(store) == 0
        failures = store.failures()
    # The block's worker died with no retry left: each of its three runs records its final attempt.
    assert all(f.final and f.attempt == 1 for f in failures) and len(failures) == 3
    assert sorted(f.run_id for f in failures) == sorted(plan(suite)[0].run_ids)


def test_runs_a_model_refuses_are_skipped_not_failed(local_ray, tiny_zoo, tmp_path, caplog):
    # A block whose task returns no row (Bloom refuses B = 2) keeps the driver and its progress going.
    models = {"bloom": {"path": tiny_bloom(tiny_zoo, tmp_path / "bloom")}}
    group = {"name": "alibi", "target": "bloom", "draft": "ngram", "gamma": 2, "batch_size": [1, 2]}
    parts = SUITE | {"models": models, "groups": [group]}
    suite = load_suite(write_suite(tmp_path, file="alibi.toml", **parts))
    with caplog.at_level("WARNING"):
        rows = run_suite(suite, tmp_path / "r.db", tiny_zoo, progress=True, executor=RayExecutor())
    assert sorted(r.run_id for r in rows) == sorted(s.run_id for s in expand(suite) if s.batch_size == 1)
    assert all(r.env["executor"] == "ray" for r in rows)
    skips = [r.getMessage() for r in caplog.records if "skipped, not stored" in r.getMessage()]
    assert len(skips) == 2 and all("is refused" in message for message in skips)
    assert any("2 of 4 runs were not measured" in r.getMessage() for r in caplog.records)
    with Store(tmp_path / "r.db") as store:
        assert len(store) == 2 and store.failures() == []


def test_resources_come_from_the_suite(tmp_path):
    groups = [SD_GROUP | {"cpus": 2}, {"name": "gpu", "target": "moe", "device": "cuda"}]
    suite = load_suite(write_suite(tmp_path, file="s.toml", groups=groups, **SUITE))
    by_group = {s.group: resources(suite, s) for s in expand(suite)}
    assert by_group == {"sd": (2.0, 0.0), "gpu": (1.0, 1.0)}


def test_an_unreachable_cluster_is_one_line():
    def refuse(**options):
        # What ray.init(address="auto") raises when no cluster runs (a real one would need none to
        # run on this machine, which this module's own instance rules out).
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to")

    with pytest.raises(SpecmoeError) as err:
        _init(SimpleNamespace(init=refuse), "auto", None)
    assert str(err.value) == (
        "cannot start or reach the Ray cluster at auto (Could not find any running Ray instance. Please "
        "specify the one to connect to); start one with `ray start --head` and pass its address, or leave "
        "out --address for a local instance"
    )


def test_runs_against_a_server_never_overlap(local_ray, tmp_path):
    from fake_servers import StubConfig, StubServer

    with StubServer(StubConfig(step_s=0.01)) as stub:
        models = {"plain": {"url": stub.url, "model": stub.config.model}}
        group = {"name": "c", "target": "plain", "concurrency": [2, 3], "repeats": 2, "max_new_tokens": 12}
        suite = load_suite(write_suite(tmp_path, None, file="served.toml", models=models, groups=[group]))
        rows = run_suite(suite, tmp_path / "r.db", None, progress=False, executor=RayExecutor())
    assert sorted(r.run_id for r in rows) == sorted(s.run_id for s in expand(suite))
    # Two CPUs could run two tasks at once; the server still only ever saw one run's requests.
    assert stub.config.max_in_flight == 3
    assert all(r.env["executor"] == "ray" and counts_pass(r) for r in rows)
