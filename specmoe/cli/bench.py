"""`specmoe bench run | quick | export | schema | report | summary`: suites run into a results store,
and the store exported, summarised and reported on (`specmoe.bench`, `specmoe.report`).

The harness (torch, scipy) is imported inside the run functions: `specmoe --help` builds every
parser and should not wait for it."""

from __future__ import annotations

from pathlib import Path

from specmoe.cli.options import count, finite_float, non_negative_int, nonempty_text, path_arg
from specmoe.cli.summary import CATEGORY, CONFIG, add_summary, print_summary
from specmoe.dtypes import DEFAULT_DTYPE, DTYPE_NAMES


def add_bench(commands) -> None:
    from specmoe.suite.shipped import shipped_suites

    bench = commands.add_parser("bench", help="run suites, export results").add_subparsers(title="bench")
    run = bench.add_parser("run", help="run a suite (resumes: finished runs are skipped)")
    run.add_argument(
        "suite", help=f"suite file, or the name of a shipped suite: {', '.join(shipped_suites())}"
    )
    run.add_argument(
        "--db", type=path_arg, default=Path("results.db"), help="results store (SQLite); resumes"
    )
    run.add_argument("--zoo", type=path_arg, default=None, help="zoo directory (default: a per-user cache)")
    run.add_argument(
        "--quiet", action="store_true", help="no progress (as `specmoe -q`, for this suite only)"
    )
    run.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="[GROUP.]KEY=VALUE",
        help="force a setting in [defaults] and every group, or in one group (TOML value: 64, [2, 4]); "
        "repeatable",
    )
    run.add_argument(
        "--group", dest="groups", action="append", default=[], help="run only this group; repeatable"
    )
    run.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="where runs execute: in this process, or as Ray tasks (needs the ray extra)",
    )
    run.add_argument(
        "--address", default=None, help="Ray cluster address (auto, ray://head:10001); default: local Ray"
    )
    run.add_argument(
        "--max-retries", type=int, default=2, help="Ray: attempts after the first for a failed or lost run"
    )
    run.add_argument(
        "--by-category",
        action="store_true",
        help="print one summary line per prompt category of each configuration",
    )
    run.add_argument(
        "--threads",
        type=count,
        default=None,
        help="forward threads for local runs (default: the cores other processes leave free)",
    )
    run.set_defaults(run=run_bench)
    add_bench_quick(bench)
    export = bench.add_parser("export", help="export a results store as CSV or Parquet")
    export.add_argument("--db", type=path_arg, required=True, help="results store to export")
    export.add_argument("--format", choices=["csv", "parquet"], default="csv", help="file format")
    export.add_argument(
        "--out", type=path_arg, default=None, help="file to write, - for stdout (default: beside the store)"
    )
    export.add_argument(
        "--per-prompt",
        action="store_true",
        help="one row per (run, prompt): each prompt's counts, category and its batch's timing",
    )
    export.set_defaults(run=run_export)
    schema = bench.add_parser("schema", help="print the JSON Schema of a suite file (for editors)")
    schema.set_defaults(run=run_bench_schema)
    report = bench.add_parser(
        "report", help="write an HTML report (figures, tables, audit) of a results store"
    )
    report.add_argument("--db", type=path_arg, required=True, help="results store to report on")
    report.add_argument(
        "--out", type=path_arg, required=True, help="folder for report.html, figures and tables"
    )
    report.add_argument(
        "--profile",
        type=path_arg,
        action="append",
        default=[],
        help="a `specmoe profile` output to add the activated-experts view; repeatable",
    )
    report.add_argument(
        "--fit",
        type=path_arg,
        action="append",
        default=[],
        help="a `specmoe model fit` output (target or draft) to add model curves; repeatable",
    )
    report.set_defaults(run=run_report)
    add_summary(bench)


