"""Score `specmoe advise --config`'s predictions against published SD measurements.

Every row of docs/results/calibration/published.csv is one measured speedup from a paper or an
engine's documentation, with the setup it was measured in (target, drafter, weight format, GPU,
engine, batch size, draft length or tree) and, where the source reports it, the acceptance. Each is
priced from configs, a hardware file and an engine profile alone, as a user's question would be:

    reported   the source reports the acceptance (τ, rate or α): the prediction uses it
    anchored   a batch-size sweep that reports no acceptance: the acceptance is the one at which the
               model reproduces the sweep's smallest batch (its "anchor" row), and the other batch
               sizes are predicted with it. These rows test how the speedup moves with batch size
               (MoESD's question); the anchor itself is exact by construction and not scored.
    excluded   left out, each with its reason (no acceptance and no sweep, a method the model does
               not price, not lossless, configuration unknown)

The error of a row is the factor max(predicted/measured, measured/predicted); go/no-go agrees when
both are on the same side of 1× (rows measured within 0.95–1.05 are listed but not counted).

    python benchmarks/calibration.py                      # the shipped profiles: the error table
    python benchmarks/calibration.py --fit sglang vllm hf-eager   # least-squares engine constants
    python benchmarks/calibration.py --out docs/results/calibration

--fit fits layer_s, round_s and the default compute share of each named engine to its rows (log
errors, scipy least squares), prints them, and reports leave-one-group-out errors: each group of
rows from one table or page is predicted from constants fitted without it. The shipped profiles
hold the fitted values; the in-sample table is therefore a calibration, and the held-out column is
the figure to quote for a setup the profiles have not seen.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.perf.breakeven import AcceptanceKind, Verdict, acceptance, breakeven_alpha, verdict  # noqa: E402
from specmoe.perf.drafts import DraftMethod  # noqa: E402
from specmoe.perf.engines import EngineProfile, load_engines  # noqa: E402
from specmoe.perf.firstprinciples import load_config  # noqa: E402
from specmoe.perf.hardware import load_hardware  # noqa: E402
from specmoe.perf.setup import configured_setup  # noqa: E402

DATA = ROOT / "docs" / "results" / "calibration" / "published.csv"
EXAMPLES = ROOT / "docs" / "perf-examples"
# what each engine's rows can pin down: batch sweeps show per-sequence host cost, batch-1 rows do not
FITTED = {
    "hf-eager": ("round_s", "compute"),
    "sglang": ("round_s", "round_seq_s", "compute"),
    "vllm": ("round_s", "round_seq_s", "compute"),
}


@dataclass(frozen=True)
class Row:
    data: dict

    def __getattr__(self, key):
        return self.data[key]

    @property
    def group(self) -> str:
        return f"{self.data['source']} / {self.data['where']}"

    def int(self, key: str, default: int | None = None) -> int | None:
        value = self.data[key]
        return int(value) if value else default


def load_rows(path: Path = DATA) -> list[Row]:
    with open(path, newline="", encoding="utf-8") as f:
        return [Row(r) for r in csv.DictReader(f)]


def _setup(row: Row, engine: EngineProfile):
    target = load_config(EXAMPLES / f"{row.target}.json", row.target_dtype or None)
    method = DraftMethod.parse(row.method)
    draft = None
    if method is DraftMethod.MODEL:
        draft = load_config(EXAMPLES / f"{row.draft}.json", row.draft_dtype or None)
    hardware = load_hardware(EXAMPLES / f"{row.hardware}.json")
    gamma = row.int("gamma")
    return configured_setup(
        target,
        hardware,
        engine,
        method,
        draft,
        context=float(row.context or 512),
        gamma_for_heads=gamma,
        tree_tokens=row.int("verify_tokens"),
        tree_width=row.int("tree_width", 1),
    )


def _speedup_fn(row: Row, engine: EngineProfile):
    setup = _setup(row, engine)
    gamma, batch = row.int("gamma"), row.int("batch", 1)
    return lambda alpha: setup.speedup(alpha, gamma, batch)


def _anchor_alpha(anchor: Row, engine: EngineProfile) -> float:
    """The α at which the model reproduces the anchor row's measured speedup (clipped to [0, 1])."""
    speedup = _speedup_fn(anchor, engine)
    target = float(anchor.speedup)
    alpha = breakeven_alpha(lambda a: speedup(a) / target)
    return 1.0 if alpha is None else alpha


