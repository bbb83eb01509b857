"""What a device can do: memory read bandwidth and matmul rate per dtype, measured or from a file.

The same JSON shape serves both ends. `specmoe hw` writes it from measurements on this machine;
`specmoe model predict --hardware FILE` reads it, and a hand-written file (spec-sheet numbers for a
machine you do not have, see docs/perf-examples/) has the same keys:

    {"schema": 1, "kind": "specmoe-hardware", "name": "...", "device": "cuda", "device_count": 1,
     "bandwidth_bytes_per_s": 4.8e12, "flops_per_s": {"bfloat16": 9.89e14, "float32": 6.7e13}}

Units: bytes per second and floating-point operations per second (a multiply-add is 2 FLOPs), per
device. With several devices, `link_bandwidth_bytes_per_s` (one direction, per device: NVLink,
Infinity Fabric, PCIe) and `link_latency_s` (one collective's fixed cost) price the tensor-parallel
all-reduces and expert-parallel all-to-alls (`specmoe.perf.firstprinciples`); `link_kind` says what
that link is ("nvlink", "pcie", "network": two machines over Ethernet or InfiniBand). Unknown keys
are rejected so that a typo cannot silently fall back to a default.

The host, for expert offload (llama.cpp's `--n-cpu-moe`, `specmoe.perf.offload`): a `host` object
with the host memory's read bandwidth as the CPU reaches it (`bandwidth_bytes_per_s`), the CPU's
matrix rate (`flops_per_s`, one number), the device-host link per direction
(`link_bandwidth_bytes_per_s`; on a unified-memory part, the memory itself) and one transfer's fixed
cost (`link_latency_s`), with `source` saying where the numbers come from.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from specmoe.canonical import json_value
from specmoe.dtypes import torch_dtype
from specmoe.errors import SpecmoeError
from specmoe.user_files import read_user_text

SCHEMA = 1
KIND = "specmoe-hardware"
MATMUL_DTYPES = ("float32", "bfloat16")
_FALLBACK = {
    "float8": ("float16", "bfloat16"),
    "float16": ("bfloat16",),
    "bfloat16": ("float16",),
    "float64": ("float32",),
}
_KEYS = {
    "schema",
    "kind",
    "name",
    "device",
    "device_count",
    "bandwidth_bytes_per_s",
    "flops_per_s",
    "link_bandwidth_bytes_per_s",
    "link_latency_s",
    "source",
    "notes",
    "settings",
    "link_kind",
    "host",
}
LINK_KINDS = ("nvlink", "pcie", "network", "infinity-fabric")
_HOST_KEYS = {
    "bandwidth_bytes_per_s",
    "flops_per_s",
    "link_bandwidth_bytes_per_s",
    "link_latency_s",
    "source",
}


@dataclass(frozen=True)
class Host:
    """The machine around a device, where offloaded experts live and run (`specmoe.perf.offload`)."""

    bandwidth_bytes_per_s: float  # host memory read by the CPU
    flops_per_s: float  # the CPU's matrix rate in the weights' compute dtype
    link_bandwidth_bytes_per_s: float  # device <-> host, one direction
    link_latency_s: float  # one transfer's fixed cost (a synchronisation)
    source: str = ""


@dataclass(frozen=True)
class Hardware:
    """Per-device rates; `device_count` devices share the work (see specmoe.perf.firstprinciples)."""

    name: str
    bandwidth_bytes_per_s: float
    flops_per_s: dict[str, float]  # dtype name -> FLOP/s
    device_count: int = 1
    link_bandwidth_bytes_per_s: float | None = None  # per device, one direction
    link_latency_s: float = 0.0  # per collective
    device: str | None = None  # "cuda", "mps", "cpu" as the file says; None: not said
    link_kind: str | None = None  # "nvlink", "pcie", "network", ...; None: not said
    host: Host | None = None  # for expert offload; None: not described

    def matmul_rate(self, compute_dtype: str, where: str = "hardware file") -> float:
        """FLOP/s for a format's compute dtype: float8 falls back to the 16-bit rate on devices
        without it, float16 and bfloat16 stand in for each other."""
        for name in (compute_dtype, *_FALLBACK.get(compute_dtype, ())):
            if name in self.flops_per_s:
                return self.flops_per_s[name]
        return self.flops_for(compute_dtype, where)

    def flops_for(self, dtype: str, where: str = "hardware file") -> float:
        if dtype not in self.flops_per_s:
            have = ", ".join(sorted(self.flops_per_s))
            raise SpecmoeError(
                f"{where} gives no flops_per_s for dtype '{dtype}' (has: {have}); add it or pass --dtype"
            )
        return self.flops_per_s[dtype]


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _median_seconds(fn, device, repeats: int) -> float:
    fn()  # warm-up: first-touch page faults, kernel selection
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def read_bandwidth(device, read_bytes: int, repeats: int) -> float:
    """Bytes per second of a streaming sum over a float32 tensor of `read_bytes` bytes."""
    import torch

    data = torch.ones(read_bytes // 4, dtype=torch.float32, device=device)
    seconds = _median_seconds(data.sum, device, repeats)
    return data.numel() * 4 / seconds


def matmul_rate(device, dtype: str, size: int, repeats: int) -> float:
    """FLOP/s of a square [size, size] @ [size, size] product (2·size³ FLOPs) in `dtype`."""
    import torch

    generator = torch.Generator().manual_seed(0)
    left = torch.randn(size, size, generator=generator).to(device=device, dtype=torch_dtype(dtype))
    right = torch.randn(size, size, generator=generator).to(device=device, dtype=torch_dtype(dtype))
    seconds = _median_seconds(lambda: left @ right, device, repeats)
    return 2.0 * size**3 / seconds


def measure_hardware(
    device: str = "cpu",
    read_mib: int = 1024,
    matmul_size: int | None = None,
    repeats: int = 5,
    dtypes: tuple[str, ...] = MATMUL_DTYPES,
    threads: int | None = None,
) -> dict:
    """Measure this machine's device and return the hardware JSON (a dict, see module docstring).
    `threads` sets torch's CPU threads for the measurement (restored after): one thread reads
    less bandwidth than two, so a floor held against one-thread runs needs a one-thread figure."""
    import torch

    if threads is not None:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return measure_hardware(device, read_mib, matmul_size, repeats, dtypes)
        finally:
            torch.set_num_threads(before)

    from specmoe.backends.hf import resolve_device

    if read_mib < 1 or repeats < 1:
        raise SpecmoeError(f"read_mib and repeats must be >= 1, got {read_mib} and {repeats}")
    torch_device = resolve_device(device)
    size = matmul_size or (4096 if torch_device.type == "cuda" else 1024)
    with torch.inference_mode():
        bandwidth = read_bandwidth(torch_device, read_mib * 2**20, repeats)
        flops = {dtype: matmul_rate(torch_device, dtype, size, repeats) for dtype in dtypes}
    return {
        "schema": SCHEMA,
        "kind": KIND,
        "name": _device_name(torch_device),
        "device": str(torch_device),
        "device_count": 1,
        "bandwidth_bytes_per_s": bandwidth,
        "flops_per_s": flops,
        "source": "measured by `specmoe hw`",
        "settings": {
            "read_bytes": read_mib * 2**20,
            "matmul_size": size,
            "repeats": repeats,
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
    }


def _device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def parse_hardware(data: dict, where: str) -> Hardware:
    """Validate a hardware dict (from `specmoe hw` or written by hand); `where` names it in errors."""
    if not isinstance(data, dict):
        raise SpecmoeError(f"{where} must hold a JSON object with bandwidth_bytes_per_s and flops_per_s")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise SpecmoeError(f"{where}: unknown key '{unknown[0]}'; allowed keys: {', '.join(sorted(_KEYS))}")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise SpecmoeError(
            f"{where}: schema {data['schema']!r} is not {SCHEMA}; regenerate it with `specmoe hw`"
        )
    bandwidth = _rate(data, "bandwidth_bytes_per_s", where)
    raw_flops = data.get("flops_per_s")
    if isinstance(raw_flops, int | float) and not isinstance(raw_flops, bool):
        raw_flops = {dtype: raw_flops for dtype in ("float32", "bfloat16", "float16")}
    if not isinstance(raw_flops, dict) or not raw_flops:
        raise SpecmoeError(
            f'{where}: flops_per_s must be a number or an object such as {{"bfloat16": 9.9e14}}'
        )
    flops = {str(dtype): _rate(raw_flops, dtype, f"{where} flops_per_s") for dtype in raw_flops}
    count = data.get("device_count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise SpecmoeError(f"{where}: device_count must be an integer >= 1, got {count!r}")
    link = None
    if data.get("link_bandwidth_bytes_per_s") is not None:
        link = _rate(data, "link_bandwidth_bytes_per_s", where)
    latency = data.get("link_latency_s", 0.0)
    if isinstance(latency, bool) or not isinstance(latency, int | float) or not 0 <= latency < 1:
        raise SpecmoeError(f"{where}: 'link_latency_s' must be seconds in [0, 1), got {latency!r}")
    if count > 1 and link is None:
        raise SpecmoeError(
            f"{where}: device_count {count} needs link_bandwidth_bytes_per_s (per device, one "
            "direction: about 4.5e11 for H100 NVLink, 3.2e10 for PCIe 5 x16)"
        )
    device = data.get("device")
    kind = data.get("link_kind")
    if kind is not None and kind not in LINK_KINDS:
        raise SpecmoeError(f"{where}: 'link_kind' must be one of {', '.join(LINK_KINDS)}, got {kind!r}")
    return Hardware(
        str(data.get("name", where)),
        bandwidth,
        flops,
        count,
        link,
        float(latency),
        str(device) if device else None,
        kind,
        _host(data.get("host"), where),
    )


def _host(raw, where: str) -> Host | None:
    """The `host` object of a hardware file, each number checked; None when absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SpecmoeError(f"{where}: 'host' must be an object with {', '.join(sorted(_HOST_KEYS))}")
    unknown = sorted(set(raw) - _HOST_KEYS)
    if unknown:
        raise SpecmoeError(
            f"{where}: unknown host key '{unknown[0]}'; allowed: {', '.join(sorted(_HOST_KEYS))}"
        )
    here = f"{where} host"
    latency = raw.get("link_latency_s", 0.0)
    if isinstance(latency, bool) or not isinstance(latency, int | float) or not 0 <= latency < 1:
        raise SpecmoeError(f"{here}: 'link_latency_s' must be seconds in [0, 1), got {latency!r}")
    numbers = [_rate(raw, key, here) for key in _HOST_RATES]
    return Host(*numbers, float(latency), str(raw.get("source", "")))


