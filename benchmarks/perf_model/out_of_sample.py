"""Predictions tested out of sample: cells measured after the fits were frozen, predicted from the
fits, N(n) and an acceptance known before the run, not from the run's own schedule or traces.

For each SD cell of `--runs` the prediction takes
    the fits in `--fits` (their sha256 printed: the files as they stood before the cells were
    measured; `git log` on them shows when),
    N(n) for the MoE's experts (no traced routing),
    the acceptance: an oracle's dialed per-position probability (known before the run), or, with
    `--acceptance-from`, the per-position α measured for the same configuration in another pass,
    the engine's host seconds from its profile (`specmoe/perf/engines.toml`),
and composes the expected round (`specmoe.perf.compose.expected_speedup`). The cell's measured
speedup (ratio of means over its paired units) stands beside it. docs/results/cpu/predictions/
predictions.md holds the other kind, a reconstruction given each cell's measured schedule.

    python -m benchmarks.perf_model.out_of_sample --runs docs/results/cpu/findings/moesd.csv \\
        --fits docs/results/cpu/findings/fits --out docs/results/cpu/predictions
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from benchmarks.paths import ROOT
from specmoe.drafts import NgramDraft, OracleDraft, draft_of
from specmoe.errors import SpecmoeError
from specmoe.findings.model_check import ModelLibrary, read_rows
from specmoe.perf.compose import expected_speedup
from specmoe.perf.engines import engine_profile
from specmoe.results.compare import compare
from specmoe.theory import per_token_alpha

GOAL_MEDIAN, GOAL_WORST = 0.15, 0.35


def _acceptance_key(cfg: dict) -> tuple:
    """What an acceptance measured elsewhere must share with the cell: models, prompts, batch, top-k
    (not γ: the per-position α is what carries from one γ to another)."""
    return (cfg["target"], cfg["draft"], cfg.get("prompt_set"), int(cfg["batch_size"]), cfg.get("moe_top_k"))


def _alpha_elsewhere(paths: list[Path]) -> dict[tuple, tuple[float, int]]:
    """Per `_acceptance_key`: the per-position α a separate pass measured, at the smallest γ it ran
    (the closest to a short draft; fixed before any cell was predicted), with that γ."""
    found: dict[tuple, tuple[float, int]] = {}
    for path in paths:
        for c in compare(read_rows(path)):
            cfg, gamma = c.config, int(c.config["gamma"])
            key = _acceptance_key(cfg)
            if c.acceptance_rate == c.acceptance_rate and (key not in found or gamma < found[key][1]):
                found[key] = (float(per_token_alpha(c.acceptance_rate, gamma)), gamma)
    return found


def predict_cells(
    runs: list[Path], fits: list[Path], elsewhere: list[Path], ragged: bool = True, profiles: list[Path] = ()
) -> list[dict]:
    library = ModelLibrary(fits)
    measured_times = ModelLibrary(profiles, measured=True)
    measured_alpha = _alpha_elsewhere(elsewhere)
    out = []
    for path in runs:
        for c in compare(read_rows(path)):
            cfg = c.config
            found = library(c.settings)
            if found is None:
                continue
            target, draft = found
            gamma, batch = int(cfg["gamma"]), int(cfg["batch_size"])
            new_tokens = int(cfg["max_new_tokens"]) if ragged else None
            spec = draft_of(str(cfg["draft"]))
            if isinstance(spec, OracleDraft):
                alpha, source = spec.acceptance, "dialed"
            else:
                key = _acceptance_key(cfg)
                if key not in measured_alpha:
                    continue
                alpha, at = measured_alpha[key]
                source = f"another pass, γ={at}"
            llamacpp = (cfg.get("target_model") or {}).get("backend") == "llamacpp"
            engine = engine_profile("llamacpp-cpu" if llamacpp else "hf-eager-cpu", "cpu")
            host = engine.round_s + engine.round_seq_s * batch
            draft_host = engine.ngram_s if isinstance(spec, NgramDraft) else 0.0
            predicted = expected_speedup(
                target, draft, alpha, gamma, batch, host, engine.step_s, draft_host, new_tokens=new_tokens
            )
            measured = c.speedup.value
            # The same composition from the profiled times: a diagnostic that splits the error into
            # the fit's and the composition's, not a prediction of its own.
            profiled = measured_times(c.settings) if profiles else None
            try:
                from_profiles = (
                    expected_speedup(
                        *profiled, alpha, gamma, batch, host, engine.step_s, draft_host, new_tokens=new_tokens
                    )
                    if profiled is not None
                    else None
                )
            except SpecmoeError:  # beyond the profiled batch sizes: profiles do not extrapolate
                from_profiles = None
            out.append(
                {
                    "runs": path.name,
                    "engine": "llama.cpp Q8_0" if llamacpp else "transformers float32",
                    "unstable": bool(c.unstable),
                    "target": cfg["target"],
                    "draft": str(cfg["draft"]),
                    "prompts": cfg.get("prompt_set"),
                    "batch": batch,
                    "gamma": gamma,
                    "top_k": cfg.get("moe_top_k"),
                    "alpha": alpha,
                    "alpha_from": source,
                    "measured": measured,
                    "low": c.speedup.low,
                    "high": c.speedup.high,
                    "level": c.speedup.level,
                    "units": c.units,
                    "predicted": predicted,
                    "error": predicted / measured - 1,
                    "from_profiles_error": None if from_profiles is None else from_profiles / measured - 1,
                    # the runs' own plain step (batch ÷ baseline tokens/s) over the model's: how far
                    # the model's input, not its composition, is off for this cell
                    "plain_step_ratio": (batch / c.baseline_tokens_per_s)
                    / (target.time(batch, 1) + engine.step_s),
                }
            )
    return out


MODEL_SOURCES = ("specmoe/perf/compose.py", "specmoe/perf/engines.toml", "specmoe/perf/constants.toml")


def fit_hashes(fits: list[Path]) -> dict[str, str]:
    """sha256 (12 hex digits) of every fit and of the model's own source: what a prediction froze."""
    files = [path for folder in fits for path in sorted(Path(folder).glob("*.json"))]
    files += [ROOT / name for name in MODEL_SOURCES]
    return {
        str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path): hashlib.sha256(
            path.read_bytes()
        ).hexdigest()[:12]
        for path in files
    }


