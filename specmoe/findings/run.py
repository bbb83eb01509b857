"""`specmoe findings`: run the plan's suites, export and report each, audit the study's own rows,
then write the numbers and the findings document from the exported files alone."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from specmoe.bench.suite_run import run_suite
from specmoe.bench.suite_zoo import prepare_zoo
from specmoe.errors import SpecmoeError
from specmoe.findings import mtp, wide
from specmoe.findings.checkout import is_shipped_findings
from specmoe.findings.plan import (
    ENGINE_PROFILES,
    LLAMACPP_THREADS,
    PASSES,
    PROFILES,
    Profile,
    Step,
    engine_setup,
    pass_step,
    plan,
)
from specmoe.results.store import export
from specmoe.suite.load import builtin_suite_path, load_suite

log = logging.getLogger(__name__)


def run_step(step: Step, out: Path, progress: bool = True) -> Path:
    """Measure one step into out/<name>.db (resuming), export out/<name>.csv; returns the CSV.

    A step whose export is in the results folder without its store (the repository ships exports,
    not stores) is kept as it is: measuring it again would replace shipped numbers. Delete the CSV
    to measure it anew.
    """
    out.mkdir(parents=True, exist_ok=True)
    suite = load_suite(builtin_suite_path(step.suite), step.overrides)
    db = out / f"{step.name}.db"
    csv_path = out / f"{step.name}.csv"
    if csv_path.is_file() and not db.is_file():
        log.info("kept the exported %s (no store to resume; delete it to measure again)", csv_path.name)
        return csv_path
    before = _stored(db)
    started = time.perf_counter()
    rows = run_suite(suite, db, prepare_zoo(suite, None), progress=progress, threads=step.threads)
    if len(rows) > before:
        add_wall_time(out, step.name, time.perf_counter() - started)
    export(db, csv_path, "csv")
    return csv_path


def report_step(step: Step, out: Path, fits: tuple[Path, ...] = (), profiles: tuple[Path, ...] = ()) -> Path:
    from specmoe.report import write_report

    if not (out / f"{step.name}.db").is_file():  # a kept export: its shipped report stays
        return out / "reports" / step.name
    return write_report(out / f"{step.name}.db", out / "reports" / step.name, profiles=profiles, fits=fits)


def run_findings(
    scale: str, out: Path, doc: Path, progress: bool = True, engines: tuple[str, ...] = ()
) -> int:
    """Measure the plan's steps (only those of `engines` when named), profile, report, write `doc`."""
    from specmoe.findings.document import write_document
    from specmoe.findings.rules import record_rules

    steps = plan(scale, engines)  # an unknown scale or engine fails before anything runs
    for step in steps:
        if step.name in PASSES:
            _check_predicted(out, step.name)
    started = time.perf_counter()
    for step in steps:
        log.info("== %s: suite %s", step.name, step.suite)
        if not _kept(step, out):
            record_rules(out, step.name)  # refuses a pass measured under other rules
        run_step(step, out, progress)
    fits = run_profiles(out, engines)
    for step in steps:
        # The moesd report draws the fitted model's curves beside the measured speedup vs batch,
        # and the MoE's activated experts beside N(n).
        if step.name == "moesd":  # the transformers fits; llama.cpp's report shows its runs alone
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


def _kept(step: Step, out: Path) -> bool:
    """A step whose export ships without its store: `run_step` keeps it and measures nothing."""
    return (out / f"{step.name}.csv").is_file() and not (out / f"{step.name}.db").is_file()


def _check_predicted(out: Path, name: str) -> None:
    from specmoe.findings.wide_predictions import predictions_path

    if not predictions_path(out, name).is_file() and not (out / f"{name}.csv").is_file():
        raise SpecmoeError(
            f"{predictions_path(out, name)} is missing: the {name} pass is measured only after the "
            f"performance model has predicted it; run `specmoe findings --pass {name} --predict` first "
            "(and commit the file before measuring)"
        )