_HOST_RATES = ("bandwidth_bytes_per_s", "flops_per_s", "link_bandwidth_bytes_per_s")


# A rate (bytes or FLOPs per second) outside these is no device's: one per second is below any
# machine, and 1e18 is a hundred times past the fastest accelerator's dense tensor rate (B200, ~9e15
# FP4 FLOP/s) and its memory (~8e12 B/s). Beyond them the roofline's times underflow or overflow.
RATE_MIN, RATE_MAX = 1.0, 1e18


def _rate(data: dict, key: str, where: str) -> float:
    """data[key] as a rate per second in [RATE_MIN, RATE_MAX] (NaN and infinity refused)."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not RATE_MIN <= value <= RATE_MAX:
        raise SpecmoeError(
            f"{where}: '{key}' must be a finite number > 0 per second (per device), between "
            f"{RATE_MIN:g} and {RATE_MAX:g}, got {value!r}"
        )
    return float(value)


def load_hardware(path: Path) -> Hardware:
    path = Path(path)
    try:
        data = json_value(read_user_text(path))
    except FileNotFoundError:
        raise SpecmoeError(
            f"hardware file '{path}' not found; write one with `specmoe hw --out FILE`"
        ) from None
    except UnicodeDecodeError:
        raise SpecmoeError(
            f"hardware file '{path}' is not UTF-8 text; write one with `specmoe hw --out FILE`"
        ) from None
    except json.JSONDecodeError as err:
        raise SpecmoeError(
            f"hardware file '{path}' is not valid JSON ({err.msg}, line {err.lineno})"
        ) from None
    return parse_hardware(data, str(path))