def _measured(r: dict) -> str:
    if r["level"] is None:  # fewer than five units left: their range, no interval
        return f"{r['measured']:.2f} (range {r['low']:.2f}–{r['high']:.2f}, n={r['units']})"
    shown = f"{r['measured']:.2f} [{r['low']:.2f}, {r['high']:.2f}] {r['level']:.0%} n={r['units']}"
    return shown + (" unstable" if r.get("unstable") else "")


def judged(r: dict) -> bool:
    """A cell that can score a prediction: a confidence interval (five units on), stable repeats."""
    return r["level"] is not None and not r.get("unstable")


def engine_errors(rows: list[dict]) -> dict[str, dict]:
    """Per engine: judged cells, their median and worst absolute error, and all cells."""
    found = {}
    for engine in sorted({r["engine"] for r in rows}):
        errors = [abs(r["error"]) for r in rows if r["engine"] == engine and judged(r)]
        found[engine] = {
            "cells": sum(r["engine"] == engine for r in rows),
            "judged": len(errors),
            "median_abs_error": statistics.median(errors) if errors else None,
            "worst_abs_error": max(errors) if errors else None,
        }
    return found


def summary(rows: list[dict]) -> str:
    """Per engine: the judged cells' median and worst absolute error against the goal."""
    parts = []
    for engine in sorted({r["engine"] for r in rows}):
        errors = [abs(r["error"]) for r in rows if r["engine"] == engine and judged(r)]
        every = [r for r in rows if r["engine"] == engine]
        if not errors:
            parts.append(f"- {engine}: no judged cell ({len(every)} cells)")
            continue
        med, worst = statistics.median(errors), max(errors)
        met = "meets" if med <= GOAL_MEDIAN and worst <= GOAL_WORST else "misses"
        parts.append(
            f"- {engine}: {len(errors)} judged cells of {len(every)}, median absolute error "
            f"**{med:.1%}**, worst **{worst:.1%}**, within 15%: {sum(e <= 0.15 for e in errors)} — "
            f"{met} the goal (median ≤ {GOAL_MEDIAN:.0%}, worst ≤ {GOAL_WORST:.0%})"
        )
    return "\n".join(parts)