def _smoke_apart(out: Path, smoke: bool) -> None:
    if smoke and is_shipped_findings(out):
        raise SpecmoeError(f"{out} holds the shipped findings; a smoke run goes to another --out (and --doc)")


def run_pass(name: str, out: Path, doc: Path, smoke: bool = False, progress: bool = True) -> int:
    """Measure one pass alone (`plan.PASSES`): its zoo, its runs, its report and the findings
    document, after its predictions and with its rules recorded first; prints the wall time."""
    from specmoe.bench.suite_zoo import prepare_zoo as build
    from specmoe.findings.document import write_document
    from specmoe.findings.rules import record_rules

    step = pass_step(name, smoke)
    _smoke_apart(out, smoke)
    started = time.perf_counter()
    _check_predicted(out, step.name)
    if not _kept(step, out):
        record_rules(out, step.name)
    build(load_suite(builtin_suite_path(step.suite), step.overrides), None, log.info)
    built = time.perf_counter()
    run_step(step, out, progress)
    measured = time.perf_counter()
    report_step(step, out)
    reported = time.perf_counter()
    # Recorded before the document is written, so the document (and a later --render-only) shows it.
    wall = {"zoo_s": built - started, "measure_s": measured - built, "report_s": reported - measured}
    add_pass_wall(out, step.name, {**wall, "total_s": reported - started})
    write_document(out, doc)
    done = time.perf_counter()
    print(
        f"\n{step.name}: {(done - started) / 60:.1f} min wall this call (zoo {wall['zoo_s']:.0f} s, "
        f"measuring {wall['measure_s'] / 60:.1f} min, report {wall['report_s']:.0f} s, document "
        f"{done - reported:.0f} s); findings: {doc}"
    )
    return 0


def predict_pass(name: str, out: Path, hardware_file: Path | None = None, smoke: bool = False) -> int:
    """The performance model's prediction of every cell of a pass, before it runs: from `hardware_file`
    or a probe of this machine now (written beside the results), into `<step>-predictions.json`."""
    from specmoe.findings.wide_predictions import (
        hardware_path,
        probe_hardware,
        refuse_after_runs,
        write_predictions,
    )

    step = pass_step(name, smoke)
    _smoke_apart(out, smoke)
    suite = load_suite(builtin_suite_path(step.suite), step.overrides)
    # A given file is checked before the output folder exists: a FIFO, a folder or a broken file is
    # refused in one line and leaves nothing behind.
    hardware = None if hardware_file is None else _hardware_file(Path(hardware_file))
    out.mkdir(parents=True, exist_ok=True)
    refuse_after_runs(out, step.name)  # before the probe
    if hardware is None:
        log.info("probing this machine's read bandwidth and matmul rate (two threads, as `specmoe demo`)")
        hardware = probe_hardware()
        hardware_file = hardware_path(out, step.name)
        hardware_file.write_text(json.dumps(hardware, indent=1) + "\n", encoding="utf-8")
    price, read = _PRICERS[step.name]()
    cells = price(suite, hardware, str(hardware_file))
    verdicts = read(cells)
    path = write_predictions(out, step.name, cells, hardware, Path(hardware_file).name, verdicts)
    print(f"wrote {path} ({len(cells)} SD configurations priced from {Path(hardware_file).name}): {verdicts}")
    return 0


def _hardware_file(path: Path) -> dict:
    """A `specmoe hw` file's JSON, after the hardware loader's one-line checks (a regular file,
    UTF-8 JSON, rates a device can have)."""
    from specmoe.perf.hardware import load_hardware
    from specmoe.user_files import read_user_text

    load_hardware(path)
    return json.loads(read_user_text(path))


def _wide_pricer():
    from specmoe.findings.wide_doc import predicted_verdicts
    from specmoe.findings.wide_predictions import predict_step, predicted

    return predict_step, lambda cells: predicted_verdicts(predicted({"cells": cells}))


