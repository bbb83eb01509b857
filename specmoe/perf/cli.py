"""The performance-model subcommands: `hw`, `profile`, `model fit`, `model check`, `model predict`,
`advise`.

Each function takes the parsed arguments from `specmoe.cli`, calls into the package and prints.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from specmoe.perf.files import write_json

log = logging.getLogger(__name__)


def run_hw(args) -> int:
    from specmoe.perf.hardware import measure_hardware

    hardware = measure_hardware(
        args.device, read_mib=args.read_mib, repeats=args.repeats, threads=args.threads
    )
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


def run_check(args) -> int:
    from dataclasses import asdict

    from specmoe.backends import backend_for
    from specmoe.perf.drift import check_points, compare, format_check
    from specmoe.perf.fit import load_fit
    from specmoe.perf.profile import profile_model
    from specmoe.zoo.manifest import resolve_model_file

    fit = load_fit(args.fit)
    batches, tokens = check_points(fit["grid"])
    model = resolve_model_file(args.model, args.zoo)
    gguf = backend_for(model) == "llamacpp"
    profile = profile_model(
        model,
        args.batch or batches,
        args.tokens or tokens,
        context=int(fit.get("context", 64)),
        dtype=None if gguf else (args.dtype or fit["model"].get("dtype")),
        device=args.device,
        repeats=args.repeats,
        threads=args.threads,
        trace_samples=1,
    )
    check = compare(fit, profile)
    if args.json:
        payload = asdict(check) | {"current": check.current, "median_ratio": check.median_ratio}
        print(json.dumps(payload, indent=1))
    else:
        print(format_check(check, str(args.fit)))
    return 1 if args.fail_on_drift and not check.current else 0


def run_predict(args) -> int:
    from specmoe.perf.predict import predict_from_args
    from specmoe.perf.report import format_prediction

    prediction = predict_from_args(args)
    print(json.dumps(prediction, indent=1) if args.json else format_prediction(prediction))
    return 0


def add_advise_arguments(p: argparse.ArgumentParser) -> None:
    """`specmoe advise`: from a fit (FIT --draft PROFILE --alpha A) or from configs, no timing
    (--config --hardware --engine [--draft-config | --draft METHOD])."""
    p.add_argument("fit", type=Path, nargs="?", default=None, help="target fit (omit with --config)")
    p.add_argument(
        "--draft",
        action="append",
        default=None,
        help="with a fit: a draft profile or fit (repeat); with --config: a method, "
        "ngram | eagle | eagle3 | mtp | medusa (default: the --draft-config model)",
    )
    p.add_argument("--alpha", action="append", default=None, help="with a fit: per-position acceptance")
    p.add_argument("--batch", default=None, help="batch sizes (default: the fit's, or 1,4,16,64)")
    p.add_argument("--gamma-max", type=int, default=8, help="largest draft length considered")
    configs = p.add_argument_group("from configs (no timing: first principles + an engine profile)")
    configs.add_argument("--config", type=Path, help="the target's Hugging Face config.json")
    configs.add_argument("--draft-config", type=Path, help="the draft model's config.json")
    configs.add_argument("--hardware", type=Path, help="hardware JSON (`specmoe hw`, docs/perf-examples/)")
    configs.add_argument("--engine", help="engine profile: hf-eager, vllm, sglang, llamacpp-metal, ...")
    configs.add_argument("--engines", type=Path, help="a TOML file of extra or replacement engine profiles")
    configs.add_argument("--dtype", help="target weight format: bfloat16, fp8, int4, q4_k_m, mlx-4bit, ...")
    configs.add_argument("--draft-dtype", help="draft weight format (default: the draft config's)")
    configs.add_argument("--kv-dtype", help="KV-cache format (default: 16-bit, or the weights' float dtype)")
    configs.add_argument("--gamma", default=None, help="draft lengths to score (default 1..--gamma-max)")
    configs.add_argument("--context", type=int, default=512, help="cached tokens per sequence (512)")
    configs.add_argument(
        "--output-tokens",
        type=int,
        default=None,
        help="tokens each sequence decodes (a benchmark's max_new_tokens): prices each row's cut-short "
        "last round and the batch shrinking as rows finish; default: a long decode's steady state",
    )
    configs.add_argument(
        "--acceptance", type=float, default=None, help="your measured or expected acceptance"
    )
    configs.add_argument(
        "--acceptance-kind",
        choices=["alpha", "rate", "tau"],
        default="rate",
        help="rate = accepted/drafted (default); tau = mean accepted length incl. the bonus "
        "token; alpha = per-position",
    )
    configs.add_argument(
        "--acceptance-gamma", type=int, default=None, help="the gamma a rate or tau was measured at"
    )
    configs.add_argument(
        "--tree-tokens",
        type=int,
        default=None,
        help="tree verification: tokens verified per sequence (SGLang's num-draft-tokens)",
    )
    configs.add_argument("--tree-width", type=int, default=1, help="tree drafting: tokens per step (top-k)")
    configs.add_argument("--draft-vocab", type=int, default=None, help="EAGLE-3 head's vocabulary (32000)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run_advise(args) -> int:
    from specmoe.perf.report import format_advice, format_setup_advice

    if args.config is not None:
        from specmoe.perf.advise_cli import advise_from_configs

        advice = advise_from_configs(args)
        print(json.dumps(advice, indent=1) if args.json else format_setup_advice(advice))
        return 0
    from specmoe.perf.advise import advise_from_args

    advice = advise_from_args(args)
    print(json.dumps(advice, indent=1) if args.json else format_advice(advice))
    return 0
