"""`specmoe hw`, `profile` and `model fit | check | predict`: the performance model's commands. The
device measured, a model's forward passes timed over a grid, the model's constants fitted to them,
a fit checked against this machine, and speedups predicted (`specmoe.perf`)."""

from __future__ import annotations

import json
import logging

from specmoe.cli.options import add_model_options, count, mebibytes, non_negative_int, number_list, path_arg
from specmoe.dtypes import DTYPE_NAMES
from specmoe.errors import SpecmoeError
from specmoe.perf.files import write_json

log = logging.getLogger(__name__)


def add_hw(commands) -> None:
    p = commands.add_parser("hw", help="measure memory read bandwidth and matmul FLOP/s of a device")
    p.add_argument("--device", default="cpu", help="cpu, cuda or mps")
    p.add_argument(
        "--read-mib", type=mebibytes, default=1024, help="size of the tensor the bandwidth sum reads"
    )
    p.add_argument("--repeats", type=count, default=5, help="timed repeats (median is kept)")
    p.add_argument(
        "--threads",
        type=count,
        default=None,
        help="CPU threads the measurement uses (default: torch's); match the runs it will be held against",
    )
    p.add_argument("--out", type=path_arg, default=None, help="write the hardware JSON here")
    p.set_defaults(run=run_hw)


def add_profile(commands) -> None:
    p = commands.add_parser("profile", help="time single forward passes T(B, t) of a model over a grid")
    p.add_argument("--model", required=True, help="model directory (or zoo name with --zoo)")
    p.add_argument("--zoo", type=path_arg, default=None, help="zoo directory to resolve model names in")
    p.add_argument("--batch", default="1,2,4,8,16", help="batch sizes B, comma-separated")
    p.add_argument("--tokens", default="1,2,3,4,5,8", help="tokens per sequence t, comma-separated")
    # Checked here so that the error names the option (the profiler's own check lists them all).
    p.add_argument(
        "--context", type=non_negative_int, default=64, help="cached tokens per sequence before each pass"
    )
    p.add_argument("--repeats", type=count, default=5, help="timed passes per point (median is kept)")
    p.add_argument("--warmup", type=non_negative_int, default=2, help="untimed passes per point")
    p.add_argument(
        "--passes",
        type=count,
        default=1,
        help="measure the grid this many times; each point keeps the faster",
    )
    p.add_argument("--moe-top-k", type=int, default=None, help="route to this many experts (sparsity sweeps)")
    p.add_argument(
        "--threads", type=count, default=None, help="torch and llama.cpp threads (default: torch's)"
    )
    p.add_argument(
        "--hw", type=path_arg, default=None, help="a `specmoe hw` file: record each step's bandwidth floor"
    )
    p.add_argument("--out", type=path_arg, required=True, help="profile JSON to write")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    add_model_options(p)
    p.set_defaults(run=run_profile)


def add_model(commands) -> None:
    parent = commands.add_parser("model", help="fit the performance model, predict SD speedups")
    model = parent.add_subparsers(title="model")
    fit = model.add_parser("fit", help="fit the model's constants to a profile (at most 21 points)")
    fit.add_argument("profile", type=path_arg, help="a `specmoe profile` output")
    fit.add_argument("--out", type=path_arg, required=True, help="fit JSON to write")
    fit.add_argument("--max-points", type=int, default=21, help="points used in the fit (<= 21)")
    fit.set_defaults(run=run_fit)
    check = model.add_parser(
        "check", help="does a fit still describe this machine? a few of its points timed again"
    )
    check.add_argument("fit", type=path_arg, help="a `specmoe model fit` output")
    check.add_argument(
        "--model", required=True, help="the model the fit was made from (or zoo name with --zoo)"
    )
    check.add_argument("--zoo", type=path_arg, default=None, help="zoo directory to resolve model names in")
    check.add_argument(
        "--batch",
        type=number_list,
        default=None,
        help="batch sizes (default: the fit's smallest and the one nearest 4)",
    )
    check.add_argument(
        "--tokens",
        type=number_list,
        default=None,
        help="tokens per sequence (default: 1 and the fit's largest up to 5)",
    )
    check.add_argument("--repeats", type=count, default=5, help="timed passes per point (median is kept)")
    check.add_argument(
        "--threads", type=count, default=None, help="torch and llama.cpp threads (as profiled)"
    )
    check.add_argument(
        "--dtype",
        choices=DTYPE_NAMES,
        default=None,
        help="compute dtype (default: the fit's, for transformers)",
    )
    check.add_argument("--device", default="cpu", help="cpu, cuda or mps")
    check.add_argument("--fail-on-drift", action="store_true", help="exit 1 when the fit has drifted")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(run=run_check)
    predict = model.add_parser(
        "predict", help="predicted target efficiency and SD speedup, from a fit or from first principles"
    )
    predict.add_argument("fit", type=path_arg, nargs="?", default=None, help="a fit; omit with --config")
    predict.add_argument(
        "--batch", type=number_list, default=None, help="batch sizes (default: the fit's, or 1..256)"
    )
    predict.add_argument("--gamma", default="1,2,3,4", help="draft lengths, comma-separated")
    predict.add_argument(
        "--alpha", default="0.6,0.8", help="per-token acceptance probabilities, comma-separated"
    )
    predict.add_argument("--draft", type=path_arg, help="draft profile or fit (default: a free draft)")
    predict.add_argument("--hardware", type=path_arg, help="hardware JSON (first principles)")
    predict.add_argument("--config", type=path_arg, help="HF config.json (first principles)")
    predict.add_argument("--draft-config", type=path_arg, help="draft HF config.json (first principles)")
    predict.add_argument("--context", type=int, help="cached tokens per sequence (first principles; 512)")
    predict.add_argument("--dtype", help="weight format: bfloat16, fp8, int4, q4_k_m, mlx-4bit, ...")
    predict.add_argument("--draft-dtype", help="the draft's weight format (default: --dtype)")
    predict.add_argument("--kv-dtype", help="KV-cache format (first principles)")
    predict.add_argument("--engine", help="engine profile (first principles): vllm, sglang, ...")
    predict.add_argument("--top-k", type=int, help="what-if: route each token to this many experts")
    predict.add_argument("--json", action="store_true", help="print one JSON object")
    predict.set_defaults(run=run_predict)


def run_hw(args) -> int:
    check_fits_memory(args.read_mib, args.device)
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


def check_fits_memory(read_mib: int, device: str) -> None:
    """Refuse a bandwidth tensor larger than the memory free now: torch would fail late with an
    overflow or an allocation error, or the machine would swap, or the kernel kill the process."""
    import psutil

    free_mib = psutil.virtual_memory().available // 2**20
    where = "in this machine's free memory"
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():  # else the device check names the problem
            free_mib = torch.cuda.mem_get_info(torch.device(device))[0] // 2**20
            where = f"in {device}'s free memory"
    if read_mib > free_mib:
        raise SpecmoeError(
            f"--read-mib {read_mib} does not fit, {where} ({free_mib} MiB); "
            f"pass --read-mib {max(1, free_mib // 2)} or less"
        )


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
    from specmoe.perf.terminal import format_fit

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
    typed = backend_for(model).self_contained  # the file fixes its weight types: no dtype
    profile = profile_model(
        model,
        args.batch or batches,
        args.tokens or tokens,
        context=int(fit.get("context", 64)),
        dtype=None if typed else (args.dtype or fit.get("model", {}).get("dtype")),
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
    from specmoe.perf.terminal import format_prediction

    prediction = predict_from_args(args)
    print(json.dumps(prediction, indent=1) if args.json else format_prediction(prediction))
    return 0