def predict(row: Row, engines: dict[str, EngineProfile], rows_by_id: dict[str, Row]) -> dict:
    engine = engines[row.engine]
    gamma = row.int("gamma")
    if row.role == "anchored":
        alpha = _anchor_alpha(rows_by_id[row.anchor], engine)
    else:
        alpha = acceptance(float(row.acceptance), AcceptanceKind(row.acceptance_kind), gamma, row.id).alpha
    speedup = _speedup_fn(row, engine)
    predicted = speedup(alpha)
    measured = float(row.speedup)
    factor = engine.uncertainty
    call = verdict(speedup(1.0) * factor, (predicted / factor, predicted * factor))
    return {
        "id": row.id,
        "role": row.role,
        "engine": row.engine,
        "group": row.group,
        "alpha": alpha,
        "measured": measured,
        "predicted": predicted,
        "error_factor": max(predicted / measured, measured / predicted),
        "log_error": math.log(predicted / measured),
        "verdict": call.value,
    }


def scored(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.role in ("reported", "anchored")]


# name: (bounds, scale); bounds keep each constant where published figures put it
PARAMETERS = {
    "round_s": ((0.0, 0.01), 1e-3),
    "compute": ((0.05, 1.0), 0.1),
    "layer_s": ((0.0, 0.001), 1e-4),
    "round_seq_s": ((0.0, 0.001), 1e-4),
}


def _get(engine: EngineProfile, name: str) -> float:
    return engine.compute_efficiency.get("default", 1.0) if name == "compute" else getattr(engine, name)


def _with(engine: EngineProfile, names: tuple[str, ...], theta) -> EngineProfile:
    update = {}
    for name, value in zip(names, theta, strict=True):
        if name == "compute":
            update["compute_efficiency"] = {**engine.compute_efficiency, "default": float(value)}
        else:
            update[name] = float(value)
    return engine.model_copy(update=update)


def fit_engine(
    name: str, rows: list[Row], engines: dict, rows_by_id: dict, params: tuple[str, ...]
) -> EngineProfile:
    """Least-squares `params` of one engine on its `rows` (log errors), within PARAMETERS' bounds."""
    base = engines[name]
    mine = [r for r in rows if r.engine == name]
    low, high = zip(*(PARAMETERS[p][0] for p in params), strict=True)
    start = np.clip([_get(base, p) for p in params], low, high)

    def residuals(theta):
        trial = {**engines, name: _with(base, params, theta)}
        return [predict(r, trial, rows_by_id)["log_error"] for r in mine]

    result = least_squares(residuals, start, bounds=(low, high), x_scale=[PARAMETERS[p][1] for p in params])
    return _with(base, params, result.x)


def summary(results: list[dict]) -> dict:
    errors = [r["error_factor"] for r in results]
    decided = [r for r in results if not 0.95 <= r["measured"] <= 1.05]
    agree = [r for r in decided if (r["predicted"] >= 1) == (r["measured"] >= 1)]
    return {
        "rows": len(results),
        "median_error_factor": statistics.median(errors) if errors else None,
        "worst_error_factor": max(errors) if errors else None,
        "within_1.25": sum(e <= 1.25 for e in errors),
        "go_no_go_decided": len(decided),
        "go_no_go_agree": len(agree),
        "above_measured": sum(r["predicted"] > r["measured"] for r in results),
    }


def evaluate(rows: list[Row], engines: dict) -> list[dict]:
    by_id = {r.id: r for r in rows}
    return [predict(r, engines, by_id) for r in scored(rows)]


def leave_group_out(
    rows: list[Row], engines: dict, names: list[str], params: dict | None = None
) -> list[dict]:
    """Each group of an engine's rows predicted from that engine's constants fitted without it."""
    by_id = {r.id: r for r in rows}
    out = []
    for name in names:
        mine = [r for r in scored(rows) if r.engine == name]
        for group in sorted({r.group for r in mine}):
            train = [r for r in mine if r.group != group]
            held = [r for r in mine if r.group == group]
            chosen = (params or FITTED)[name]
            fitted = {**engines, name: fit_engine(name, train, engines, by_id, chosen)} if train else engines
            out += [predict(r, fitted, by_id) | {"held_out": True} for r in held]
    return out


