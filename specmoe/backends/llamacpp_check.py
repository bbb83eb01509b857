"""Can this process's llama.cpp run on this machine? A self-test in a child process, once per process.

A llama.cpp build can hold instructions this CPU cannot execute. llama.cpp builds natively by default,
for every instruction set the compiling CPU reports, and a CPU under a hypervisor may report some that
the hypervisor does not enable (AMX on an Intel Xeon: the build dies in ggml's AMX matrix multiply,
`tilezero`); a wheel built on another machine, or taken from pip's cache, may target another CPU. Such
a build kills the process with a signal the first time a model decodes, not with an exception: a
suite, a profile or a findings run would end with "Illegal instruction" and nothing saying why.

So before a process first uses llama.cpp (`llamacpp.llama_lib`), `check_llamacpp_runs` runs
`llamacpp_probe.py` (a tiny GGUF model, loaded and decoded) in a child process. A child that dies by
a signal becomes one SpecmoeError line: the signal, the likely cause and the portable rebuild. A child
that fails otherwise (no gguf package, a model llama.cpp refuses) says nothing about crashes: a
warning, and the process goes on. The verdict is kept for the life of the process: the test costs
about a second (the child's imports), once.

SPECMOE_LLAMACPP_SELF_TEST=0 skips it, for where a child Python process cannot be started (some
sandboxes); a build that cannot run then kills the process without the explanation.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.extras import LLAMACPP_BUILD

log = logging.getLogger(__name__)

SKIP_VARIABLE = "SPECMOE_LLAMACPP_SELF_TEST"
PROBE = Path(__file__).with_name("llamacpp_probe.py")
TIMEOUT_S = 300  # a tiny model decodes in milliseconds; this only bounds a child that hangs
# Windows reports a crash as an NTSTATUS exit code rather than a signal.
_WINDOWS_CRASHES = {0xC000001D: "illegal instruction", 0xC0000005: "access violation"}

_verdict: str | None = None  # "ok", or the line a failed test raises; None: not tested yet


def check_llamacpp_runs() -> None:
    """Raise SpecmoeError when this process's llama.cpp cannot run here (see the module docstring);
    the child runs once per process, its verdict kept."""
    global _verdict
    if os.environ.get(SKIP_VARIABLE, "") == "0":
        return
    if _verdict is None:
        with tempfile.TemporaryDirectory(prefix="specmoe-llamacpp-") as folder:
            _verdict = self_test([sys.executable, "-P", str(PROBE), folder]) or "ok"
    if _verdict != "ok":
        raise SpecmoeError(_verdict)


def self_test(command: list[str]) -> str | None:
    """Run the self-test `command`; the one-line explanation when it died by a signal, else None.
    A child that fails without a signal or hangs is logged and passes: it says nothing of crashes."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.warning("the llama.cpp self-test did not finish in %d s; going on without it", TIMEOUT_S)
        return None
    except OSError as err:  # no interpreter to start: nothing can be said about llama.cpp
        log.warning("the llama.cpp self-test could not start (%s); going on without it", err)
        return None
    crash = _crash(done.returncode)
    if crash is not None:
        return crash_line(*crash)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        log.warning(
            "the llama.cpp self-test failed without crashing (exit status %d: %s); going on",
            done.returncode,
            lines[-1].strip() if lines else "no message",
        )
    return None


def _crash(returncode: int) -> tuple[str, str] | None:
    """(signal name, description) when the exit status says the child was killed, else None."""
    code = returncode & 0xFFFFFFFF
    if code in _WINDOWS_CRASHES:
        return f"0x{code:08X}", _WINDOWS_CRASHES[code]
    if returncode >= 0:
        return None
    number = -returncode  # POSIX: killed by signal -returncode
    try:
        return signal.Signals(number).name, (signal.strsignal(number) or "").lower() or "a signal"
    except ValueError:
        return f"signal {number}", "a signal"


def crash_line(name: str, description: str) -> str:
    """The error for a self-test child that died by `name` (SIGILL, ...): what happened, why it is
    likely, and the portable rebuild."""
    if "illegal instruction" in description:
        cause = (
            "this llama-cpp-python build uses CPU instructions this machine cannot execute, as a native "
            "build (llama.cpp's default) does where the CPU reports a feature its hypervisor does not "
            "enable (AMX, AVX-512), or a wheel built on another CPU does"
        )
    else:
        cause = (
            "this llama-cpp-python build crashes on a tiny model, so any model would crash it: a build "
            "for another CPU or from a broken compile is the likely cause"
        )
    return (
        f"llama.cpp died with {name} ({description}) in its self-test, a tiny model decoding in a child "
        f"process: {cause}; rebuild it portable: {LLAMACPP_BUILD} (docs/llamacpp.md)"
    )


def reset() -> None:
    """Forget the verdict, so the next check runs the child again (tests)."""
    global _verdict
    _verdict = None
