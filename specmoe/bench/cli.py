"""`specmoe bench run`, `specmoe bench quick` and `specmoe demo`: the harness's command-line entry points."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from specmoe.bench.executors import Executor
from specmoe.bench.overrides import SuiteOverrides
from specmoe.bench.quick import QuickArgs, build_quick_suite
from specmoe.bench.runner import run_suite
from specmoe.bench.store import export
from specmoe.bench.suite import builtin_suite_path, load_suite, resolve_suite_path
from specmoe.bench.summary import format_summary


def default_zoo_dir(preset: str, seed: int) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "specmoe" / "zoo" / f"{preset}-seed{seed}"


def prepare_zoo(suite, zoo: Path | None, progress: Callable[[str], None] | None = None) -> Path | None:
    """Build the suite's zoo if it names zoo models; a complete build is reused."""
    if not any(m.zoo for m in suite.models.values()):
        return zoo
    from specmoe.zoo import build_zoo

    zoo = zoo or default_zoo_dir(suite.zoo_preset, suite.zoo_seed)
    build_zoo(suite.zoo_preset, zoo, seed=suite.zoo_seed, progress=progress)
    return zoo


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
    suite = load_suite(resolve_suite_path(suite_arg), overrides)
    zoo = prepare_zoo(suite, zoo)
    rows = run_suite(suite, db, zoo, progress=progress, executor=executor, threads=threads)
    print(format_summary(rows, by_category))
    return 0


def run_quick(args: QuickArgs, progress: bool = True, threads: int | None = None) -> int:
    """`specmoe bench quick`: build, write and run the suite of the arguments; print the summary."""
    suite, path = build_quick_suite(args)
    print(f"suite written to {path}; rerun or edit it with `specmoe bench run {path} --db {args.db}`")
    rows = run_suite(suite, args.db, None, progress=progress, threads=threads)
    print(format_summary(rows))
    return 0


def run_demo(out: Path) -> int:
    """The quick suite on the trained zoo: summary and audit printed, results and report under out.

    The trained family is built on first use into the per-user cache (`default_zoo_dir`), about
    four minutes of training on one CPU core, and reused by every later demo.
    """
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    suite = load_suite(builtin_suite_path("quick"))
    zoo = default_zoo_dir(suite.zoo_preset, suite.zoo_seed)
    if not (zoo / "zoo.json").is_file():
        print(
            f"building the {suite.zoo_preset} zoo into {zoo} (first run only; minutes of training)",
            flush=True,
        )
    prepare_zoo(suite, zoo, progress=lambda line: print(f"  {line}", flush=True))
    db = out / "results.db"
    # One thread: the trained zoo's models are too small to gain from a second, and one thread
    # measures the same on an idle machine and beside one busy core (the noise guard flags the rest).
    rows = run_suite(suite, db, zoo, threads=1)
    print(format_summary(rows))
    export(db, out / "results.csv", "csv")
    from specmoe.report import write_report

    report = write_report(db, out / "report")
    print(f"\nresults: {db}, {out / 'results.csv'}, {report} ({time.perf_counter() - started:.0f} s)")
    return 0
