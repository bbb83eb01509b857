"""Derive the CPU engine profiles (`llamacpp-cpu`, `hf-eager-cpu` in specmoe/perf/engines.toml) from
this machine's measured profiles: one set of engine constants per engine, fitted to every profiled
forward pass T(B, t) of every model it ran, priced from the models' configs and the hardware file.

    python -m benchmarks.perf_model.cpu_engine_profiles

prints the constants and each model's median and worst error. They differ from a per-model fit
(`specmoe model fit`) in what they may know: one fixed cost per forward and per layer, one share of
the measured bandwidth and one of the matrix rate per engine (μ per GGUF type), for every model
alike, so that a model the profiles never saw is priced from its config. Run it after the profiles
change; copy the printed values into engines.toml.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from benchmarks.paths import CPU_RESULTS as RESULTS
from benchmarks.perf_model.cpu_from_configs import HARDWARE, zoo_config
from specmoe.perf.engines import engine_profile
from specmoe.perf.firstprinciples import first_principles_constants
from specmoe.perf.hardware import load_hardware
from specmoe.perf.model import MoEShape, forward_time
from specmoe.perf.structure import parse_architecture

PROFILES = {
    "hf-eager-cpu": [
        *(RESULTS / "findings/profiles").glob("*.json"),
        *(RESULTS / "findings/profiles-transformers").glob("*.json"),
        *(RESULTS / "predictions/profiles").glob("*.json"),
    ],
    "llamacpp-cpu": [
        *(RESULTS / "findings/profiles-llamacpp").glob("*.json"),
        *(RESULTS / "predictions/profiles-llamacpp").glob("*.json"),
    ],
}
# constant: (bounds, start)
CONSTANTS = {
    "forward_s": ((0.0, 0.02), 1e-3),
    "layer_s": ((0.0, 0.005), 2e-4),
    "expert_s": ((0.0, 0.005), 1e-5),
    "bandwidth_efficiency": ((0.05, 1.0), 0.6),
}
COMPUTE = ((0.01, 1.0), 0.3)  # one matrix-rate share per weight format the engine ran


def _model(path: Path) -> tuple[str, str, str, int | None]:
    """(preset, name, format, top-k) from a profile file name: [preset-]name[-topK]-format.json."""
    parts = path.stem.split("-")
    preset = parts.pop(0) if parts[0] in ("bench", "trained") else "bench"
    fmt = parts.pop()
    top_k = int(parts.pop()[3:]) if parts[-1].startswith("top") else None
    return preset, "-".join(parts), fmt, top_k


def _points(paths: list[Path]):
    for path in sorted(paths):
        profile = json.loads(path.read_text())
        preset, name, fmt, top_k = _model(path)
        arch = parse_architecture(zoo_config(preset, name, top_k), path.name, fmt)
        for point in profile["points"]:
            yield (
                path.stem,
                arch,
                float(profile.get("context", 64)),
                point["batch"],
                point["tokens"],
                point["median_s"],
            )


def _engine(base, theta, formats, rereads):
    forward, layer, expert, bandwidth, *rest = theta
    compute, mu = rest[: len(formats)], rest[len(formats) :]
    return base.model_copy(
        update={
            "forward_s": float(forward),
            "layer_s": float(layer),
            "expert_s": float(expert),
            "bandwidth_efficiency": float(bandwidth),
            "compute_efficiency": {fmt: float(c) for fmt, c in zip(formats, compute, strict=True)},
            "reread": {fmt: float(m) for fmt, m in zip(rereads, mu, strict=True)},
        }
    )


def fit(name: str) -> None:
    hardware = load_hardware(HARDWARE)
    base = engine_profile(name, "cpu")
    points = list(_points(PROFILES[name]))
    formats = sorted({arch.dtype for _, arch, *_ in points})
    rereads = formats  # every format: float32 BLAS re-reads over a few rows on this CPU too
    low = [CONSTANTS[c][0][0] for c in CONSTANTS] + [COMPUTE[0][0]] * len(formats) + [1.0] * len(rereads)
    high = [CONSTANTS[c][0][1] for c in CONSTANTS] + [COMPUTE[0][1]] * len(formats) + [32.0] * len(rereads)
    start = [CONSTANTS[c][1] for c in CONSTANTS] + [COMPUTE[1]] * len(formats) + [2.0] * len(rereads)

    def residuals(theta):
        engine = _engine(base, theta, formats, rereads)
        out = []
        for _, arch, context, batch, tokens, measured in points:
            constants = first_principles_constants(arch, hardware, "hw", engine)
            shape = MoEShape(arch.num_experts, arch.top_k)
            out.append(np.log(forward_time(constants, shape, batch, tokens, context) / measured))
        return out

    result = least_squares(residuals, start, bounds=(low, high))
    engine = _engine(base, result.x, formats, rereads)
    print(f"[engines.{name}]  ({len(points)} profiled passes of {len({p[0] for p in points})} models)")
    for key in ("forward_s", "layer_s", "expert_s", "bandwidth_efficiency", "compute_efficiency", "reread"):
        print(f"  {key} = {getattr(engine, key)}")
    errors: dict[str, list[float]] = {}
    for (model, *_), r in zip(points, residuals(result.x), strict=True):
        errors.setdefault(model, []).append(abs(float(np.expm1(r))))
    for model, errs in sorted(errors.items()):
        print(f"  {model:<28} median {statistics.median(errs):6.1%}  worst {max(errs):6.1%}")


def main() -> int:
    for name in PROFILES:
        fit(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
