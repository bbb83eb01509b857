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

    python benchmarks/out_of_sample.py --runs docs/results/cpu/findings/moesd.csv \\
        --fits docs/results/cpu/findings/fits --out docs/results/cpu/predictions
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.bench.summary import compare  # noqa: E402
from specmoe.engine.draft_spec import NgramDraft, OracleDraft, draft_of  # noqa: E402
from specmoe.findings.model_check import ModelLibrary, read_rows  # noqa: E402
from specmoe.perf.compose import expected_speedup  # noqa: E402
from specmoe.perf.engines import engine_profile  # noqa: E402
from specmoe.theory import per_token_alpha  # noqa: E402

GOAL_MEDIAN, GOAL_WORST = 0.15, 0.35


def _alpha_elsewhere(paths: list[Path]) -> dict[tuple, float]:
    """Per (target, draft, γ, B, top-k): the per-position α a separate pass measured."""
    found: dict[tuple, float] = {}
    for path in paths:
        for c in compare(read_rows(path)):
            cfg = c.config
            if c.acceptance_rate == c.acceptance_rate:
                key = (
                    cfg["target"],
                    cfg["draft"],
                    int(cfg["gamma"]),
                    int(cfg["batch_size"]),
                    cfg.get("moe_top_k"),
                )
                found[key] = per_token_alpha(c.acceptance_rate, int(cfg["gamma"]))
    return found


def predict_cells(
    runs: list[Path], fits: list[Path], elsewhere: list[Path], ragged: bool = True
) -> list[dict]:
    library = ModelLibrary(fits)
    measured_alpha = _alpha_elsewhere(elsewhere)
    out = []
    for path in runs:
        for c in compare(read_rows(path)):
            cfg = c.config
            found = library(cfg)
            if found is None:
                continue
            target, draft = found
            gamma, batch = int(cfg["gamma"]), int(cfg["batch_size"])
            new_tokens = int(cfg["max_new_tokens"]) if ragged else None
            spec = draft_of(str(cfg["draft"]))
            if isinstance(spec, OracleDraft):
                alpha, source = spec.acceptance, "dialed"
            else:
                key = (cfg["target"], cfg["draft"], gamma, batch, cfg.get("moe_top_k"))
                if key not in measured_alpha:
                    continue
                alpha, source = measured_alpha[key], "another pass"
            llamacpp = (cfg.get("target_model") or {}).get("backend") == "llamacpp"
            engine = engine_profile("llamacpp-cpu" if llamacpp else "hf-eager-cpu", "cpu")
            host = engine.round_s + engine.round_seq_s * batch
            draft_host = engine.ngram_s if isinstance(spec, NgramDraft) else 0.0
            predicted = expected_speedup(
                target, draft, alpha, gamma, batch, host, engine.step_s, draft_host, new_tokens=new_tokens
            )
            measured = c.speedup.value
            out.append(
                {
                    "runs": path.name,
                    "target": cfg["target"],
                    "draft": str(cfg["draft"]),
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
                }
            )
    return out


MODEL_SOURCES = ("specmoe/perf/compose.py", "specmoe/perf/engines.toml")


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
    return f"{r['measured']:.2f} [{r['low']:.2f}, {r['high']:.2f}] {r['level']:.0%} n={r['units']}"


def _summary(rows: list[dict], label: str) -> str:
    errors = [abs(r["error"]) for r in rows]
    return (
        f"{label}: {len(rows)} cells, median absolute error **{statistics.median(errors):.1%}**, worst "
        f"**{max(errors):.1%}**, within 15%: {sum(e <= 0.15 for e in errors)}"
    )


def markdown(rows: list[dict], hashes: dict[str, str]) -> str:
    judged = [r for r in rows if r["level"] is not None]
    lines = [
        "# Out of sample: cells measured after the fits were frozen",
        "",
        "`python benchmarks/out_of_sample.py` (its docstring says what enters a prediction). Fits and",
        "model sources used, sha256 (first 12 hex digits):",
        "",
        *(f"- `{name}` {digest}" for name, digest in hashes.items()),
        "",
        f"- {_summary(judged, 'cells with a confidence interval (at least five units)')} "
        f"(goal: median ≤ {GOAL_MEDIAN:.0%}, worst ≤ {GOAL_WORST:.0%});",
        f"- {_summary(rows, 'every cell')}.",
        "",
        "| runs | target | draft | B | γ | top-k | α (from) | measured | predicted | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["runs"], r["target"], r["top_k"] or 0, r["gamma"], r["batch"])):
        lines.append(
            f"| {r['runs']} | {r['target']} | {r['draft']} | {r['batch']} | {r['gamma']} | "
            f"{r['top_k'] or ''} | {r['alpha']:.2f} ({r['alpha_from']}) | {_measured(r)} | "
            f"{r['predicted']:.2f} | {r['error']:+.1%} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, action="append", required=True)
    parser.add_argument("--fits", type=Path, action="append", required=True)
    parser.add_argument("--acceptance-from", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--steady-state",
        action="store_true",
        help="the model as first frozen: one steady-state round, no finite decode length (v1)",
    )
    args = parser.parse_args(argv)
    rows = predict_cells(args.runs, args.fits, args.acceptance_from, ragged=not args.steady_state)
    hashes = fit_hashes(args.fits)
    text = markdown(rows, hashes)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "out-of-sample.md").write_text(text, encoding="utf-8")
        payload = {"fits": hashes, "cells": rows}
        (args.out / "out-of-sample.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
