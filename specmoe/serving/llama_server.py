"""llama.cpp's `llama-server` started for a benchmark: one frozen spec per server, its command line,
and a running process that counts as up once GET /v1/models lists its alias.

specmoe measures servers it does not run (docs/serving.md); on one machine, though, a serving suite's
plain and speculative llama-servers can be started here, from the same spec type, so the two arms
differ only in the draft. What both arms share, and why:

- `--no-cache-prompt` and `--cache-ram 0`: llama-server reuses a slot's cached prompt when the next
  request starts with it; benchmark prompts repeat across warm-ups and repeats, so time to first
  token would time a cache hit instead of a prefill.
- `-np` slots: llama-server decodes at most that many requests together; the rest queue. A suite's
  largest concurrency needs as many slots.
- one thread count for prompt and generation, target and draft (`-t`, `-tb`, `-td`, `-tbd`), and an
  optional CPU list (`taskset -c`), so a server and the client measuring it need not share a core.
- with a draft: `--spec-type draft-simple` (without it this llama.cpp loads the draft and never
  drafts), `--spec-draft-n-max` γ and `--spec-draft-p-min 0` (draft γ tokens every round whatever
  the draft's confidence, as specmoe's own loop does). These are the spellings of the
  llama.cpp in the pinned llama-cpp-python: it refuses the old `--draft-max` and `--draft-min`, and
  keeps `--model-draft` as another name of `--spec-draft-model`.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.serving.client import check_model
from specmoe.serving.spec import ServerSpec

HOST = "127.0.0.1"  # loopback only: a benchmark server is nobody else's
START_TIMEOUT_S = 300.0  # loading a GGUF of a few GB from a cold disk
STOP_TIMEOUT_S = 10.0
_POLL_S = 0.5


@dataclass(frozen=True)
class LlamaServerSpec:
    """One llama-server: a target GGUF, optionally a draft GGUF, on a loopback port."""

    alias: str  # the served model name (--alias): the suite model's `model`
    port: int
    model: Path  # target GGUF
    draft: Path | None = None  # draft GGUF: speculative decoding with a draft model
    gamma: int | None = None  # draft tokens per round (--spec-draft-n-max), >= 1; None without a draft
    parallel: int = 4  # slots (-np): requests decoded together
    ctx: int = 4096  # KV cells over all slots (-c); each slot gets ctx / parallel positions
    threads: int = 1
    cpus: str | None = None  # a taskset CPU list ("0", "2-3") for the server, or None

    def __post_init__(self) -> None:
        if (self.draft is None) != (self.gamma is None) or (self.gamma is not None and self.gamma < 1):
            raise ValueError(f"{self.alias}: a draft needs gamma >= 1 and gamma needs a draft")

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def server(self) -> ServerSpec:
        return ServerSpec(url=self.url, model=self.alias, engine="llamacpp-server", timeout_s=5.0)


def server_command(binary: str | Path, spec: LlamaServerSpec) -> list[str]:
    """The argv that starts `spec` (the module docstring says why each shared flag is there)."""
    threads = str(spec.threads)
    command = [
        str(binary), "--model", str(spec.model), "--alias", spec.alias,
        "--host", HOST, "--port", str(spec.port),
        "--parallel", str(spec.parallel), "--ctx-size", str(spec.ctx),
        "--threads", threads, "--threads-batch", threads,
        "--no-cache-prompt", "--cache-ram", "0", "--metrics",
    ]  # fmt: skip
    if spec.draft is not None:
        command += [
            "--spec-type", "draft-simple", "--spec-draft-model", str(spec.draft),
            "--spec-draft-n-max", str(spec.gamma),
            "--spec-draft-p-min", "0",
            "--spec-draft-threads", threads, "--spec-draft-threads-batch", threads,
        ]  # fmt: skip
    return command if spec.cpus is None else ["taskset", "-c", spec.cpus, *command]


@dataclass(frozen=True)
class RunningServer:
    spec: LlamaServerSpec
    process: subprocess.Popen
    log: Path  # the server's stdout and stderr


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((HOST, port)) == 0


def start(binary: str | Path, spec: LlamaServerSpec, log: Path) -> RunningServer:
    """Start one server, its output to `log`, and return once it serves its alias."""
    if port_in_use(spec.port):
        # Another server there would answer the readiness check in place of ours.
        raise SpecmoeError(
            f"port {spec.port} on {HOST} is in use; stop what listens there or pick another port"
        )
    with log.open("w") as handle:  # the child keeps its own descriptor
        process = subprocess.Popen(server_command(binary, spec), stdout=handle, stderr=subprocess.STDOUT)
    running = RunningServer(spec, process, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            check_model(spec.server)
            if process.poll() is None:
                return running
        except SpecmoeError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop(running)
            tail = log.read_text(errors="replace")[-1500:]
            raise SpecmoeError(
                f"llama-server '{spec.alias}' on port {spec.port} did not start within "
                f"{START_TIMEOUT_S:.0f} s (exit status {process.poll()}); its log ends: {tail!r}"
            )
        time.sleep(_POLL_S)


def stop(running: RunningServer) -> None:
    running.process.terminate()
    try:
        running.process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        running.process.kill()
        running.process.wait()


@contextmanager
def serving(
    binary: str | Path, specs: Sequence[LlamaServerSpec], log_dir: Path
) -> Iterator[list[RunningServer]]:
    """Every server of `specs` up (one log each, `<alias>-<port>.log`), all stopped on exit."""
    ports = [s.port for s in specs]
    if len(set(ports)) != len(ports):
        raise SpecmoeError(f"two llama-servers share a port ({sorted(ports)}); give each its own")
    log_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        started = []
        for spec in specs:
            running = start(binary, spec, log_dir / f"{spec.alias}-{spec.port}.log")
            stack.callback(stop, running)
            started.append(running)
        yield started