def table(rows: list[dict]) -> str:
    lines = [
        "| runs | target | draft | prompts | B | γ | top-k | α (from) | measured | predicted | error "
        "| from profiles | plain step, runs ÷ model |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = lambda r: (r["runs"], r["target"], r["prompts"] or "", r["top_k"] or 0, r["gamma"], r["batch"])  # noqa: E731
    for r in sorted(rows, key=order):
        lines.append(
            f"| {r['runs']} | {r['target']} | {r['draft']} | {r['prompts'] or ''} | {r['batch']} | "
            f"{r['gamma']} | {r['top_k'] or ''} | {r['alpha']:.2f} ({r['alpha_from']}) | {_measured(r)} | "
            f"{r['predicted']:.2f} | {r['error']:+.1%} | "
            + ("–" if r.get("from_profiles_error") is None else f"{r['from_profiles_error']:+.1%}")
            + f" | {r['plain_step_ratio']:.2f} |"
        )
    return "\n".join(lines)


def _cells(paths: list[Path]) -> dict[tuple, object]:
    return {
        (*_acceptance_key(c.config), int(c.config["gamma"])): c
        for path in paths
        for c in compare(read_rows(path))
    }


def _span(paths: list[Path]) -> str:
    """When the runs of these exports ran: first start to last finish, to the minute."""
    starts = [r.measure.get("started_at") for p in paths for r in read_rows(p)]
    ends = [r.measure.get("finished_at") for p in paths for r in read_rows(p)]
    starts, ends = [t for t in starts if t], [t for t in ends if t]
    if not starts or not ends:
        return "at an unrecorded time"
    return f"{min(starts)[:16].replace('T', ' ')} to {max(ends)[:16].replace('T', ' ')}"


def _shown(c) -> str:
    e = c.speedup
    if e.level is None:
        return f"{e.value:.2f} (range {e.low:.2f}–{e.high:.2f}, n={c.units})"
    return f"{e.value:.2f} [{e.low:.2f}, {e.high:.2f}] n={c.units}"


def again_table(passes: list[Path], before: list[Path]) -> tuple[str, list[dict]]:
    """Cells measured again, each `passes` file one later pass, beside their first measurement: the
    measurement's own reproducibility, the floor under any prediction's error. Returns the table and,
    per pass, how far the speedups moved."""
    old = _cells(before)
    news = [_cells([path]) for path in passes]
    order = lambda k: (k[0], k[4] or 0, k[3], k[5])  # noqa: E731  target, top-k, B, γ
    keys = sorted(set(old).intersection(*news), key=order)
    if not passes or not keys:
        return "No cell was measured again.", []
    heads = [f"again ({_span([path])[:10]})" for path in passes]
    lines = [
        "| target | draft | B | γ | top-k | first | "
        + " | ".join(f"{h} | ÷ first | overlap" for h in heads)
        + " |",
        "|---|---|---|---|---|---|" + "---|---|---|" * len(passes),
    ]
    moved = [[] for _ in passes]
    overlaps = [0 for _ in passes]
    for key in keys:
        a = old[key].speedup
        cols = []
        for i, new in enumerate(news):
            b = new[key].speedup
            overlap = a.low <= b.high and b.low <= a.high
            moved[i].append(abs(b.value / a.value - 1))
            overlaps[i] += overlap
            cols.append(f"{_shown(new[key])} | {b.value / a.value:.3f} | {'yes' if overlap else 'no'}")
        target, draft, _, batch, top_k, gamma = key
        lines.append(
            f"| {target} | {draft} | {batch} | {gamma} | {top_k or ''} | {_shown(old[key])} | "
            + " | ".join(cols)
            + " |"
        )
    stats = [
        {
            "runs": path.name,
            "measured": _span([path]),
            "cells": len(m),
            "median_moved": statistics.median(m),
            "most_moved": max(m),
            "overlap": overlap,
        }
        for path, m, overlap in zip(passes, moved, overlaps, strict=True)
    ]
    head = [f"First measured {_span(before)} (UTC); {len(keys)} cells measured again:"]
    head += [
        f"- {s['measured']}: the speedup moved by a median of {s['median_moved']:.1%} "
        f"(at most {s['most_moved']:.1%}); the two intervals overlap in {s['overlap']} of {s['cells']}."
        for s in stats
    ]
    return "\n".join(head) + "\n\n" + "\n".join(lines), stats


V1 = "8abd7e7"  # the commit whose model (one steady-state round) the `--seen` cells were measured after
V2 = "dbbc2f0"  # the commit that froze v2 (a finite decode), before the `--runs` cells were measured


@dataclass(frozen=True)
class Refit:
    """Fits profiled again on `label` (a date) and the cells they predict: `declared` when the fits
    were committed before those cells were measured and named as their predictor; otherwise a
    comparison (e.g. older fits on newer cells, to show what a stale profile costs)."""

    label: str
    fits: Path
    runs: Path
    declared: bool
    rows: tuple[dict, ...] = ()


def refit_section(refit: Refit, hashes: dict[str, str]) -> list[str]:
    kind = (
        "declared before these cells were measured: the prediction"
        if refit.declared
        else "not declared for these cells: a comparison"
    )
    return [
        f"### Fits profiled {refit.label} on `{refit.runs.name}` ({kind})",
        "",
        *(f"- `{name}` {digest}" for name, digest in hashes.items()),
        "",
        summary(list(refit.rows)),
        "",
        table(list(refit.rows)),
        "",
    ]


def declared_rows(rows: list[dict], refits: list[Refit]) -> list[dict]:
    """Every cell once, predicted by the fits declared for it before it was measured: a refit's
    where one was declared for the cell's runs, else the frozen fits of `--fits`."""
    redeclared = {r.runs.name for r in refits if r.declared}
    chosen = [row for row in rows if row["runs"] not in redeclared]
    return chosen + [row for r in refits if r.declared for row in r.rows]


def report(
    rows: list[dict],
    seen: list[dict],
    v1: list[dict],
    hashes: dict[str, str],
    again: str,
    refits: list[tuple[Refit, dict[str, str]]] = (),
) -> str:
    refit_part = (
        [
            "## Model v2 with fits profiled again",
            "",
            "The fits above were profiled on 2026-11-23, and the runs since step faster than they say (the",
            "last column). The llama.cpp models were profiled and fitted again on later days, each set",
            "committed before the cells it was declared to predict; the same cells from the older fits",
            "stand in the table above.",
            "",
            *(line for refit, digests in refits for line in refit_section(refit, digests)),
            "## Every cell by the fits declared for it",
            "",
            "Each cell above once, predicted by the fits named as its predictor before it was measured",
            "(the table above for cells no later profile was declared for).",
            "",
            summary(declared_rows(rows, [r for r, _ in refits])),
            "",
        ]
        if refits
        else []
    )
    return "\n".join(
        [
            "# Out of sample: cells measured after the model was frozen",
            "",
            "`python -m benchmarks.perf_model.out_of_sample` (its docstring says what enters a prediction; "
            "the",
            "commands are in out-of-sample/README.md). Fits and model sources, sha256 (12 hex digits):",
            "",
            *(f"- `{name}` {digest}" for name, digest in hashes.items()),
            "",
            f"## Model v2 (frozen at {V2}) on cells measured after it",
            "",
            "The prediction: v2 predicts these cells. Judged cells (a confidence interval from five units, ",
            "stable repeats) score it; the others are listed.",
            "",
            summary(rows),
            "",
            table(rows),
            "",
            *refit_part,
            f"## Model v1 (as of {V1}) on cells measured after it",
            "",
            "v1 priced one steady-state round with every row live. Its errors on these cells (all",
            "positive at large batch) led to v2, which prices the decode the runs actually make: each row's",
            "last round cut short by the token budget, and the batch shrinking as rows finish. So on these",
            "cells v1's errors are predictions, and v2's are not (shown last, for comparison).",
            "",
            summary(v1),
            "",
            table(v1),
            "",
            "## The same cells measured again",
            "",
            again,
            "",
            "## Model v2 on the cells that led to it (seen: not a prediction)",
            "",
            summary(seen),
            "",
            table(seen),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=Path, action="append", required=True, help="cells measured after v2 froze"
    )
    parser.add_argument(
        "--seen",
        type=Path,
        action="append",
        default=[],
        help="cells measured after v1, seen when v2 was written",
    )
    parser.add_argument("--fits", type=Path, action="append", required=True)
    parser.add_argument("--acceptance-from", type=Path, action="append", default=[])
    parser.add_argument(
        "--profiles", type=Path, action="append", default=[], help="profiles for the diagnostic column"
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for out-of-sample.md and .json")
    parser.add_argument(
        "--again", type=Path, action="append", default=[], help="one later pass over cells measured again"
    )
    parser.add_argument(
        "--refit",
        nargs=3,
        action="append",
        default=[],
        metavar=("DATE", "FITS", "RUNS"),
        help="fits profiled on DATE, committed before the cells of RUNS and declared their predictor",
    )
    parser.add_argument(
        "--compare-refit",
        nargs=3,
        action="append",
        default=[],
        metavar=("DATE", "FITS", "RUNS"),
        help="fits profiled on DATE on cells they were not declared for (e.g. older fits, newer cells)",
    )
    parser.add_argument(
        "--first", type=Path, action="append", default=[], help="the same cells' first measurement"
    )
    args = parser.parse_args(argv)
    rows = predict_cells(args.runs, args.fits, args.acceptance_from, profiles=args.profiles)
    seen = predict_cells(args.seen, args.fits, args.acceptance_from, profiles=args.profiles)
    v1 = predict_cells(args.seen, args.fits, args.acceptance_from, ragged=False, profiles=args.profiles)
    hashes = fit_hashes(args.fits)
    refits = []
    for declared, given in ((True, args.refit), (False, args.compare_refit)):
        for label, fits, runs in given:
            fits, runs = Path(fits), Path(runs)
            predicted = predict_cells([runs], [fits], args.acceptance_from)
            refit = Refit(label, fits, runs, declared, tuple(predicted))
            refits.append((refit, {k: v for k, v in fit_hashes([fits]).items() if k not in hashes}))
    again, moved = again_table(args.again, args.first)
    text = report(rows, seen, v1, hashes, again, refits)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "out-of-sample.md").write_text(text, encoding="utf-8")
        payload = {
            "fits": hashes,
            "summary": {
                "v2": engine_errors(rows),
                "v1_on_seen": engine_errors(v1),
                "v2_on_seen": engine_errors(seen),
                "v2_declared": engine_errors(declared_rows(rows, [r for r, _ in refits])),
                # the cells of every declared refit together: fits profiled on the cells' own day
                "v2_refit": engine_errors([row for r, _ in refits if r.declared for row in r.rows]),
                **{f"v2_refit {r.label} on {r.runs.name}": engine_errors(list(r.rows)) for r, _ in refits},
            },
            "again": moved,
            "v2": rows,
            "v1_on_seen": v1,
            "v2_on_seen": seen,
            "refits": [
                {
                    "label": r.label,
                    "fits": str(r.fits),
                    "runs": r.runs.name,
                    "declared": r.declared,
                    "rows": list(r.rows),
                }
                for r, _ in refits
            ],
        }
        (args.out / "out-of-sample.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
