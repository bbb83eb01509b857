"""A suite or a generate run meeting a fault of its machine or a right input that looks wrong:
Ctrl-C in the middle of a suite, a store another process holds locked, a CUDA index beyond the GPUs,
a prompt beyond the context, and inputs that must stay accepted (a suite saved with a byte-order
mark, a draft that is its own target). From the fifty probes of docs/results/cpu/probes.md.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from audited import counts_pass
from test_bad_input_cli import _stored_runs
from test_bad_input_files import suite_text
from test_bad_input_serving import _bench
from tiny_suites import tiny_sd_suite

from specmoe.bench.suite_run import run_suite
from specmoe.suite.load import load_suite

# --- Ctrl-C and a store another process holds ------------------------------------------------------


def test_ctrl_c_in_a_suite_leaves_only_complete_runs_and_resumes(tiny_zoo, tmp_path):
    defaults = {"prompts": 1, "max_new_tokens": 2, "repeats": 4, "warmup": 0}
    suite, db = tiny_sd_suite(tmp_path, "interrupted", defaults), tmp_path / "r.db"
    argv = [
        sys.executable,
        "-m",
        "specmoe.cli",
        "bench",
        "run",
        str(suite),
        "--db",
        str(db),
        "--zoo",
        str(tiny_zoo),
    ]
    proc = subprocess.Popen([*argv, "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # The loop ends when the suite does; the deadline only guards a hung child (a loaded machine can
    # take minutes to store two runs).
    deadline = time.monotonic() + 600
    while _stored_runs_safely(db) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the suite finished before the interrupt reached it")
    assert proc.returncode == 130 and err.strip().splitlines() == ["specmoe: interrupted"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        stored = conn.execute("SELECT COUNT(*), COUNT(DISTINCT run_id) FROM runs").fetchone()
    conn.close()
    assert stored[0] == stored[1] and 2 <= stored[0] < 8  # whole rows, none twice, not all
    rows = run_suite(load_suite(suite), db, tiny_zoo, progress=False)
    assert len(rows) == 8 and len({r.run_id for r in rows}) == 8  # resumed: each run once


def _stored_runs_safely(db: Path) -> int:
    try:
        return _stored_runs(db)
    except sqlite3.Error:  # the store is being created
        return 0


def test_a_store_another_process_holds_locked_is_one_line_and_untouched(
    tiny_zoo, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    monkeypatch.setattr("specmoe.results.store.LOCK_TIMEOUT_S", 0.5)
    defaults = {"prompts": 1, "max_new_tokens": 2, "repeats": 1, "warmup": 0}
    suite, db = tiny_sd_suite(tmp_path, "locked", defaults), tmp_path / "r.db"
    run_suite(load_suite(suite), db, tiny_zoo, progress=False)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process writing, or a tool holding it open
    try:
        more = ["--set", "max_new_tokens=3", "--zoo", str(tiny_zoo)]
        status, lines, _ = _bench(["bench", "run", str(suite), "--db", str(db), "--quiet", *more], capsys)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert status == 2 and len(lines) == 1, lines
    why = "locked by another process for 0.5 s; wait for it to finish or use another --db"
    assert lines[0] == f"specmoe: error: {db}: {why}"
    assert _stored_runs(db) == 2


# --- right inputs that must stay accepted ----------------------------------------------------------


def test_a_suite_saved_with_a_byte_order_mark_loads(tiny_zoo, tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + suite_text("bom", tiny_zoo / "draft-xs").encode())
    suite = load_suite(path)
    assert suite.name == "bom" and [g.name for g in suite.groups] == ["g"]


def test_a_draft_that_is_its_own_target_accepts_everything(tiny_zoo, tmp_path):
    group = {"name": "g", "target": ["t"], "draft": ["t"], "gamma": [2]}
    path = tmp_path / "self.toml"
    path.write_text(suite_text("self", tiny_zoo / "draft-xs", [group]), encoding="utf-8")
    rows = run_suite(load_suite(path), tmp_path / "r.db", None, progress=False)
    (sd,) = [r for r in rows if r.arm == "sd"]
    assert sd.acceptance_rate == 1.0 and counts_pass(sd)  # timing bounds aside


# --- a device or a context the run cannot have -----------------------------------------------------


def test_a_cuda_index_beyond_the_gpus_names_the_ones_there(monkeypatch):
    """Probe 44 on a machine with GPUs (faked here: the CPU-only case runs in test_bad_input_files)."""
    import torch

    from specmoe.backends.hf import resolve_device
    from specmoe.errors import SpecmoeError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(
        SpecmoeError, match=r"^--device cuda:7: torch sees 2 CUDA GPU\(s\), cuda:0 to cuda:1; "
    ):
        resolve_device("cuda:7")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    for typo in ("cuda:x", "cpu:0", "gpu"):
        with pytest.raises(
            SpecmoeError, match=f"unknown device '{typo}'; use cpu, cuda, cuda:<index> or mps"
        ):
            resolve_device(typo)


def test_a_prompt_beyond_the_context_is_one_line_from_the_command(tiny_zoo):
    """Probe 42 as a user runs it: transformers' own notice of a long prompt reaches the terminal
    through its handler in a fresh process (test_bad_input_files checks the line in process)."""
    prompt = "word " * 25_000  # about what one command-line argument may hold (128 KiB)
    argv = ["generate", "--target", str(tiny_zoo / "draft-xs"), "--prompt", prompt]
    proc = subprocess.run(
        [sys.executable, "-m", "specmoe.cli", *argv], capture_output=True, text=True, timeout=300
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert "prompt (25002 tokens) + max_new_tokens (64) + gamma (0) exceeds the model's context" in lines[0]
