"""`specmoe findings`: run the plan's suites, export and report each, audit the study's own rows,
then write the numbers and the findings document from the exported files alone."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from specmoe.bench.cli import prepare_zoo
from specmoe.bench.runner import run_suite
from specmoe.bench.store import export
from specmoe.bench.suite import builtin_suite_path, load_suite
from specmoe.findings.plan import PROFILES, Step, plan

log = logging.getLogger(__name__)


def run_step(step: Step, out: Path, progress: bool = True) -> Path:
    """Measure one step into out/<name>.db (resuming), export out/<name>.csv; returns the CSV."""
    out.mkdir(parents=True, exist_ok=True)
    suite = load_suite(builtin_suite_path(step.suite), step.overrides)
    db = out / f"{step.name}.db"
    before = _stored(db)
    started = time.perf_counter()
    rows = run_suite(suite, db, prepare_zoo(suite, None), progress=progress)
    if len(rows) > before:
        add_wall_time(out, step.name, time.perf_counter() - started)
    csv_path = out / f"{step.name}.csv"
    export(db, csv_path, "csv")
    return csv_path


def report_step(step: Step, out: Path, fits: tuple[Path, ...] = (), profiles: tuple[Path, ...] = ()) -> Path:
    from specmoe.report import write_report

    return write_report(out / f"{step.name}.db", out / "reports" / step.name, profiles=profiles, fits=fits)


def run_findings(scale: str, out: Path, doc: Path, progress: bool = True) -> int:
    from specmoe.findings.document import write_document

    plan(scale)  # an unknown scale fails before anything runs
    started = time.perf_counter()
    for step in plan(scale):
        log.info("== %s: suite %s", step.name, step.suite)
        run_step(step, out, progress)
    fits = run_profiles(out)
    for step in plan(scale):
        # The moesd report draws the fitted model's curves beside the measured speedup vs batch,
        # and the MoE's activated experts beside N(n).
        if step.suite == "moesd":
            report_step(
                step,
                out,
                tuple(sorted(fits.glob("*.json"))),
                tuple(sorted((out / "profiles").glob("*.json"))),
            )
        else:
            report_step(step, out)
    write_document(out, doc)
    print(f"\nfindings: {doc} from {out} ({(time.perf_counter() - started) / 60:.1f} min this call)")
    return 0


def _stored(db: Path) -> int:
    from specmoe.bench.store import Store

    if not db.is_file():
        return 0
    with Store(db) as store:
        return len(store)


def add_wall_time(out: Path, name: str, seconds: float) -> None:
    """Measurement time per step, summed over the calls that measured something (runs resume)."""
    path = out / "wall_time.json"
    wall = json.loads(path.read_text()) if path.is_file() else {}
    wall[name] = round(wall.get(name, 0.0) + seconds, 1)
    path.write_text(json.dumps(wall, indent=1) + "\n")


def run_profiles(out: Path) -> Path:
    """Profile and fit the bench models the predictions need (resuming: existing files are kept);
    returns the folder of fits and draft profiles."""
    from specmoe.bench.cli import default_zoo_dir
    from specmoe.perf.files import write_json
    from specmoe.perf.fit import fit_profile
    from specmoe.perf.profile import profile_model
    from specmoe.zoo import build_zoo, resolve_model

    zoo = default_zoo_dir("bench", 0)
    build_zoo("bench", zoo, seed=0)
    if not (out / "hw.json").is_file():  # the bandwidth the regime checks hold steps against
        from specmoe.perf.hardware import measure_hardware

        write_json(out / "hw.json", measure_hardware("cpu"))
    fits = out / "fits"
    for spec in PROFILES:
        profile_path = out / "profiles" / f"{spec.name}.json"
        if not profile_path.is_file():
            log.info("== profile %s", spec.name)
            started = time.perf_counter()
            profile = profile_model(
                resolve_model(spec.model, zoo),
                list(spec.batches),
                list(spec.tokens),
                context=spec.context,
                dtype=spec.dtype,
                repeats=spec.repeats,
                progress=log.info,
            )
            write_json(profile_path, profile)
            add_wall_time(out, "profiles", time.perf_counter() - started)
        fit_path = fits / f"{spec.name}.json"
        if not fit_path.is_file():
            write_json(fit_path, fit_profile(json.loads(profile_path.read_text()), where=str(profile_path)))
    return fits