def add_bench_quick(bench) -> None:
    quick = bench.add_parser(
        "quick",
        help="sweep a target against drafts over gamma and batch size, no suite file needed",
        description="Builds a one-group suite from the arguments, writes it beside the store as "
        "DB.suite.toml (rerun or edit it with `specmoe bench run`), runs it and prints the summary. "
        "Models: a directory, a .gguf file or a hub ID (org/name) in the local Hugging Face cache.",
    )
    quick.add_argument(
        "--model", required=True, type=nonempty_text, help="target: directory, .gguf file or hub ID"
    )
    quick.add_argument(
        "--draft",
        dest="drafts",
        action="append",
        required=True,
        help="a draft: directory, .gguf file, hub ID, ngram[:MIN-MAX] or mtp (the target's MTP module); "
        "repeatable",
    )
    quick.add_argument("--gamma", default="4", help="tokens drafted per round, comma-separated (2,4,8)")
    quick.add_argument("--batch", default="1", help="batch sizes, comma-separated (1,8)")
    quick.add_argument(
        "--dataset",
        default="factual",
        help='a built-in prompt set (factual, code, reasoning, chinese) or a .jsonl file of {"prompt": ...} '
        'or {"text": ...} lines (default: factual)',
    )
    quick.add_argument(
        "--num-prompts", type=count, default=None, help="prompts measured per configuration (default: all)"
    )
    quick.add_argument("--max-new-tokens", type=count, default=64, help="tokens decoded per prompt")
    quick.add_argument("--temperature", type=finite_float, default=0.0, help="0 is greedy")
    quick.add_argument("--dtype", choices=DTYPE_NAMES, default=DEFAULT_DTYPE, help="compute dtype")
    quick.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps")
    quick.add_argument("--repeats", type=count, default=1, help="timed runs of every configuration")
    quick.add_argument("--warmup", type=non_negative_int, default=1, help="untimed runs of each arm first")
    quick.add_argument("--chat", action="store_true", help="prompts through the target's chat template")
    quick.add_argument("--db", type=path_arg, default=Path("results.db"), help="results store (SQLite)")
    quick.add_argument("--quiet", action="store_true", help="no progress line")
    quick.add_argument(
        "--threads",
        type=count,
        default=None,
        help="forward threads (default: the cores other processes leave free)",
    )
    quick.set_defaults(run=run_bench_quick)


def run_bench(args) -> int:
    from specmoe.bench.executors import make_executor
    from specmoe.bench.suite_run import check_suite_extras, run_suite
    from specmoe.bench.suite_zoo import prepare_zoo
    from specmoe.suite.load import load_suite, resolve_suite_path
    from specmoe.suite.overrides import SuiteOverrides, parse_assignment

    overrides = SuiteOverrides(tuple(parse_assignment(s) for s in args.settings), tuple(args.groups))
    executor = make_executor(args.executor, args.address, args.max_retries)
    suite = load_suite(resolve_suite_path(args.suite), overrides)
    check_suite_extras(suite, executor)  # before a zoo is built or a GGUF exported
    zoo = prepare_zoo(suite, args.zoo)
    rows = run_suite(suite, args.db, zoo, progress=not args.quiet, executor=executor, threads=args.threads)
    print_summary(rows, (CONFIG, CATEGORY) if args.by_category else (CONFIG,))
    return 0


def run_bench_quick(args) -> int:
    """Build, write and run the suite of the arguments; print the summary."""
    from specmoe.bench.suite_run import run_suite
    from specmoe.suite.quick import QuickArgs, build_quick_suite, parse_int_list

    quick = QuickArgs(
        model=args.model,
        drafts=tuple(args.drafts),
        gammas=parse_int_list(args.gamma, "--gamma"),
        batches=parse_int_list(args.batch, "--batch"),
        db=args.db,
        dataset=args.dataset,
        num_prompts=args.num_prompts,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        dtype=args.dtype,
        device=args.device,
        repeats=args.repeats,
        warmup=args.warmup,
        chat=args.chat,
    )
    suite, path = build_quick_suite(quick)
    print(f"suite written to {path}; rerun or edit it with `specmoe bench run {path} --db {quick.db}`")
    rows = run_suite(suite, quick.db, None, progress=not args.quiet, threads=args.threads)
    print_summary(rows)
    return 0


def run_export(args) -> int:
    from specmoe.results.export import default_export_path
    from specmoe.results.per_prompt import export_per_prompt
    from specmoe.results.store import export

    out = args.out or default_export_path(args.db, args.format, args.per_prompt)
    (export_per_prompt if args.per_prompt else export)(args.db, out, args.format)
    if str(out) != "-":  # `--out -` wrote the records themselves to stdout
        print(f"wrote {out}")
    return 0


def run_report(args) -> int:
    from specmoe.report import write_report

    print(f"wrote {write_report(args.db, args.out, args.profile, args.fit)}")
    return 0


def run_bench_schema(args) -> int:
    from specmoe.suite.schema import json_schema

    print(json_schema())
    return 0
