"""`specmoe demo`: where speculative decoding pays on this machine and where it loses, measured.

Two shipped suites into one store: `quick` (the MoE SD study's regime on a small trained family:
real acceptance, SD losing) and `wide` (MoESD's regime on bandwidth-bound random-weight models with
oracle drafts, where the performance model expects SD to pay). Before measuring, the demo reads this
machine's memory bandwidth and matmul rate and prints what the model expects of each configuration;
after, the result table, a sentence per configuration, a closing paragraph that answers the two
studies in this run's numbers beside those predictions, and the audit of the study's rows.

Both families are built on first use into the per-user cache; the trained one trains (about a
minute on one core) while the wide one is written beside it on the other core. Nothing is measured
while anything builds: a busy core would move the timings.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from specmoe.cli.options import path_arg
from specmoe.cli.summary import print_summary

log = logging.getLogger(__name__)

DEMO_SUITES = ("quick", "wide")
# `--quick`: the wide suite alone with fewer units, no training. Batch 16 decodes half the tokens
# (16 sequences a run keep its mean steady); batch 1 keeps 32, since with 16 a truncated last
# round is a large share of an SD run and moved the dense model's speedup from about 1.45x to 1.13x.
QUICK_SETTINGS = (
    ("small-batch.prompts", 5),
    ("medium-batch.repeats", 2),
    ("medium-batch.max_new_tokens", 16),
)
PROBE_THREADS = 2  # the engine profiles' bandwidth shares are of a two-thread read (perf/engines.toml)


def add_demo(commands) -> None:
    p = commands.add_parser(
        "demo",
        help="where SD pays and where it loses on this machine: predictions, then measurements, why "
        "each configuration paid or lost, and the study audit (about 3 minutes the first time)",
    )
    p.add_argument("--out", type=path_arg, default=Path("specmoe-demo"), help="folder for the results")
    p.add_argument(
        "--quick",
        action="store_true",
        help="the bandwidth-bound suite alone with fewer repeats and no training: about a minute",
    )
    p.add_argument(
        "--report", action="store_true", help="also write the HTML report with its figures (seconds more)"
    )
    p.set_defaults(run=run_demo)


def demo_suites(quick: bool) -> list:
    """The suites the demo runs, loaded: both, or with `quick` the wide one shortened."""
    from specmoe.suite.load import builtin_suite_path, load_suite
    from specmoe.suite.overrides import SuiteOverrides

    if quick:
        return [load_suite(builtin_suite_path("wide"), SuiteOverrides(settings=QUICK_SETTINGS))]
    return [load_suite(builtin_suite_path(name)) for name in DEMO_SUITES]


def prepare_zoos(suites: list) -> list[Path]:
    """Each suite's zoo in the per-user cache, built at once where missing: a trained family's
    training holds one core, so a random-weight family is written on the other meanwhile."""
    from specmoe.bench.suite_zoo import prepare_zoo
    from specmoe.zoo.cache import default_zoo_dir

    for suite in suites:
        zoo = default_zoo_dir(suite.zoo_preset, suite.zoo_seed)
        if not (zoo / "zoo.json").is_file():
            log.info("building the %s zoo into %s (first run only)", suite.zoo_preset, zoo)
    # The first (the trained family, in the full demo) in this thread, so that Ctrl-C stops its
    # training at once; the others beside it, seconds each.
    with ThreadPoolExecutor(max_workers=max(1, len(suites) - 1)) as pool:
        others = [pool.submit(prepare_zoo, suite, None, log.info) for suite in suites[1:]]
        first = prepare_zoo(suites[0], None, log.info)
        return [first, *(future.result() for future in others)]


def probe_hardware(out: Path):
    """This machine's read bandwidth and float32 matmul rate, as `specmoe hw` measures them (two
    threads, the engine profiles' reference), written to out/hw.json for `specmoe advise`."""
    import os

    from specmoe.perf.hardware import measure_hardware, parse_hardware

    threads = max(1, min(PROBE_THREADS, os.cpu_count() or 1))
    data = measure_hardware("cpu", read_mib=512, repeats=5, dtypes=("float32",), threads=threads)
    (out / "hw.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return parse_hardware(data, str(out / "hw.json")), threads


def run_demo(args) -> int:
    """Predictions, measurements, the summary, the account and the closing paragraph; results under
    --out (results.db, results.csv, hw.json, and with --report the report)."""
    from specmoe.bench.noise import machine_load
    from specmoe.bench.suite_run import run_suite
    from specmoe.report.demo_story import demo_story, prediction_lines
    from specmoe.report.predicted import predict_suite
    from specmoe.results.store import export
    from specmoe.suite.expand import expand

    out = args.out
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    suites = demo_suites(args.quick)
    zoos = prepare_zoos(suites)
    built = time.perf_counter()
    busy = machine_load().other_cpu  # the probe reads low beside other work: say so with its rates
    hardware, threads = probe_hardware(out)
    predictions = {k: p for s in suites for k, p in predict_suite(expand(s), hardware).items()}
    print("\n".join(prediction_lines(predictions, hardware, threads, busy)), flush=True)
    db = out / "results.db"
    # One thread: one thread measures the same on an idle machine and beside one busy core (the
    # noise guard flags the rest), and the engine profiles describe one-thread forwards.
    rows = [
        row for suite, zoo in zip(suites, zoos, strict=True) for row in run_suite(suite, db, zoo, threads=1)
    ]
    measured = time.perf_counter()
    print()
    print_summary(rows, keep_noisy=True)
    print()
    print("\n".join(demo_story(rows, suites, zoos, predictions)))
    export(db, out / "results.csv", "csv")
    written = [str(db), str(out / "results.csv"), str(out / "hw.json")]
    if args.report:
        from specmoe.report import write_report

        written.append(str(write_report(db, out / "report")))
    else:
        print(f"\nfigures and tables: specmoe bench report --db {db} --out {out / 'report'}")
    total = time.perf_counter() - started
    took = f"{total:.0f} s: zoos {built - started:.0f} s, measuring {measured - built:.0f} s"
    print(f"\nresults: {', '.join(written)} ({took})")
    return 0
