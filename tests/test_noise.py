"""The noise guard: a disturbed run is measured again, then flagged, and flagged runs are in no number."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tiny_suites import tiny_sd_suite

from specmoe.bench import noise, runner
from specmoe.bench.noise import Load, disturbance, step_spread
from specmoe.bench.suite_run import run_suite
from specmoe.report.summary_table import format_summary
from specmoe.results.compare import compare
from specmoe.suite.load import load_suite

QUIET = Load(other_cpu=0.02, steal=0.0, load_avg=0.1)
BUSY = Load(other_cpu=1.0, steal=0.0, load_avg=2.0)


@pytest.fixture()
def guard_on(monkeypatch):
    monkeypatch.setenv(noise.GUARD_ENV, "1")


def fake_loads(monkeypatch, loads):
    """Each timed run's LoadMeter.stop() returns the next load (the last one repeats); the look at
    the machine before the suite sees it quiet."""
    monkeypatch.setattr(noise, "machine_load", lambda seconds=0.5: QUIET)
    # One core, one thread: no spare core, so any other process's load counts, on any machine.
    monkeypatch.setattr(runner, "own_cores", lambda: [0])
    queue = list(loads)

    def stop(self):
        return queue.pop(0) if len(queue) > 1 else queue[0]

    monkeypatch.setattr(noise.LoadMeter, "stop", stop)


def test_rules(guard_on):
    assert disturbance(QUIET, 0.1) == ""
    assert "other processes used 1.00 cores" in disturbance(BUSY, None)
    assert "stole 10%" in disturbance(Load(0.0, 0.10, 0.0), None)
    assert "spread 80%" in disturbance(QUIET, 0.8)


def test_the_guard_can_be_switched_off(monkeypatch):
    monkeypatch.setenv(noise.GUARD_ENV, "0")
    assert disturbance(BUSY, 0.9) == ""


def test_step_spread_needs_enough_rounds():
    assert step_spread([1.0] * 7) is None
    assert step_spread([1.0] * 8) == 0.0
    assert step_spread([1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]) == pytest.approx(1.0 / 1.5)


def test_a_disturbed_run_is_measured_again_and_kept_when_the_retry_is_quiet(
    guard_on, monkeypatch, tiny_zoo, tmp_path
):
    path = tiny_sd_suite(tmp_path, "noisy", {"prompts": 5, "max_new_tokens": 4})
    fake_loads(monkeypatch, [BUSY, QUIET])  # the first timed run is disturbed, every later one quiet
    rows = run_suite(load_suite(path), tmp_path / "r.db", tiny_zoo, progress=False, threads=1)
    first = min(rows, key=lambda r: r.measure["started_at"])
    assert first.measure["attempts"] == 2 and not first.noisy
    assert not any(r.noisy for r in rows)
    assert all(r.measure["threads"] == 1 for r in rows)


def test_runs_that_stay_disturbed_are_flagged_and_left_out(guard_on, monkeypatch, tiny_zoo, tmp_path):
    path = tiny_sd_suite(tmp_path, "noisy", {"prompts": 5, "max_new_tokens": 4})
    fake_loads(monkeypatch, [BUSY, BUSY, BUSY, QUIET])  # the first run stays busy through its retries
    rows = run_suite(load_suite(path), tmp_path / "r.db", tiny_zoo, progress=False, threads=1)
    flagged = [r for r in rows if r.noisy]
    assert len(flagged) == 1
    assert flagged[0].measure["attempts"] == 1 + noise.RETRIES
    assert "other processes used" in flagged[0].measure["noise"]
    (cell,) = compare(rows)
    assert cell.noisy == 1 and cell.units == 4  # the flagged run's pair is left out
    text = format_summary(rows)
    assert "1 noisy" in text and "noise guard: 1 of 10 runs flagged noisy" in text


def test_a_machine_that_stays_busy_is_not_measured_three_times_per_run(
    guard_on, monkeypatch, tiny_zoo, tmp_path
):
    path = tiny_sd_suite(tmp_path, "noisy", {"prompts": 5, "max_new_tokens": 4})
    fake_loads(monkeypatch, [BUSY])
    rows = run_suite(load_suite(path), tmp_path / "r.db", tiny_zoo, progress=False, threads=1)
    assert all(r.noisy for r in rows)
    attempts = sorted(r.measure["attempts"] for r in rows)
    assert attempts == [1] * (len(rows) - 1) + [1 + noise.RETRIES]  # only the first run retries
    assert compare(rows) == []  # nothing left to report, and nothing reported silently


def test_choose_threads_leaves_busy_cores_to_their_processes(guard_on, monkeypatch, caplog):
    import torch

    monkeypatch.setattr(noise, "own_cores", lambda: [0, 1])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert noise.choose_threads(load=BUSY) == 1
        assert torch.get_num_threads() == 1
        assert "other processes are using 1.0 of the 2 CPU cores" in caplog.text
        torch.set_num_threads(2)
        assert noise.choose_threads(load=QUIET) == 2
        assert noise.choose_threads(requested=1, load=QUIET) == 1
    finally:
        torch.set_num_threads(before)


def test_one_busy_core_does_not_disturb_a_run_whose_threads_leave_it_free(guard_on):
    assert disturbance(BUSY, None, spare_cores=1) == ""
    assert "other processes used" in disturbance(Load(1.6, 0.0, 2.0), None, spare_cores=1)


def test_a_batch_shrinking_as_rows_finish_is_no_spread():
    # 8 rounds over 128 rows, then the tail as rows finish: each live size is as fast as its peers
    verify = [1.0] * 6 + [0.6, 0.6, 0.3, 0.3, 0.3, 0.1]
    live = [128] * 6 + [64, 64, 20, 20, 20, 3]
    assert step_spread(verify, live) == 0.0
    assert step_spread(verify) > 0.5  # read as one population the tail looks like a disturbance
    # a disturbed round among peers still shows
    assert step_spread([1.0] * 5 + [3.0] * 3 + [0.6, 0.6], [128] * 8 + [64, 64]) > 0.5


def slow_baselines(monkeypatch, count: int | None) -> list[str]:
    """The first `count` timed baseline runs (every one when None) report 1000x their decode
    seconds, as a baseline another process slowed would: a stubbed timing, no real one judged.
    Returns the run ids slowed."""
    timed, slowed = runner.Runner.timed, []

    def slow(self, spec, block_id, position):
        m = timed(self, spec, block_id, position)
        if spec.arm == "baseline" and (count is None or len(slowed) < count):
            slowed.append(spec.run_id)
            m = replace(m, result=replace(m.result, decode_s=m.result.decode_s * 1000))
        return m

    monkeypatch.setattr(runner.Runner, "timed", slow)
    return slowed


def test_a_speedup_beyond_its_own_bound_is_measured_again_with_its_baseline(
    guard_on, monkeypatch, tiny_zoo, tmp_path
):
    path = tiny_sd_suite(tmp_path, "impossible", {"prompts": 5, "max_new_tokens": 4})
    fake_loads(monkeypatch, [QUIET])
    slowed = slow_baselines(monkeypatch, 1)  # the first baseline only: its re-measure is undisturbed
    rows = run_suite(load_suite(path), tmp_path / "r.db", tiny_zoo, progress=False, threads=1)
    assert not any(r.noisy for r in rows)
    (baseline,) = [r for r in rows if r.run_id == slowed[0]]
    (sd,) = [r for r in rows if r.arm == "sd" and r.measure["block"] == baseline.run_id]
    assert baseline.measure["attempts"] == 2 and sd.measure["attempts"] == 2  # measured again, both
    assert sd.audit_verdict == "pass"  # against the baseline measured again


def test_a_run_measured_again_keeps_its_warm_up_compile_seconds(guard_on, monkeypatch, tiny_zoo, tmp_path):
    path = tiny_sd_suite(tmp_path, "impossible", {"prompts": 5, "max_new_tokens": 4})
    fake_loads(monkeypatch, [QUIET])
    slowed = slow_baselines(monkeypatch, 1)
    warm_up = runner.Runner.warm_up

    def compiling(self, spec):
        warm_up(self, spec)
        if spec.run_id in self._warmup_compile_s:  # this run warmed its cell up: as if it compiled
            self._warmup_compile_s[spec.run_id] = 1.5

    monkeypatch.setattr(runner.Runner, "warm_up", compiling)
    rows = run_suite(load_suite(path), tmp_path / "r.db", tiny_zoo, progress=False, threads=1)
    (baseline,) = [r for r in rows if r.run_id == slowed[0]]
    assert baseline.measure["attempts"] == 2 and baseline.measure["warmup_compile_s"] == 1.5


def test_a_speedup_still_beyond_its_bound_is_flagged_noisy_and_counted(
    guard_on, monkeypatch, tiny_zoo, tmp_path
):
    path = tiny_sd_suite(tmp_path, "impossible", {"prompts": 5, "max_new_tokens": 4})
    fake_loads(monkeypatch, [QUIET])
    slow_baselines(monkeypatch, None)
    rows = run_suite(load_suite(path), tmp_path / "r.db", tiny_zoo, progress=False, threads=1)
    sd = [r for r in rows if r.arm == "sd"]
    assert len(sd) == 5 and all(r.noisy and r.measure["attempts"] == 2 for r in sd)  # stored, not dropped
    for r in sd:
        assert (
            "exceeds 1 + alpha*gamma" in r.measure["beyond_bound"]
            and r.measure["beyond_bound"] in r.measure["noise"]
        )
    assert not any(r.noisy for r in rows if r.arm == "baseline")
    text = format_summary(rows)
    assert "noise guard: 5 of 10 runs flagged noisy" in text
    assert "5 of them with a speedup beyond 1 + alpha*gamma of their own acceptance" in text


def test_the_bound_is_not_judged_with_the_guard_off(monkeypatch, tiny_zoo, tmp_path):
    monkeypatch.setenv(noise.GUARD_ENV, "0")
    path = tiny_sd_suite(tmp_path, "impossible", {"prompts": 2, "max_new_tokens": 4})
    slow_baselines(monkeypatch, None)
    rows = run_suite(load_suite(path), tmp_path / "r.db", tiny_zoo, progress=False, threads=1)
    assert not any(r.noisy for r in rows) and all(r.measure["attempts"] == 1 for r in rows)
    assert all(r.audit_verdict == "fail" for r in rows if r.arm == "sd")  # the audit still says so
