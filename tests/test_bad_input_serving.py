"""The rest of the fifty probes of docs/results/cpu/probes.md (the others: test_bad_input_files.py):
servers that break a response in new ways, Ctrl-C in the middle of a suite, a store another process
holds locked, and inputs that are right and must stay accepted (a suite saved with a byte-order
mark, a draft that is its own target, audit rows a spreadsheet wrote).

Every fake server listens on 127.0.0.1 only, reads each request whole and stops when its test ends.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from audited import counts_pass
from fake_servers import RawServer
from test_bad_input_cli import _served_suite, _stored_runs
from test_bad_input_files import STUDY, VLLM, suite_text
from tiny_suites import tiny_sd_suite

from specmoe.audit.inputs import audit_input
from specmoe.bench.suite_run import run_suite
from specmoe.cli import main
from specmoe.suite.load import load_suite

# --- servers -------------------------------------------------------------------------------------


def _models(conn: socket.socket) -> None:
    body = json.dumps({"data": [{"id": "m"}]}).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    conn.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)


def _event(data: dict | str) -> bytes:
    return b"data: " + (data if isinstance(data, str) else json.dumps(data)).encode() + b"\n\n"


TOKEN = _event({"choices": [{"index": 0, "text": " w", "finish_reason": None}]})
STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def _reset_mid_stream(conn: socket.socket, request: bytes) -> None:
    if request.startswith(b"GET"):
        return _models(conn)
    conn.sendall(STREAM_HEAD + b"Connection: close\r\n\r\n" + TOKEN + TOKEN)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close


def _chunk_cut_short(conn: socket.socket, request: bytes) -> None:
    if request.startswith(b"GET"):
        return _models(conn)
    data = TOKEN + TOKEN
    chunk = f"{len(data):x}\r\n".encode() + data + b"\r\n" + b"40\r\nabc"  # promises 64 bytes, sends 3
    conn.sendall(STREAM_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunk)


def _ends_without_done(conn: socket.socket, request: bytes) -> None:
    if request.startswith(b"GET"):
        return _models(conn)
    conn.sendall(STREAM_HEAD + b"Connection: close\r\n\r\n" + TOKEN + TOKEN)


def _error_500(conn: socket.socket, request: bytes) -> None:
    if request.startswith(b"GET"):
        return _models(conn)
    body = b'{"error": {"message": "CUDA error: an illegal memory access", "code": 500}}'
    head = f"HTTP/1.1 500 Internal Server Error\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    conn.sendall(head.encode() + body)


def _redirect(conn: socket.socket, request: bytes) -> None:
    head = "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:9/v1/models\r\n"
    conn.sendall(head.encode() + b"Content-Length: 0\r\nConnection: close\r\n\r\n")


def _not_http(conn: socket.socket, request: bytes) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")  # url = names the SSH port by mistake


SERVERS = {
    "server-resets-mid-stream": (_reset_mid_stream, "/v1/completions: the connection broke mid-response"),
    # A short chunk then a close reads as IncompleteRead, or as a reset when the close races the read.
    "server-chunk-cut-short": (_chunk_cut_short, "/v1/completions: the connection broke mid-response ("),
    "server-http-500": (_error_500, "HTTP 500: CUDA error: an illegal memory access; the server failed"),
    "server-redirects": (_redirect, "HTTP 307, the server redirects to http://127.0.0.1:9/v1/models"),
    "server-not-http": (_not_http, "the server did not answer in HTTP (BadStatusLine: SSH-2.0-OpenSSH_9.6)"),
}


def _bench(argv: list[str], capsys) -> tuple[int, list[str], str]:
    """main's exit status, its stderr lines and its stdout."""
    status = main(argv)
    out, err = capsys.readouterr()
    return status, err.strip().splitlines(), out


@pytest.mark.parametrize("name", list(SERVERS))
def test_a_broken_server_is_one_line_and_stores_nothing(name, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SPECMOE_DEBUG", raising=False)
    answer, expect = SERVERS[name]
    db = tmp_path / "served.db"
    with RawServer(answer) as server:
        status, lines, _ = _bench(
            ["bench", "run", _served_suite(tmp_path, server.url), "--db", str(db), "--quiet"], capsys
        )
    assert status == 2 and len(lines) == 1, lines
    assert "unexpected" not in lines[0] and "free disk space" not in lines[0], lines[0]
    assert expect in lines[0], lines[0]
    assert _stored_runs(db) == 0


def test_a_server_error_is_not_sent_again():
    """The server saw the request: a 500 is reported, not retried behind the user's back."""
    from specmoe.errors import SpecmoeError
    from specmoe.serving import client
    from specmoe.serving.spec import ServerSpec

    with RawServer(_error_500) as server, pytest.raises(SpecmoeError):
        client.stream(ServerSpec(url=server.url, model="m"), {"model": "m", "max_tokens": 4, "stream": True})
    assert server.posts == 1


def test_a_stream_that_ends_without_done_is_stored_only_as_a_failed_audit(tmp_path, capsys):
    db = tmp_path / "served.db"
    with RawServer(_ends_without_done) as server:
        status, lines, out = _bench(
            ["bench", "run", _served_suite(tmp_path, server.url), "--db", str(db), "--quiet"], capsys
        )
    assert status == 0, lines
    with sqlite3.connect(db) as conn:
        (verdict, reason), *others = conn.execute("SELECT audit_verdict, audit_reason FROM runs").fetchall()
    conn.close()
    assert others == [] and verdict == "fail" and reason.startswith("responses ended without a finish reason")
    assert "FAIL" in out  # and the summary says so


# --- Ctrl-C and a store another process holds ----------------------------------------------------


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


def test_a_study_csv_with_a_byte_order_mark_is_audited_as_without(tmp_path):
    text = STUDY.read_text(encoding="utf-8")
    plain, marked = tmp_path / "plain.csv", tmp_path / "marked.csv"
    plain.write_text(text, encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert audit_input(marked) == audit_input(plain)


def test_a_rate_past_any_float_or_below_zero_is_an_invalid_row(tmp_path):
    header, first, *_ = STUDY.read_text(encoding="utf-8").splitlines()
    columns = header.split(",")
    rows = []
    for column, value in (("tokens_per_sec", "1e309"), ("speedup_vs_baseline", "-1.5")):
        cells = first.split(",")
        cells[columns.index(column)] = value
        cells[columns.index("job_id")] = column
        rows.append(",".join(cells))
    path = tmp_path / "odd.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    verdicts = {r.id: (r.verdict, r.reason) for r in audit_input(path)}
    assert verdicts["tokens_per_sec"][0] == "invalid" and "tokens_per_sec" in verdicts["tokens_per_sec"][1]
    assert verdicts["speedup_vs_baseline"][0] == "invalid"


def test_a_nan_throughput_in_a_vllm_result_is_an_invalid_row(tmp_path):
    for name in ("plain-c8.json", "eagle3-c8.json"):
        data = json.loads((VLLM / name).read_text())
        if name.startswith("eagle3"):
            data["output_throughput"] = float("nan")  # json.dumps writes NaN, as Python tools do
        (tmp_path / name).write_text(json.dumps(data))
    row = next(r for r in audit_input(tmp_path) if r.id == "eagle3-c8.json")
    assert row.verdict == "invalid" and row.reason.startswith(
        "invalid input: output_throughput is not a finite number"
    )


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
