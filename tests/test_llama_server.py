"""llama.cpp's llama-server with a draft model: its command line, its log's draft lines, and (when
SPECMOE_LLAMA_SERVER names a binary, built by scripts/build_llama_server.sh) a suite against a plain
and a speculative server whose stored per-request draft counts must match the server's own log."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from audited import counts_pass
from fake_servers import free_port
from suite_files import write_suite

from specmoe.bench.served_rows import stored_counts
from specmoe.bench.suite_run import run_suite
from specmoe.errors import SpecmoeError
from specmoe.serving.llama_server import LlamaServerSpec, server_command, serving
from specmoe.serving.server_log import check_counts, logged_requests
from specmoe.suite.load import SUITES_DIR, load_suite

ROOT = Path(__file__).resolve().parent.parent
BINARY = os.environ.get("SPECMOE_LLAMA_SERVER")

# llama-server's draft line, with its own format string (tools/server/server-context.cpp,
# print_timings; SLT_INF adds the slot prefix).
DRAFT_FORMAT = (
    "slot print_timing: id %2d | task %d | "
    "draft acceptance = %0.5f (%5d accepted / %5d generated), mean len = %5.2f"
)


def draft_line(slot: int, task: int, accepted: int, drafted: int) -> str:
    return DRAFT_FORMAT % (slot, task, accepted / drafted, accepted, drafted, 2.0)


LOG = "\n".join(
    [
        "build: 1 (0c1e570) with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu",
        "slot print_timing: id  0 | task 0 | prompt eval time =       5.10 ms /    12 tokens",
        draft_line(0, 0, 16, 64),
        draft_line(1, 3, 0, 60),
        "srv  update_slots: all slots are idle",
        draft_line(0, 7, 16, 64),
    ]
)


def spec(**fields) -> LlamaServerSpec:
    return LlamaServerSpec(**{"alias": "m", "port": 8480, "model": Path("t.gguf"), **fields})


def test_both_arms_share_every_flag_but_the_draft():
    plain = server_command("llama-server", spec())
    sd = server_command("llama-server", spec(draft=Path("d.gguf"), gamma=4))
    assert sd[: len(plain)] == plain
    extra = sd[len(plain) :]
    assert extra[:8] == [
        "--spec-type", "draft-simple", "--spec-draft-model", "d.gguf",
        "--spec-draft-n-max", "4", "--spec-draft-p-min", "0",
    ]  # fmt: skip
    for flag in ("--no-cache-prompt", "--metrics", "--parallel"):
        assert flag in plain
    assert plain[plain.index("--cache-ram") + 1] == "0"
    assert not [flag for flag in plain if flag.startswith("--spec-")]


def test_a_cpu_list_pins_the_server_with_taskset():
    assert server_command("bin", spec(cpus="0"))[:4] == ["taskset", "-c", "0", "bin"]


def test_a_draft_needs_a_gamma_and_a_gamma_a_draft():
    with pytest.raises(ValueError, match="draft needs gamma"):
        spec(draft=Path("d.gguf"))
    with pytest.raises(ValueError, match="draft needs gamma"):
        spec(gamma=4)


def test_two_servers_on_one_port_are_refused_before_any_starts(tmp_path):
    with (
        pytest.raises(SpecmoeError, match="share a port"),
        serving("no-such-binary", [spec(), spec()], tmp_path),
    ):
        pass


def test_a_port_another_process_listens_on_is_refused(tmp_path):
    # Otherwise that process would answer the readiness check in place of the new server.
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = spec(port=other.getsockname()[1])
        with pytest.raises(SpecmoeError, match="is in use"), serving("no-such-binary", [taken], tmp_path):
            pass


def test_draft_lines_are_read_with_their_task_and_counts():
    assert [(r.task, r.accepted, r.drafted) for r in logged_requests(LOG)] == [
        (0, 16, 64),
        (3, 0, 60),
        (7, 16, 64),
    ]


def test_stored_counts_agree_with_the_log_up_to_its_warmups():
    # One warm-up request (16, 64) is in the log and not in the store.
    check = check_counts(logged_requests(LOG), [(0, 60), (16, 64)], warmup_requests=1)
    assert check.agrees and (check.matched, check.extra, check.missing) == (2, 1, ())
    assert (check.logged_accepted, check.logged_drafted) == (32, 188)


def test_a_stored_count_the_log_lacks_or_too_many_extra_lines_disagree():
    assert check_counts(logged_requests(LOG), [(1, 64)], warmup_requests=3).missing == ((1, 64),)
    assert not check_counts(logged_requests(LOG), [(1, 64)], warmup_requests=3).agrees
    assert not check_counts(logged_requests(LOG), [(0, 60)], warmup_requests=1).agrees  # 2 extra > 1


def test_stored_counts_skip_requests_that_drafted_nothing():
    row = SimpleNamespace(
        rounds_trace=[
            {"kind": "request", "response_drafted": 64, "response_accepted": 16},
            {"kind": "request", "response_drafted": 0, "response_accepted": 0},  # no log line either
            {"kind": "request", "response_drafted": None, "response_accepted": None},
            {"kind": "server", "counters": {}},
        ]
    )
    assert stored_counts([row]) == [(16, 64)]


def _benchmark():
    path = ROOT / "benchmarks" / "serving" / "serving_llamacpp.py"
    module_spec = importlib.util.spec_from_file_location("serving_llamacpp", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # dataclasses look their module up while the file runs
    module_spec.loader.exec_module(module)
    return module


def test_the_shipped_suite_has_a_launch_line_and_a_port_for_every_server():
    suite = load_suite(SUITES_DIR / "serving-llamacpp.toml")
    launch = _benchmark().LAUNCH
    served = [m for m in suite.models.values() if m.server is not None]
    assert sorted(m.name for m in served) == sorted(launch)
    assert len({m.server.url for m in served}) == len(served)
    for model in served:  # an SD server's draft length is the γ its groups record
        gammas = {g for group in suite.groups if model.name in group.draft for g in group.gamma}
        assert gammas <= {launch[model.name].gamma}


# --- against a real llama-server -------------------------------------------------------------


@pytest.mark.skipif(not BINARY, reason="SPECMOE_LLAMA_SERVER names no llama-server binary")
def test_a_draft_model_server_counts_per_request_as_its_log_does(tiny_zoo, tmp_path):
    from specmoe.zoo.gguf import zoo_gguf

    target, draft = zoo_gguf(tiny_zoo, "moe"), zoo_gguf(tiny_zoo, "draft-xs")
    servers = {
        "plain": LlamaServerSpec("tiny-moe", free_port(), target, parallel=2, ctx=1024),
        "sd": LlamaServerSpec("tiny-moe", free_port(), target, draft, gamma=3, parallel=2, ctx=1024),
        # The target as its own draft: greedy drafts the target mostly accepts.
        "self": LlamaServerSpec("tiny-moe", free_port(), target, target, gamma=3, parallel=2, ctx=1024),
    }
    models = {
        name: {"url": s.url, "model": "tiny-moe", "engine": "llamacpp-server"} for name, s in servers.items()
    }
    group = {
        "name": "serve",
        "target": "plain",
        "draft": ["sd", "self"],
        "gamma": [3],
        "concurrency": [1, 2],
        "requests": 3,
        "max_new_tokens": 24,
        "warmup": 1,
        "prompt_set": "code",
    }
    suite = load_suite(write_suite(tmp_path, "llama-server", file="s.toml", models=models, groups=[group]))
    with serving(BINARY, list(servers.values()), tmp_path / "logs") as running:
        rows = run_suite(suite, tmp_path / "r.db", None, progress=False)
    assert len(rows) == 6
    for row in rows:
        assert counts_pass(row), row.audit_reason
        requests = [r for r in row.rounds_trace if r["kind"] == "request"]
        assert len(requests) == 3
        # llama-server sends usage; with ignore_eos every response decodes max_tokens tokens.
        assert all(r["counted_by"] == "usage" and r["output_tokens"] == 24 for r in requests)
        assert all(r["response_drafted"] is not None for r in requests)  # timings came back
        if row.arm == "baseline":
            assert row.counts.drafted == 0 and row.counts.accepted == 0
        else:
            assert 0 <= row.counts.accepted <= row.counts.drafted
            # Each decode step after the first token drafts at most γ tokens.
            assert all(0 < r["response_drafted"] <= 3 * 23 for r in requests)
    assert all(r.counts.accepted > 0 for r in rows if r.config["draft"] == "self")
    logs = {r.spec.port: r.log.read_text() for r in running}
    assert logged_requests(logs[servers["plain"].port]) == []
    for name in ("sd", "self"):
        stored = stored_counts(r for r in rows if r.config["draft"] == name)
        # Warm-ups: one run of 3 requests per configuration (concurrency 1 and 2) of the arm.
        check = check_counts(logged_requests(logs[servers[name].port]), stored, warmup_requests=6)
        assert check.agrees and check.stored == 6, check
