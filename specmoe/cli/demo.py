"""`specmoe demo`: the quick suite on the trained zoo, its summary, an account of why SD pays or loses
in each configuration, and the study audit; results and report written under one folder."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from specmoe.cli.summary import print_summary

if TYPE_CHECKING:
    from specmoe.bench.store import RunRow

log = logging.getLogger(__name__)


def add_demo(commands) -> None:
    p = commands.add_parser(
        "demo",
        help="train the zoo (first run), run the quick suite, print the summary, why SD pays or loses "
        "in each configuration, and the study audit",
    )
    p.add_argument("--out", type=Path, default=Path("specmoe-demo"), help="folder for results and report")
    p.set_defaults(run=run_demo)


def run_demo(args) -> int:
    """The quick suite on the trained zoo: summary, the run's account (a sentence per configuration,
    the batch sweep) and the study audit printed; results and report under --out.

    The trained family is built on first use into the per-user cache (`default_zoo_dir`), about
    four minutes of training on one CPU core, and reused by every later demo.
    """
    from specmoe.bench.store import export
    from specmoe.bench.suite_load import builtin_suite_path, load_suite
    from specmoe.bench.suite_run import run_suite
    from specmoe.bench.suite_zoo import default_zoo_dir, prepare_zoo

    out = args.out
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
