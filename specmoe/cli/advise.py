"""`specmoe advise`: will speculative decoding pay here? The best draft and gamma per batch size, the
break-even acceptance and a verdict, from a measured fit or from model configs and an engine profile
with no timing (`specmoe.perf.advise`)."""

from __future__ import annotations

import argparse
import json

from specmoe.cli.options import count, non_negative_int, number_list, path_arg


def add_advise(commands) -> None:
    p = commands.add_parser(
        "advise", help="will SD pay here? best draft and gamma per batch size, break-even acceptance, verdict"
    )
    add_advise_arguments(p)
    p.set_defaults(run=run_advise)


def add_advise_arguments(p: argparse.ArgumentParser) -> None:
    """`specmoe advise`: from a fit (FIT --draft PROFILE --alpha A) or from configs, no timing
    (--config --hardware --engine [--draft-config | --draft METHOD])."""
    p.add_argument("fit", type=path_arg, nargs="?", default=None, help="target fit (omit with --config)")
    p.add_argument(
        "--draft",
        action="append",
        default=None,
        help="with a fit: a draft profile or fit (repeat); with --config: a method, "
        "ngram | eagle | eagle3 | mtp | medusa | dflash[:BLOCK] (default: the --draft-config model; "
        "dflash prices its --draft-config if given, else z-lab's layout at the target's width)",
    )
    p.add_argument("--alpha", action="append", default=None, help="with a fit: per-position acceptance")
    p.add_argument(
        "--batch", type=number_list, default=None, help="batch sizes (default: the fit's, or 1,4,16,64)"
    )
    p.add_argument("--gamma-max", type=int, default=8, help="largest draft length considered")
    configs = p.add_argument_group("from configs (no timing: first principles + an engine profile)")
    configs.add_argument("--config", type=path_arg, help="the target's Hugging Face config.json")
    configs.add_argument("--draft-config", type=path_arg, help="the draft model's config.json")
    configs.add_argument(
        "--hardware", type=path_arg, help="hardware JSON (`specmoe hw`, docs/perf-examples/)"
    )
    configs.add_argument("--engine", help="engine profile: hf-eager, vllm, sglang, llamacpp-metal, ...")
    configs.add_argument(
        "--engines", type=path_arg, help="a TOML file of extra or replacement engine profiles"
    )
    configs.add_argument("--dtype", help="target weight format: bfloat16, fp8, int4, q4_k_m, mlx-4bit, ...")
    configs.add_argument("--draft-dtype", help="draft weight format (default: the draft config's)")
    configs.add_argument("--kv-dtype", help="KV-cache format (default: 16-bit, or the weights' float dtype)")
    configs.add_argument(
        "--gamma", type=number_list, default=None, help="draft lengths to score (default 1..--gamma-max)"
    )
    configs.add_argument("--context", type=int, default=512, help="cached tokens per sequence (512)")
    configs.add_argument(
        "--output-tokens",
        type=int,
        default=None,
        help="tokens each sequence decodes (a benchmark's max_new_tokens): prices each row's cut-short "
        "last round and the batch shrinking as rows finish; default: a long decode's steady state",
    )
    configs.add_argument(
        "--plain-step-ms",
        type=float,
        default=None,
        help="your measured plain decode step at the one --batch given (batch ÷ output tokens/s "
        "without SD, in ms): time the model does not explain is charged to every target pass",
    )
    configs.add_argument(
        "--step-form",
        choices=["fixed", "scaled"],
        default="fixed",
        help="how --plain-step-ms enters a pass: fixed, the difference added to every target pass; "
        "scaled, every forward of target and drafter multiplied so it grows with the pass "
        "(docs/results/calibration/anchor-verdict-rules.md)",
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
        "--acceptance-gamma", type=count, default=None, help="the gamma a rate or tau was measured at"
    )
    configs.add_argument(
        "--tree-tokens",
        type=int,
        default=None,
        help="tree verification: tokens verified per sequence (SGLang's num-draft-tokens)",
    )
    configs.add_argument("--tree-width", type=int, default=1, help="tree drafting: tokens per step (top-k)")
    configs.add_argument("--draft-vocab", type=count, default=None, help="EAGLE-3 head's vocabulary (32000)")
    offload = configs.add_mutually_exclusive_group()
    offload.add_argument(
        "--n-cpu-moe",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="llama.cpp's --n-cpu-moe: the routed experts of the first N layers stay in host memory "
        "and run there (needs a llamacpp-* engine and a hardware file with a 'host' object)",
    )
    offload.add_argument(
        "--cpu-moe",
        action="store_true",
        help="llama.cpp's --cpu-moe: every layer's routed experts on the host",
    )
    configs.add_argument(
        "--pp",
        type=count,
        default=None,
        metavar="N",
        help="pipeline-parallel stages: not modelled, refused in one line (devices in one tensor-parallel "
        "group come from the hardware file's device_count)",
    )
    emit = p.add_argument_group("engine settings (with --config and --acceptance)")
    emit.add_argument(
        "--emit",
        choices=["vllm", "sglang", "llamacpp"],
        default=None,
        help="print the best gamma per batch size in that engine's own syntax (vLLM's batch-size "
        "table, SGLang's --speculative-* flags, llama-server's --spec-* flags)",
    )
    emit.add_argument("--target-name", default="TARGET", help="what --emit writes for the target weights")
    emit.add_argument("--draft-name", default="DRAFT", help="what --emit writes for the draft weights")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run_advise(args) -> int:
    from specmoe.perf.terminal import format_advice, format_setup_advice

    if args.config is not None:
        from specmoe.perf.advise_cli import advise_from_configs

        advice = advise_from_configs(args)
        if args.emit is not None:
            from specmoe.perf.emit import EngineSyntax, emit

            text = emit(advice, EngineSyntax(args.emit), args.target_name, args.draft_name)
            print(json.dumps(advice | {"emit": text}, indent=1) if args.json else text)
            return 0
        print(json.dumps(advice, indent=1) if args.json else format_setup_advice(advice))
        return 0
    from specmoe.perf.advise_cli import refuse_pipeline

    refuse_pipeline(args.pp)
    fixed = (("--emit", args.emit), ("--plain-step-ms", args.plain_step_ms), ("--n-cpu-moe", args.n_cpu_moe))
    for flag, value in (*fixed, ("--cpu-moe", args.cpu_moe or None)):
        if value is not None:
            from specmoe.errors import SpecmoeError

            raise SpecmoeError(f"{flag} prices from configs: add --config, --hardware and --engine")
    from specmoe.perf.advise import advise_from_args

    advice = advise_from_args(args)
    print(json.dumps(advice, indent=1) if args.json else format_advice(advice))
    return 0
