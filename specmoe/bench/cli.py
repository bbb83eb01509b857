"""`specmoe bench run`, `bench summary`, `bench quick` and `specmoe demo`: the harness's command-line
entry points. A command's output (the summary, the paths written) goes to stdout; progress and other news
are log records on stderr (`specmoe.console`).

The harness (torch, scipy) is imported inside the functions: `specmoe`'s parser adds the summary
command from here, and `specmoe --help` should not wait for them."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from specmoe.bench.suite_zoo import default_zoo_dir, prepare_zoo
from specmoe.console import is_terminal
from specmoe.errors import SpecmoeError

if TYPE_CHECKING:
    from specmoe.bench.executors import Executor
    from specmoe.bench.overrides import SuiteOverrides
    from specmoe.bench.quick import QuickArgs
    from specmoe.bench.store import RunRow

log = logging.getLogger(__name__)
CONFIG, CATEGORY = "config", "category"  # as specmoe.bench.summary_table names them
BY_HELP = (
    "one row per value of these columns, every other column pooled but target and draft (rows split by "
    "them too); repeatable. config (the default): "
    "one row per configuration; category: the prompts' category; or a configuration column: target, "
    "draft, gamma, prompt, batch, concurrency, request_rate, requests, top_k, temperature, dtype, device, "
    "max_new_tokens, compile, chat, group, suite"
)


def run_bench(
    suite_arg: str,
    db: Path,
    zoo: Path | None,
    progress: bool = True,
    overrides: SuiteOverrides | None = None,
    executor: Executor | None = None,
    threads: int | None = None,
    by_category: bool = False,
) -> int:
    from specmoe.bench.suite_load import load_suite, resolve_suite_path
    from specmoe.bench.suite_run import check_suite_extras, run_suite

    suite = load_suite(resolve_suite_path(suite_arg), overrides)
    check_suite_extras(suite, executor)  # before a zoo is built or a GGUF exported
    zoo = prepare_zoo(suite, zoo)
    rows = run_suite(suite, db, zoo, progress=progress, executor=executor, threads=threads)
    print_summary(rows, (CONFIG, CATEGORY) if by_category else (CONFIG,))
    return 0


def print_summary(rows: Sequence[RunRow], by: Sequence[str] = (CONFIG,), as_json: bool = False) -> None:
    """The result table on stdout: JSON when asked, rich tables on a terminal, plain text otherwise
    (`bench summary`, and the end of `bench run` and `demo`)."""
    from specmoe.bench.summary_rich import print_rich
    from specmoe.bench.summary_table import build, format_text, to_json

    table = build(rows, by)
    if as_json:
        print(json.dumps(to_json(table), ensure_ascii=False, indent=1))
    elif is_terminal(sys.stdout):
        from rich.console import Console

        print_rich(table, Console())
    else:
        print(format_text(table))


def add_summary_parser(bench) -> None:
    """`specmoe bench summary` on the `bench` subparsers."""
    p = bench.add_parser("summary", help="print the result table of a results store")
    p.add_argument("--db", type=Path, required=True, help="results store to summarise")
    p.add_argument(
        "--by",
        action="append",
        default=[],
        metavar="COLUMN",
        help=BY_HELP,
    )
    p.add_argument("--suite", default=None, help="only this suite's runs (a store can hold several)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run_summary)


def run_summary(args: argparse.Namespace) -> int:
    if not args.db.is_file():
        raise SpecmoeError(f"results store not found: {args.db}; run a suite first or pass the right --db")
    from specmoe.bench.store import Store
    from specmoe.bench.summary_table import check_by, select

    by = check_by(args.by)  # before the store is read: a typo is one line at once
    with Store(args.db) as store:
        rows = select(store.rows(), args.suite, args.db)
    print_summary(rows, by, args.json)
    return 0


def run_quick(args: QuickArgs, progress: bool = True, threads: int | None = None) -> int:
    """`specmoe bench quick`: build, write and run the suite of the arguments; print the summary."""
    from specmoe.bench.quick import build_quick_suite
    from specmoe.bench.suite_run import run_suite

    suite, path = build_quick_suite(args)
    print(f"suite written to {path}; rerun or edit it with `specmoe bench run {path} --db {args.db}`")
    rows = run_suite(suite, args.db, None, progress=progress, threads=threads)
    print_summary(rows)
    return 0


def run_demo(out: Path) -> int:
    """The quick suite on the trained zoo: summary, the run's account (a sentence per configuration,
    the batch sweep) and the study audit printed; results and report under out.

    The trained family is built on first use into the per-user cache (`default_zoo_dir`), about
    four minutes of training on one CPU core, and reused by every later demo.
    """
    from specmoe.bench.store import export
    from specmoe.bench.suite_load import builtin_suite_path, load_suite
    from specmoe.bench.suite_run import run_suite

    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    suite = load_suite(builtin_suite_path("quick"))
    zoo = default_zoo_dir(suite.zoo_preset, suite.zoo_seed)
    if not (zoo / "zoo.json").is_file():
        log.info("building the %s zoo into %s (first run only; minutes of training)", suite.zoo_preset, zoo)
    prepare_zoo(suite, zoo, progress=log.info)
    db = out / "results.db"
    # One thread: the trained zoo's models are too small to gain from a second, and one thread
    # measures the same on an idle machine and beside one busy core (the noise guard flags the rest).
    rows = run_suite(suite, db, zoo, threads=1)
    print_summary(rows)
    print()
    print("\n".join(demo_story(rows, suite, zoo)))
    export(db, out / "results.csv", "csv")
    from specmoe.report import write_report

    report = write_report(db, out / "report")
    print(f"\nresults: {db}, {out / 'results.csv'}, {report} ({time.perf_counter() - started:.0f} s)")
    return 0


def demo_story(rows: Sequence[RunRow], suite, zoo: Path) -> list[str]:
    """The demo's account under its summary (`specmoe.bench.story`), MoESD's batch series from the
    shipped bench-zoo results, and the audit of the study's published rows in one line; the last
    two when the source tree holds their files."""
    from specmoe.audit.foreign import audit_csv
    from specmoe.bench.shipped import MOESD_ROWS, STUDY_ROWS
    from specmoe.bench.story import audit_line, story_lines
    from specmoe.zoo.manifest import load_manifest

    shapes = load_manifest(zoo)["models"]
    experts = {
        name: (shapes[m.zoo]["experts"], shapes[m.zoo]["top_k"])
        for name, m in suite.models.items()
        if m.zoo in shapes and shapes[m.zoo].get("experts")
    }
    lines = story_lines(rows, {g.name: g.description for g in suite.groups}, experts)
    lines += shipped_moesd_lines(MOESD_ROWS)
    where = "The study's published rows (`specmoe audit docs/results/study-runs.csv`)"
    if STUDY_ROWS.is_file():
        lines += ["", audit_line(audit_csv(STUDY_ROWS), where)]
    else:
        lines += ["", f"{where}: not found; they ship with the source tree"]
    return lines


def shipped_moesd_lines(path: Path) -> list[str]:
    """MoESD's batch series at γ = 4 from the shipped bench-zoo results, told as this run's are."""
    if not path.is_file():
        return []
    from specmoe.bench.story import accounts, batch_sweeps, sweep_sentence
    from specmoe.findings.results import read_export
    from specmoe.zoo.presets import get_preset

    rows = [r for r in read_export(path) if r.group == "batch" and r.config.get("gamma") in (0, 4)]
    bench = get_preset("bench").model("moe")
    sweeps = batch_sweeps(accounts(rows))
    return [
        "",
        "Shipped measurements, not this run (docs/results/cpu/findings/moesd.csv): MoESD's batch sweep on "
        f"the bench zoo ({bench.num_experts} experts, top-{bench.top_k}, about a GB), transformers on the "
        "reference CPU, 5 repeats:",
        *(f"  - {sweep_sentence(s, {'moe': (bench.num_experts, bench.top_k)})}" for s in sweeps),
    ]
