"""llama.cpp's self-test: a build that dies by a signal is one line, before any model, store or run.

The crashing build is simulated by a self-test child that kills itself with SIGILL, as a native
llama.cpp build does on a CPU whose hypervisor does not enable what the CPU reports (AMX); the
real child, on this machine's portable build, passes.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import pytest
from suite_files import write_suite

from specmoe.backends import llamacpp_check
from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.extras import LLAMACPP_BUILD, installed

needs_llamacpp = pytest.mark.skipif(not installed("llama_cpp"), reason="the llamacpp extra is not installed")


def _dying_child(folder: Path, signal_name: str = "SIGILL") -> Path:
    """A self-test script that records each run in `folder`/runs, then kills itself by the signal."""
    script = folder / "dying_probe.py"
    runs = folder / "runs"
    script.write_text(
        f"import os, signal\nopen({str(runs)!r}, 'a').write('run\\n')\n"
        f"os.kill(os.getpid(), signal.{signal_name})\n",
        encoding="utf-8",
    )
    return script


@pytest.fixture()
def crashing_build(tmp_path, monkeypatch):
    """This process's llama.cpp as if not yet used, and a self-test child that dies by SIGILL."""
    from specmoe.backends import llamacpp_load

    monkeypatch.setattr(llamacpp_load, "_lib", None)
    monkeypatch.setattr(llamacpp_check, "_verdict", None)
    monkeypatch.setattr(llamacpp_check, "PROBE", _dying_child(tmp_path))
    monkeypatch.delenv(llamacpp_check.SKIP_VARIABLE, raising=False)
    return tmp_path / "runs"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signal_name", ["SIGILL", "SIGSEGV"])
def test_a_child_killed_by_a_signal_is_one_line_with_the_rebuild(tmp_path, signal_name):
    line = llamacpp_check.self_test([sys.executable, str(_dying_child(tmp_path, signal_name))])
    assert line is not None and "\n" not in line
    description = signal.strsignal(getattr(signal, signal_name)).lower()
    assert line.startswith(f"llama.cpp died with {signal_name} ({description}) in its self-test")
    assert line.endswith(f"rebuild it portable: {LLAMACPP_BUILD} (docs/llamacpp.md)")
    if signal_name == "SIGILL":
        assert "CPU instructions this machine cannot execute" in line and "AMX" in line
    else:
        assert "crashes on a tiny model" in line


def test_a_child_that_fails_without_a_signal_only_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="specmoe.backends.llamacpp_check"):
        assert (
            llamacpp_check.self_test([sys.executable, "-c", "import sys; sys.exit('no gguf here')"]) is None
        )
    assert "failed without crashing (exit status 1: no gguf here); going on" in caplog.text


def test_windows_crash_codes_read_as_crashes():
    assert llamacpp_check._crash(0xC000001D) == ("0xC000001D", "illegal instruction")
    assert llamacpp_check._crash(-1073741795) == ("0xC000001D", "illegal instruction")  # signed form
    assert llamacpp_check._crash(1) is None and llamacpp_check._crash(0) is None
    assert llamacpp_check._crash(-4) == ("SIGILL", "illegal instruction")


@needs_llamacpp
def test_the_real_self_test_passes_here_once_per_process(monkeypatch):
    monkeypatch.setattr(llamacpp_check, "_verdict", None)
    monkeypatch.delenv(llamacpp_check.SKIP_VARIABLE, raising=False)
    llamacpp_check.check_llamacpp_runs()  # the probe: a tiny GGUF written, loaded and decoded
    assert llamacpp_check._verdict == "ok"


@needs_llamacpp
def test_the_verdict_is_kept_for_the_process(crashing_build):
    for _ in range(3):
        with pytest.raises(SpecmoeError, match=r"llama\.cpp died with SIGILL"):
            llamacpp_check.check_llamacpp_runs()
    assert crashing_build.read_text().count("run") == 1  # one child, whatever the number of models


@needs_llamacpp
def test_generate_on_a_crashing_build_is_one_line_not_a_dead_process(crashing_build, tmp_path, capsys):
    from specmoe.backends.llamacpp_probe import write_model

    model = tmp_path / "tiny.gguf"
    write_model(model)
    assert main(["generate", "--target", str(model), "--prompt", "hi", "--max-new-tokens", "2"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specmoe: error: llama.cpp died with SIGILL")
    assert LLAMACPP_BUILD in lines[0]


@needs_llamacpp
def test_a_suite_on_a_crashing_build_stops_before_its_store(crashing_build, tmp_path, capsys):
    from specmoe.backends.llamacpp_probe import write_model

    model = tmp_path / "tiny.gguf"
    write_model(model)
    suite = write_suite(
        tmp_path,
        "crash",
        defaults={"repeats": 1, "warmup": 0, "max_new_tokens": 2, "prompt_set": "factual", "prompts": 1},
        models={"t": {"path": model}},
        groups=[{"name": "g", "target": ["t"], "batch_size": [1]}],
    )
    db = tmp_path / "r.db"
    assert main(["bench", "run", str(suite), "--db", str(db), "--quiet"]) == 2
    assert "llama.cpp died with SIGILL" in capsys.readouterr().err
    assert not db.exists()


@needs_llamacpp
def test_the_self_test_can_be_skipped(crashing_build, monkeypatch):
    monkeypatch.setenv(llamacpp_check.SKIP_VARIABLE, "0")
    llamacpp_check.check_llamacpp_runs()
    assert not crashing_build.exists()  # no child ran
