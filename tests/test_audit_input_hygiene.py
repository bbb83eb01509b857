"""`specmoe audit PATH`: only regular files are read, each within a size cap, and in a folder one bad
file is that file's row while the others are still audited."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from specmoe.audit.inputs import audit_input
from specmoe.cli import main

DATA = Path(__file__).parent / "data"
VLLM = DATA / "serving-results" / "vllm"


def cli_error(capsys, argv: list[str]) -> str:
    """The one stderr line of a command that must fail, run in a thread so a read that blocks (a
    FIFO) fails the test instead of hanging it."""
    outcome: list[int] = []
    worker = threading.Thread(target=lambda: outcome.append(main(argv)), daemon=True)
    worker.start()
    worker.join(60)
    assert outcome == [2], "the audit blocked or did not fail"
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_a_device_is_refused_before_any_read(capsys):
    err = cli_error(capsys, ["audit", "/dev/zero"])
    expected = "/dev/zero is not a regular file (a device or socket); pass a results file or a folder"
    assert err == f"specmoe: error: {expected}"


def test_a_fifo_is_refused_instead_of_blocking(capsys, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert f"{fifo} is not a regular file (a FIFO)" in cli_error(capsys, ["audit", str(fifo)])


def test_a_directory_where_a_file_is_wanted_is_called_a_directory(capsys, tmp_path):
    err = cli_error(capsys, ["audit", str(VLLM), "--baseline", str(tmp_path)])
    assert err == f"specmoe: error: --baseline {tmp_path} is a directory; pass a file"


def test_a_file_over_the_size_cap_names_the_cap_and_the_option(capsys):
    path = VLLM / "plain-c8.json"
    err = cli_error(capsys, ["audit", str(path), "--max-mb", "0.0001"])
    assert "over the 0.0001 MB the audit reads; raise it with --max-mb if the file is right" in err
    assert main(["audit", str(path), "--max-mb", "10"]) == 0  # raised: read as before
    assert "--max-mb must be > 0" in cli_error(capsys, ["audit", str(path), "--max-mb", "0"])


def test_one_bad_file_in_a_folder_is_its_own_row_and_the_rest_is_audited(tmp_path):
    for name in ("plain-c8.json", "eagle3-c8.json"):
        shutil.copy(VLLM / name, tmp_path / name)
    clean = [(r.id, r.verdict, r.reason) for r in audit_input(tmp_path)]
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)  # RecursionError in json
    os.mkfifo(tmp_path / "pipe")  # not a regular file: never opened
    rows = audit_input(tmp_path)
    deep = next(r for r in rows if r.id == "deep.json")
    assert deep.verdict == "unverifiable" and "JSON nested too deeply to read" in deep.reason
    assert [(r.id, r.verdict, r.reason) for r in rows if r is not deep] == clean  # pipe: skipped
    assert [v for _, v, _ in clean] == ["consistent", "consistent"]
