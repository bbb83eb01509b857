"""`specmoe calibrate`: the engine profiles against published SD measurements (`specmoe.calibration`).

fit        refit every engine's marked constants on all its rows, from the priors; --write puts
           them (and each band) into specmoe/perf/constants.toml; --intervals: how tightly the
           rows pin each one
heldout    leave-one-source-out: calibration.md and .json; or the source-resampled intervals on
           its medians, a fit variant's check, or the measured-step check
frozen     the shipped profiles on named sources they never saw
check      does constants.toml hold what a fit gives now? --steps: the plain step the profiles
           imply against the step rows measured
specbundle rows and checks from SpecForge's SpecBundle dashboard data
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specmoe.cli.options import path_arg, utf8_text

DEFAULT_OUT = "docs/results/calibration"


def add_calibrate(commands) -> None:
    parent = commands.add_parser(
        "calibrate",
        help="fit and score the engine profiles against published SD measurements",
        description="The engine profiles against published SD measurements (shipped with the package): "
        "fit their constants, score them held out by source, price unseen sources, check the shipped "
        "constants are the fit's. docs/perf-model.md, 'Calibration against published measurements'.",
    )
    parent.set_defaults(run=lambda args: parent.print_help() or 2)
    sub = parent.add_subparsers(title="calibrate")

    fit = sub.add_parser("fit", help="refit the engines' marked constants on every published row")
    _rows_options(fit)
    what = fit.add_mutually_exclusive_group()
    what.add_argument(
        "--write",
        action="store_true",
        help="write the fitted constants and bands into the shipped specmoe/perf/constants.toml",
    )
    what.add_argument(
        "--out", type=path_arg, default=None, help="write the updated constants.toml here instead"
    )
    what.add_argument(
        "--intervals",
        action="store_true",
        help="a 95%% profile-likelihood interval per fitted constant (about 15 minutes on 2 cores)",
    )
    fit.set_defaults(run=run_fit)

    heldout = sub.add_parser("heldout", help="each source's rows predicted from the other sources alone")
    _rows_options(heldout)
    heldout.add_argument(
        "--out",
        type=path_arg,
        default=None,
        help=f"write calibration.md and calibration.json here ({DEFAULT_OUT})",
    )
    mode = heldout.add_mutually_exclusive_group()
    mode.add_argument(
        "--intervals",
        nargs="?",
        const="",
        default=None,
        metavar="CALIBRATION_JSON",
        help="95%% BCa intervals resampling sources on the held-out medians, from a calibration.json "
        "(default: computed afresh)",
    )
    mode.add_argument(
        "--variant",
        choices=("soft-L1", "keep-priors"),
        default=None,
        help="a fit rule tested beside the shipped one (docs/results/calibration/*-rules.md)",
    )
    mode.add_argument(
        "--measured-step",
        action="store_true",
        help="the rows that measured a plain step, priced with and without it",
    )
    mode.add_argument(
        "--anchor-check",
        action="store_true",
        help="the rows with a measured plain step, without it and with it in each --step-form",
    )
    mode.add_argument(
        "--verdict-check",
        action="store_true",
        help="verdicts from the asymmetric held-out band beside the shipped rule, split strict / design-time",
    )
    heldout.set_defaults(run=run_heldout)

    frozen = sub.add_parser("frozen", help="the shipped profiles on sources nothing fitted has seen")
    _rows_options(frozen)
    frozen.add_argument(
        "--source", type=utf8_text, action="append", required=True, help="a new source, as the rows spell it"
    )
    frozen.add_argument(
        "--issue-threads",
        action="store_true",
        help="add the shipped rows the source rule keeps out of the table (issue-threads.csv)",
    )
    frozen.set_defaults(run=run_frozen)

    check = sub.add_parser("check", help="does constants.toml hold what `calibrate fit` gives now?")
    _rows_options(check)
    check.add_argument(
        "--steps",
        action="store_true",
        help="instead: the plain step the shipped profiles imply against the step rows measured",
    )
    check.set_defaults(run=run_check)

    bundle = sub.add_parser("specbundle", help="rows and checks from the SpecBundle dashboard's data.json")
    bundle.add_argument("data", type=path_arg, help="SpecForge's docs/spec_bundle/public/raw_data/data.json")
    bundle.add_argument(
        "--rule", choices=("primary", "sensitivity"), default="primary", help="GPU-count rule"
    )
    bundle.add_argument("--merge", type=path_arg, default=None, help="replace the dashboard rows of this CSV")
    bundle.add_argument(
        "--score-above-tau", action="store_true", help="score rows whose speedup exceeds τ (as first fixed)"
    )
    checks = bundle.add_mutually_exclusive_group()
    checks.add_argument("--gamma-check", action="store_true", help="print the γ-choice check")
    checks.add_argument("--tree-check", action="store_true", help="print the tree check")
    bundle.add_argument(
        "--data-rows", type=path_arg, default=None, help="rows CSV (default: the shipped table)"
    )
    bundle.set_defaults(run=run_specbundle)


def _rows_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data", type=path_arg, default=None, help="rows CSV (default: the shipped published table)"
    )
    p.add_argument(
        "--extra",
        type=path_arg,
        action="append",
        default=[],
        help="more rows, priced after the table (repeat)",
    )


def _inputs(args):
    from specmoe.calibration.catalog import ISSUE_THREADS as THREADS
    from specmoe.calibration.catalog import Catalog, data_file
    from specmoe.calibration.rows import load_measurements, parse_measurements
    from specmoe.perf.constants import load_constants
    from specmoe.perf.engines import load_engines

    catalog = Catalog.shipped() if args.data is None else Catalog.from_files(args.data)
    extra = [r for path in args.extra for r in load_measurements(path)]
    if getattr(args, "issue_threads", False):
        extra += parse_measurements(data_file(THREADS).read_bytes().decode("utf-8"), THREADS)
    if extra:
        catalog = catalog.with_rows([*catalog.rows, *extra])
    return catalog, load_engines(), load_constants()


def _print(lines: list[str]) -> None:
    print("\n".join(lines))


def run_fit(args) -> int:
    from specmoe.calibration.intervals import constant_intervals
    from specmoe.calibration.shipped import fit_lines, refit, updates
    from specmoe.perf.constants import SHIPPED, shipped_text, with_fitted

    catalog, engines, priors = _inputs(args)
    if args.intervals:
        _print(constant_intervals(catalog, engines, priors, lambda line: print(line, file=sys.stderr)))
        return 0
    result = refit(catalog, engines, priors)
    _print(fit_lines(result, priors))
    print(json.dumps(result.bands, indent=1))
    if args.write or args.out:
        from importlib import resources

        text = with_fitted(shipped_text(), updates(result, priors))
        target = args.out or Path(str(resources.files("specmoe.perf").joinpath(SHIPPED)))
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target}", file=sys.stderr)
    return 0


def run_heldout(args) -> int:
    from specmoe.calibration.report import evaluate, payload, report

    catalog, engines, priors = _inputs(args)
    if args.variant:
        from specmoe.calibration.variants import variant_check

        _print(variant_check(catalog, engines, priors, args.variant))
        return 0
    if args.anchor_check:
        from specmoe.calibration.steps import anchor_check

        _print(anchor_check(catalog, engines, priors))
        return 0
    if args.verdict_check:
        from specmoe.calibration.verdicts import verdict_check

        _print(verdict_check(catalog, engines, priors))
        return 0
    if args.measured_step:
        from specmoe.calibration.steps import measured_step_check

        _print(measured_step_check(catalog, engines, priors))
        return 0
    if args.intervals is not None:
        from specmoe.calibration.intervals import heldout_intervals

        if args.intervals:
            data = _read_json(Path(args.intervals), "a calibration.json (`calibrate heldout --out DIR`)")
        else:
            data = payload(catalog, evaluate(catalog, engines, priors), engines)
        _print(heldout_intervals(data))
        return 0
    from specmoe.calibration.fit import fit_all

    by_rule = evaluate(catalog, engines, priors)
    text = report(catalog, by_rule, engines, fit_all(catalog, engines, priors), priors)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "calibration.md").write_text(text, encoding="utf-8")
        data = json.dumps(payload(catalog, by_rule, engines), indent=1) + "\n"
        (args.out / "calibration.json").write_text(data, encoding="utf-8")
    return 0


def _read_json(path: Path, what: str) -> dict:
    from specmoe.canonical import json_value
    from specmoe.errors import SpecmoeError
    from specmoe.user_files import read_user_text

    try:
        data = json_value(read_user_text(path))
    except FileNotFoundError:
        raise SpecmoeError(f"'{path}' not found; pass {what}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SpecmoeError(f"'{path}' is not readable JSON ({err}); pass {what}") from None
    if not isinstance(data, dict):
        raise SpecmoeError(f"'{path}' holds no JSON object; pass {what}")
    return data


def run_frozen(args) -> int:
    from specmoe.calibration.frozen import frozen_test

    catalog, engines, _ = _inputs(args)
    _print(frozen_test(catalog, engines, args.source))
    return 0


def run_check(args) -> int:
    from specmoe.calibration.shipped import differences, refit, updates

    catalog, engines, priors = _inputs(args)
    if args.steps:
        from specmoe.calibration.steps import step_audit

        _print(step_audit(catalog, engines))
        return 0
    new = updates(refit(catalog, engines, priors), priors)
    stale = differences(new, priors)
    if stale:
        _print(stale)
        print(
            f"constants.toml is stale in {len(stale)} value(s); run `specmoe calibrate fit --write`",
            file=sys.stderr,
        )
        return 1
    print(
        f"constants.toml holds what the fit gives: {len(new)} fitted entries over {len(catalog.scored)} rows"
    )
    return 0


def run_specbundle(args) -> int:
    from specmoe.calibration import specbundle
    from specmoe.calibration.catalog import Catalog

    data = _read_json(args.data, "SpecForge's SpecBundle data.json")
    catalog = Catalog.shipped() if args.data_rows is None else Catalog.from_files(args.data_rows)
    if args.tree_check:
        _print(specbundle.tree_check(data, catalog))
        return 0
    if args.gamma_check:
        _print(specbundle.gamma_check(data, catalog))
        return 0
    new = specbundle.rows(data, args.rule, catalog, not args.score_above_tau)
    if args.merge:
        specbundle.merge(args.merge, new)
    else:
        sys.stdout.write(specbundle.as_csv(new))
    return 0