def _table(results: list[dict]) -> list[str]:
    lines = [
        "| row | engine | role | measured | predicted | error factor | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(results, key=lambda r: (r["engine"], r["group"], r["id"])):
        lines.append(
            f"| {r['id']} | {r['engine']} | {r['role']} | {r['measured']:.2f} | {r['predicted']:.2f} | "
            f"{r['error_factor']:.2f} | {r['verdict']} |"
        )
    return lines


def _summary_line(label: str, s: dict) -> str:
    return (
        f"| {label} | {s['rows']} | {s['median_error_factor']:.2f} | {s['worst_error_factor']:.2f} | "
        f"{s['within_1.25']} | {s['go_no_go_agree']} of {s['go_no_go_decided']} | {s['above_measured']} |"
    )


def _outcome(measured: float) -> str:
    return "paid (> 1.05x)" if measured > 1.05 else "did not (< 0.95x)" if measured < 0.95 else "even"


def _verdicts(results: list[dict]) -> list[str]:
    """advise's verdict on each row (the stated acceptance being the row's, the band the engine's)
    against what the row measured."""
    outcomes = ("paid (> 1.05x)", "even", "did not (< 0.95x)")
    lines = [
        "## Verdicts against outcomes (GO / NO-GO / DEPENDS ON ACCEPTANCE at the row's acceptance)",
        "",
        "| verdict | " + " | ".join(outcomes) + " |",
        "|---|---|---|---|",
    ]
    for call in Verdict:
        counts = [
            sum(r["verdict"] == call.value and _outcome(r["measured"]) == o for r in results)
            for o in outcomes
        ]
        lines.append(f"| {call.value} | " + " | ".join(map(str, counts)) + " |")
    return lines


def report(rows: list[Row], results: list[dict], held: list[dict]) -> str:
    head = (
        "| set | rows | median error factor | worst | within 1.25x | go/no-go right "
        "| predicted above measured |"
    )
    lines = ["# Calibration against published measurements", "", head, "|---|---|---|---|---|---|---|"]
    lines.append(_summary_line("all scored rows (calibration, in sample)", summary(results)))
    for role in ("reported", "anchored"):
        lines.append(
            _summary_line(f"  {role} acceptance", summary([r for r in results if r["role"] == role]))
        )
    for engine in sorted({r["engine"] for r in results}):
        lines.append(_summary_line(f"  {engine}", summary([r for r in results if r["engine"] == engine])))
    if held:
        lines.append(_summary_line("each table held out (leave-one-group-out)", summary(held)))
    lines += ["", *_verdicts(results)]
    no_gain = [r for r in results if r["measured"] < 1.0]
    lines += ["", "## Rows where SD did not pay (measured below 1x)", "", *_table(no_gain)]
    lines += ["", "## Every scored row", "", *_table(results)]
    if held:
        lines += ["", "## Held out: each table predicted from constants fitted without it", "", *_table(held)]
    excluded = [r for r in rows if r.role == "excluded"]
    lines += ["", f"## Left out ({len(excluded)} rows)", "", "| row | why |", "|---|---|"]
    lines += [f"| {r.id} | {r.note.split('; ', 1)[-1]} |" for r in excluded]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--fit", nargs="*", default=[], help="engines whose constants to fit and print")
    parser.add_argument(
        "--params",
        nargs="*",
        default=None,
        choices=sorted(PARAMETERS),
        help="the constants to fit, for every engine (default: FITTED's per engine)",
    )
    parser.add_argument(
        "--held-out",
        nargs="*",
        default=["hf-eager", "sglang", "vllm"],
        help="engines to cross-validate (leave one table out)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="write calibration.md and calibration.json here"
    )
    parser.add_argument(
        "--roofline",
        action="store_true",
        help="score the bare roofline (no engine profile) for comparison, and stop",
    )
    args = parser.parse_args(argv)
    rows = load_rows(args.data)
    engines = load_engines()
    by_id = {r.id: r for r in rows}
    if args.roofline:
        bare = {n: EngineProfile(name=n, description="roofline", device=e.device) for n, e in engines.items()}
        results = evaluate(rows, bare)
        print(json.dumps(summary(results), indent=1))
        for role in ("reported", "anchored"):
            print(role, json.dumps(summary([r for r in results if r["role"] == role])))
        return 0
    for name in args.fit:
        chosen = tuple(args.params) if args.params else FITTED[name]
        fitted = fit_engine(name, scored(rows), engines, by_id, chosen)
        engines[name] = fitted
        print(f"{name}: " + ", ".join(f"{p} = {_get(fitted, p):.3g}" for p in chosen))
    results = evaluate(rows, engines)
    per_engine = {name: tuple(args.params) for name in FITTED} if args.params else None
    held = leave_group_out(rows, engines, args.held_out, per_engine) if args.held_out else []
    text = report(rows, results, held)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "calibration.md").write_text(text, encoding="utf-8")
        payload = {
            "summary": summary(results),
            "held_out_summary": summary(held) if held else None,
            "rows": results,
            "held_out": held,
        }
        (args.out / "calibration.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
