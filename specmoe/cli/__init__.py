"""The `specmoe` command. Each subcommand parses its arguments and calls into the package; a module
here holds one command group's parser and the functions that run it.

Modules:
    __init__   main(): the root parser, -v/-q, and one line per error (`error_line`)
    options    the parser class, argument types and model options every command shares
    generate   generate: decode prompts, speculatively with a draft
    zoo        zoo build | fetch | list | export-gguf: the offline model zoo
    bench      bench run | quick | export | schema | report: suites and their results store
    summary    bench summary, and the result table bench run, bench quick and demo print
    audit      audit: foreign result sets checked for impossible speedup claims
    demo       demo: the quick suite on the trained zoo, explained
    perf       hw, profile, model fit | check | predict: the performance model
    advise     advise: will SD pay here, from a fit or from configs
    calibrate  calibrate fit | heldout | frozen | check | specbundle: the engine profiles against
               published SD measurements
    findings   findings: the studies' claims measured and the findings document written
    __main__   `python -m specmoe.cli`
"""

from __future__ import annotations

import argparse
import os
import sys

from specmoe.cli.advise import add_advise
from specmoe.cli.audit import add_audit
from specmoe.cli.bench import add_bench
from specmoe.cli.calibrate import add_calibrate
from specmoe.cli.demo import add_demo
from specmoe.cli.findings import add_findings
from specmoe.cli.generate import add_generate
from specmoe.cli.options import Parser
from specmoe.cli.perf import add_hw, add_model, add_profile
from specmoe.cli.zoo import add_zoo
from specmoe.console import configure_logging
from specmoe.errors import SpecmoeError

# What `specmoe --help` says first (this module's docstring is for its readers).
DESCRIPTION = (
    "Run, measure, explain and predict speculative decoding on Mixture-of-Experts and dense language "
    "models. `specmoe demo` runs a small benchmark end to end; `specmoe COMMAND --help` shows a "
    "command's options and their defaults."
)


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


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="specmoe", description=DESCRIPTION)
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
    add_generate(commands)
    add_zoo(commands)
    add_bench(commands)
    add_audit(commands)
    add_demo(commands)
    add_hw(commands)
    add_profile(commands)
    add_model(commands)
    add_advise(commands)
    add_calibrate(commands)
    add_findings(commands)
    return parser
