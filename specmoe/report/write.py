"""`write_report`: a results store in, a folder with report.html, figures and CSV tables out.

Layout of the output folder (copy the whole folder to share the report; the page links the rest
by relative path and loads nothing from elsewhere):

    report.html
    figures/<view>.png, figures/<view>.svg
    tables/<table>.csv

Files are overwritten in place; files of views a previous report drew but this one omits are left.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import matplotlib

from specmoe.canonical import json_value
from specmoe.errors import SpecmoeError
from specmoe.perf.advise import FIT_WARNING
from specmoe.perf.fit import fit_error, load_fit
from specmoe.report.explain_figures import EXPLAIN_FIGURES
from specmoe.report.figures import RC_PARAMS, Drawn, Omitted, Outcome, save_figure
from specmoe.report.gamma_batch import gamma_batch_heatmap, gamma_batch_table
from specmoe.report.html import FigureEntry, Page, TableEntry, render
from specmoe.report.modelled import unmatched_fit
from specmoe.report.moesd_figures import MOESD_FIGURES
from specmoe.report.results import Results, collect
from specmoe.report.runinfo import (
    environments,
    failed_runs,
    noise_state,
    noisy_reason,
    shared_settings,
    suites,
)
from specmoe.report.served import serving_table
from specmoe.report.serving_figures import SERVING_FIGURES
from specmoe.report.slices import varying_axes
from specmoe.report.study_figures import STUDY_FIGURES
from specmoe.report.tables import TABLES, write_csv
from specmoe.report.timing_figures import TIMING_FIGURES
from specmoe.report.timing_tables import decode_split_table, prompt_phase_table
from specmoe.results.store import Store

log = logging.getLogger(__name__)
REPORT_NAME = "report.html"
FIGURES_DIR = "figures"
TABLES_DIR = "tables"


def write_report(db: Path, out: Path, profiles: Sequence[Path] = (), fits: Sequence[Path] = ()) -> Path:
    """Render the store at `db` into the folder `out` (created if needed); returns report.html's path.

    `profiles` are `specmoe profile` outputs; MoE ones add the activated-experts view. `fits` are
    `specmoe model fit` outputs; a target's fit (and its draft's) add model curves to speedup vs batch
    and the performance model's pick of γ to the γ × batch-size heatmap.
    """
    db, out = Path(db), Path(out)
    if not db.is_file():
        raise SpecmoeError(
            f"results store not found: {db}; run `specmoe bench run` first or pass the right --db"
        )
    with Store(db) as store:
        rows = store.rows()
    if not rows:
        raise SpecmoeError(f"{db}: the results store holds no runs; run a suite into it first")
    if out.exists() and not out.is_dir():
        raise SpecmoeError(f"--out {out} is a file; pass a folder for the report")
    for sub in (FIGURES_DIR, TABLES_DIR):
        (out / sub).mkdir(parents=True, exist_ok=True)
    results = replace(
        collect(rows),
        profiles=tuple(_load_profile(Path(p)) for p in profiles),
        fits=tuple(_load_fit(Path(f)) for f in fits),
    )
    for path, (name, dtype, _) in zip(fits, results.fits, strict=True):
        if why := unmatched_fit(name, dtype, [r.settings for r in rows]):
            log.warning("--fit %s draws no model curve: %s", path, why)
        if (error := fit_error(load_fit(Path(path)))) > FIT_WARNING:
            log.warning(
                "--fit %s misses its own held-out points by a median %.0f%%: its model curves carry that "
                "error (profile more points, or on a quieter machine)",
                path,
                100 * error,
            )
    omitted: list[Omitted] = []
    # A speedup beyond the physical bound is no measurement: the tables say "impossible", and no
    # figure plots it (one such point would also squash every other onto the axis).
    plotted = replace(results, sd=tuple(r for r in results.sd if not r.impossible))
    with matplotlib.rc_context(RC_PARAMS):
        study = _draw(STUDY_FIGURES, plotted, out, omitted)
        explain = _draw((*EXPLAIN_FIGURES, *TIMING_FIGURES, gamma_batch_heatmap), plotted, out, omitted)
        moesd = _draw(MOESD_FIGURES, plotted, out, omitted)
        serving = _draw(SERVING_FIGURES, plotted, out, omitted)
    tables = []
    for build in (*TABLES, decode_split_table, prompt_phase_table, gamma_batch_table, serving_table):
        table = build(results)
        if isinstance(table, Omitted):
            omitted.append(table)
        else:
            tables.append(TableEntry(table, _relative(write_csv(table, out / TABLES_DIR), out)))
    noise = noise_state(rows)
    omitted = [replace(o, reason=noisy_reason(o.reason, noise)) for o in omitted]
    page = Page(
        source=str(db),
        runs=len(rows),
        suites=tuple(suites(rows)),
        shared_settings=shared_settings(rows),
        study=study,
        explain=explain,
        tables=tuple(tables),
        moesd=moesd,
        serving=serving,
        failed=tuple(failed_runs(rows)),
        environments=tuple(environments(rows)),
        omitted=tuple(omitted),
        noise=noise,
        unstable=sum(1 for r in results.sd if r.unstable),
    )
    report = out / REPORT_NAME
    report.write_text(render(page), encoding="utf-8")
    return report


def _load_profile(path: Path) -> dict:
    try:
        profile = json_value(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecmoeError(f"--profile {path}: cannot read it as JSON ({err})") from None
    if not isinstance(profile, dict) or profile.get("kind") != "specmoe-profile":
        raise SpecmoeError(f"--profile {path}: not a `specmoe profile` output")
    return profile


def _load_fit(path: Path) -> tuple[str, str, object]:
    """(model name, dtype, its fitted times) from a `specmoe model fit` output."""
    from specmoe.perf.fit import load_fit
    from specmoe.perf.predict import fit_times

    fit = load_fit(path)
    return fit["model"]["name"], fit["model"].get("dtype", ""), fit_times(fit, str(path))


def _draw(builders, results: Results, out: Path, omitted: list[Omitted]) -> tuple[FigureEntry, ...]:
    varying = varying_axes(r.config for r in results.rows)
    entries = []
    for build in builders:
        outcome: Outcome = build(results, varying)
        if isinstance(outcome, Omitted):
            omitted.append(outcome)
            continue
        assert isinstance(outcome, Drawn)
        png, svg = save_figure(outcome, out / FIGURES_DIR)
        entries.append(FigureEntry(outcome.title, outcome.caption, _relative(png, out), _relative(svg, out)))
    return tuple(entries)


def _relative(path: Path, out: Path) -> str:
    return path.relative_to(out).as_posix()