def _mtp_pricer():
    from specmoe.findings.mtp_predictions import mtp_predicted_verdicts, predict_mtp_step

    return predict_mtp_step, mtp_predicted_verdicts


# Per pass: how its cells are priced before it runs, and what its rules read on the point predictions.
_PRICERS = {wide.STEP: _wide_pricer, mtp.STEP: _mtp_pricer}


def add_pass_wall(out: Path, name: str, wall: dict[str, float]) -> None:
    """A pass's wall time per call of `run_pass` (zoo, measuring, report, and their total)."""
    path = out / f"{name}-wall.json"
    calls = json.loads(path.read_text(encoding="utf-8"))["calls"] if path.is_file() else []
    calls.append({k: round(v, 1) for k, v in wall.items()})
    path.write_text(json.dumps({"calls": calls}, indent=1) + "\n", encoding="utf-8")


def _stored(db: Path) -> int:
    from specmoe.results.store import Store

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


def run_profiles(out: Path, engines: tuple[str, ...] = ()) -> Path:
    """Profile and fit the bench models the predictions and cost ratios need (resuming: existing
    files are kept), only those of `engines` when named; returns the folder of the moesd fits."""
    from specmoe.bench.suite_zoo import default_zoo_dir
    from specmoe.perf.files import write_json
    from specmoe.zoo import build_zoo

    zoo = default_zoo_dir("bench", 0)
    build_zoo("bench", zoo, seed=0)
    if not (out / "hw.json").is_file():  # the bandwidth the regime checks hold steps against
        from specmoe.perf.hardware import measure_hardware

        write_json(out / "hw.json", measure_hardware("cpu"))
    if not (out / "hw-1thread.json").is_file():  # the floors, at the runs' one thread
        from specmoe.perf.hardware import measure_hardware

        write_json(out / "hw-1thread.json", measure_hardware("cpu", threads=1))
    hardware = json.loads((out / "hw.json").read_text(encoding="utf-8"))
    for spec in (*PROFILES, *ENGINE_PROFILES):
        if not engines or spec.engine in engines:
            profile_and_fit(spec, out, zoo, hardware)
    return out / "fits"


def profile_and_fit(spec: Profile, out: Path, zoo: Path, hardware: dict) -> None:
    """out/<folder>/<model>-<dtype>.json and its fit, unless they exist. A llama.cpp profile runs
    the zoo's GGUF export (made first, unmeasured); every profile runs one thread, as the study
    passes on the one core the measuring setup gives them."""
    from specmoe.perf.files import write_json
    from specmoe.perf.fit import fit_profile
    from specmoe.perf.profile import profile_model
    from specmoe.zoo import resolve_model

    profile_path = out / spec.folder / f"{spec.name}.json"
    if not profile_path.is_file():
        if engine_setup(spec.engine).backend_info.reads_file:
            from specmoe.zoo.gguf import zoo_gguf

            model, dtype = zoo_gguf(zoo, spec.model, spec.dtype), None
        else:
            model, dtype = resolve_model(spec.model, zoo), spec.dtype
        log.info("== profile %s/%s", spec.folder, spec.name)
        started = time.perf_counter()
        profile = profile_model(
            model,
            list(spec.batches),
            list(spec.tokens),
            context=spec.context,
            dtype=dtype,
            repeats=spec.repeats,
            passes=spec.passes,
            progress=log.info,
            threads=LLAMACPP_THREADS,
            hardware=hardware,
        )
        profile["model"]["path"] = f"<zoo>/{Path(model).relative_to(zoo)}"  # no machine paths shipped
        write_json(profile_path, profile)
        add_wall_time(out, "profiles", time.perf_counter() - started)
    fit_path = out / spec.fits_folder / f"{spec.name}.json"
    if not fit_path.is_file():
        write_json(fit_path, fit_profile(json.loads(profile_path.read_text()), where=str(profile_path)))
