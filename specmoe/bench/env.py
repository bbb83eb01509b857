"""The environment a run was measured in, recorded beside every result."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import cache
from pathlib import Path

import torch

import specmoe


@cache
def environment(device: str = "cpu") -> dict:
    import transformers

    env = {
        "cpu": _cpu_model(),
        # A model name like "AMD EPYC" names a family, not a part: two machines under one name
        # differed here by 2x in read bandwidth and 500x in bfloat16 matmuls. The part and the ISA
        # features that decide kernels tell them apart in the stored runs.
        **_cpu_id(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "specmoe": specmoe.__version__,
        "git_sha": _git_sha(),
        "device": device,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The x86 features that choose torch's and llama.cpp's kernels (bfloat16 and int8 paths above all).
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")


def _cpu_id() -> dict:
    """{"cpu_id": "family F model M stepping S", "cpu_flags": [...]} from /proc/cpuinfo where it
    says (x86 Linux); nothing elsewhere."""
    try:
        lines = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0].splitlines()
    except OSError:
        return {}
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    if "cpu family" not in fields:
        return {}
    model, stepping = fields.get("model", "?"), fields.get("stepping", "?")
    part = f"family {fields['cpu family']} model {model} stepping {stepping}"
    flags = set(fields.get("flags", "").split())
    return {"cpu_id": part, "cpu_flags": [f for f in CPU_FLAGS if f in flags]}


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _git_sha() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
