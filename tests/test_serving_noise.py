"""The noise guard's bound for runs against servers: an SD row whose speedup breaks 1 + αγ of its own
acceptance is measured again with its block, then flagged noisy, never dropped.

The stub servers answer for real, but each run's token times are rewritten (`fake_times`): a
decode step of PER_TOKEN_S seconds per arm, a thousand times longer for the runs a test slows, so
no real timing decides what the tests check.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fake_servers import StubConfig, StubServer
from suite_files import suite_toml

from specmoe.bench import noise, served
from specmoe.bench.suite_run import run_suite
from specmoe.report.summary_json import to_json
from specmoe.report.summary_table import build, format_summary
from specmoe.results.run_row import RunRow
from specmoe.suite.load import load_suite

MODEL = "stub-model"
# Seconds per decoded token: SD 1.25x the baseline, well inside the stub's bound 1 + αγ (about 2.3:
# 4 of 9 drafts accepted over 8 tokens at γ 3).
PER_TOKEN_S = {"baseline": 0.010, "sd": 0.008}
SLOWED = 1000.0


@pytest.fixture()
def guard_on(monkeypatch):
    monkeypatch.setenv(noise.GUARD_ENV, "1")
    monkeypatch.setattr(noise, "machine_load", lambda seconds=0.5: noise.Load(0.0, 0.0, 0.0))


def fake_times(
    monkeypatch, plain_url: str, arm: str = "", factor: float = 1.0, runs: int | None = None
) -> None:
    """Every run's token times from PER_TOKEN_S; the first `runs` runs of `arm` (every one when
    None) take `factor` times as long, as a server another process slowed would (factor > 1)."""
    real, calls = served.run_requests, {"baseline": 0, "sd": 0}

    def timed(server, *args, **kwargs):
        run = real(server, *args, **kwargs)
        which = "baseline" if server.url == plain_url else "sd"
        calls[which] += 1
        step = PER_TOKEN_S[which]
        if which == arm and (runs is None or calls[which] <= runs):
            step *= factor
        records = tuple(
            replace(r, last_token_s=r.first_token_s + (r.output_tokens - 1) * step) for r in run.requests
        )
        return replace(run, requests=records)

    monkeypatch.setattr(served, "run_requests", timed)


def write_suite(
    tmp_path: Path, plain_url: str, sd_url: str, engine: str = "vllm", draft: bool = True
) -> Path:
    models = {
        name: {"url": url, "model": MODEL, "engine": engine}
        for name, url in (("plain", plain_url), ("spec", sd_url))
    }
    group = {"name": "sd", "target": "plain", "max_new_tokens": 8, "warmup": 0}
    if draft:
        group |= {"draft": ["spec"], "gamma": [3]}
    path = tmp_path / "serve.toml"
    path.write_text(suite_toml("serve", models=models, groups=[group]), encoding="utf-8")
    return path


@pytest.fixture()
def servers():
    # The SD server drafts γ = 3 a step and 2 of them are accepted, as far as tokens remain.
    with (
        StubServer(StubConfig(model=MODEL)) as plain,
        StubServer(StubConfig(model=MODEL, gamma=3, accepted=2)) as sd,
    ):
        yield plain, sd


def the_block(rows: list[RunRow]) -> tuple[RunRow, RunRow]:
    (baseline,) = [r for r in rows if r.arm == "baseline"]
    (sd,) = [r for r in rows if r.arm == "sd"]
    return baseline, sd


def test_a_served_speedup_beyond_its_bound_is_measured_again_with_its_baseline(
    guard_on, monkeypatch, servers, tmp_path
):
    plain, sd_server = servers
    fake_times(monkeypatch, plain.url, "baseline", SLOWED, runs=1)  # not when measured again
    rows = run_suite(
        load_suite(write_suite(tmp_path, plain.url, sd_server.url)), tmp_path / "r.db", None, False
    )
    baseline, sd = the_block(rows)
    assert len(plain.config.requests) == len(sd_server.config.requests) == 2  # both arms, twice
    assert baseline.measure["attempts"] == sd.measure["attempts"] == 2
    assert not baseline.noisy and not sd.noisy and "beyond_bound" not in sd.measure
    assert sd.audit_verdict == "pass", sd.audit_reason  # made against the baseline measured again


def test_a_served_speedup_still_beyond_its_bound_is_flagged_noisy_and_counted(
    guard_on, monkeypatch, servers, tmp_path
):
    plain, sd_server = servers
    fake_times(monkeypatch, plain.url, "baseline", SLOWED)
    rows = run_suite(
        load_suite(write_suite(tmp_path, plain.url, sd_server.url)), tmp_path / "r.db", None, False
    )
    baseline, sd = the_block(rows)
    assert sd.noisy and sd.measure["attempts"] == 2  # stored, not dropped
    assert "exceeds 1 + alpha*gamma" in sd.measure["beyond_bound"]
    assert sd.measure["beyond_bound"] in sd.measure["noise"] and "likely disturbed" in sd.measure["noise"]
    assert not baseline.noisy and baseline.measure["attempts"] == 2
    text = format_summary(rows)
    assert "noise guard: 1 of 2 runs flagged noisy" in text
    assert "1 of them with a speedup beyond 1 + alpha*gamma of their own acceptance" in text
    assert to_json(build(rows))["runs"]["beyond_bound"] == 1


def test_a_server_reporting_no_draft_counts_is_not_measured_again(guard_on, monkeypatch, tmp_path):
    # A generic server exposes no spec-decode counters: no acceptance to hold the speedup to.
    with (
        StubServer(StubConfig(model=MODEL)) as plain,
        StubServer(StubConfig(model=MODEL, gamma=3, accepted=2)) as sd_server,
    ):
        fake_times(monkeypatch, plain.url, "baseline", SLOWED)
        suite = load_suite(write_suite(tmp_path, plain.url, sd_server.url, engine="generic"))
        rows = run_suite(suite, tmp_path / "r.db", None, False)
    _, sd = the_block(rows)
    assert sd.counts.drafted is None and len(sd_server.config.requests) == 1
    assert sd.measure["attempts"] == 1 and not sd.noisy
    assert sd.audit_verdict == "fail" and "exceeds 1 + gamma" in sd.audit_reason  # the audit still says so


def test_beside_a_stored_baseline_only_the_sd_arm_is_measured_again(guard_on, monkeypatch, servers, tmp_path):
    plain, sd_server = servers
    db = tmp_path / "r.db"
    run_suite(load_suite(write_suite(tmp_path, plain.url, sd_server.url, draft=False)), db, None, False)
    # The SD arm's first run is faster than its acceptance allows; its baseline is the stored one.
    fake_times(monkeypatch, plain.url, "sd", 1 / SLOWED, runs=1)
    sent = len(plain.config.requests)
    rows = run_suite(load_suite(write_suite(tmp_path, plain.url, sd_server.url)), db, None, False)
    (sd,) = [r for r in rows if r.arm == "sd"]
    assert len(plain.config.requests) == sent and len(sd_server.config.requests) == 2
    assert sd.measure["attempts"] == 2 and not sd.noisy


def test_the_served_bound_is_not_judged_with_the_guard_off(monkeypatch, servers, tmp_path):
    monkeypatch.setenv(noise.GUARD_ENV, "0")
    plain, sd_server = servers
    fake_times(monkeypatch, plain.url, "baseline", SLOWED)
    rows = run_suite(
        load_suite(write_suite(tmp_path, plain.url, sd_server.url)), tmp_path / "r.db", None, False
    )
    _, sd = the_block(rows)
    assert all(r.measure == {"attempts": 1, "noise": None, "noise_guard": False} for r in rows)
    assert not sd.noisy and sd.audit_verdict == "fail"  # the audit still says so
