"""The performance-model subcommands: `hw`, `profile`, `model fit`, `model predict`, `advise`.

Each function takes the parsed arguments from `specmoe.cli`, calls into the package and prints.
"""

from __future__ import annotations

import json
import logging

from specmoe.perf.files import write_json

log = logging.getLogger(__name__)


def run_hw(args) -> int:
    from specmoe.perf.hardware import measure_hardware

    hardware = measure_hardware(args.device, read_mib=args.read_mib, repeats=args.repeats)
    if args.out:
        print(f"wrote {write_json(args.out, hardware)}")
    flops = ", ".join(f"{dtype} {rate / 1e9:.1f} GFLOP/s" for dtype, rate in hardware["flops_per_s"].items())
    bandwidth = hardware["bandwidth_bytes_per_s"] / 1e9
    print(f"{hardware['name']} ({hardware['device']}): read {bandwidth:.1f} GB/s, {flops}")
    return 0


def run_profile(args) -> int:
    from specmoe.perf.hardware import load_hardware
    from specmoe.perf.profile import profile_model
    from specmoe.zoo.manifest import resolve_model_file

    profile = profile_model(
        resolve_model_file(args.model, args.zoo),
        args.batch,
        args.tokens,
        context=args.context,
        dtype=args.dtype,
        device=args.device,
        repeats=args.repeats,
        warmup=args.warmup,
        passes=args.passes,
        moe_top_k=args.moe_top_k,
        progress=None if args.quiet else log.info,
        threads=args.threads,
        hardware=_hardware_json(args.hw, load_hardware),
        experts_implementation=args.experts_implementation,
        allow_pickle=args.allow_pickle,
        trust_remote_code=args.trust_remote_code,
    )
    print(f"wrote {write_json(args.out, profile)} ({len(profile['points'])} points)")
    return 0


def _hardware_json(path, load_hardware) -> dict | None:
    """The `specmoe hw` file as JSON, validated by the hardware loader first (one-line errors)."""
    if path is None:
        return None
    load_hardware(path)
    return json.loads(path.read_text(encoding="utf-8"))


def run_fit(args) -> int:
    from specmoe.perf.fit import fit_profile
    from specmoe.perf.profile import load_profile
    from specmoe.perf.report import format_fit

    fit = fit_profile(load_profile(args.profile), args.max_points, where=str(args.profile))
    write_json(args.out, fit)
    print(format_fit(fit))
    print(f"wrote {args.out}")
    return 0


def run_predict(args) -> int:
    from specmoe.perf.predict import predict_from_args
    from specmoe.perf.report import format_prediction

    prediction = predict_from_args(args)
    print(json.dumps(prediction, indent=1) if args.json else format_prediction(prediction))
    return 0


def run_advise(args) -> int:
    from specmoe.perf.advise import advise_from_args
    from specmoe.perf.report import format_advice

    advice = advise_from_args(args)
    print(json.dumps(advice, indent=1) if args.json else format_advice(advice))
    return 0
