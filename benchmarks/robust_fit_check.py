"""Does a robust loss help the engine fit? The test of docs/results/calibration/robust-fit-rules.md.

Every scored row of published.csv is predicted held out by source (`leave_one_source_out`) and in
sample (`fit_all`) twice: with the engine constants fitted by plain least squares on log errors,
and with the soft-L1 loss (`fit_engine(robust=True)`; not shipped, see robust-fit-check.md).
Verdicts held out use the shipped worst-case rule. The trivial rule (c·τ or the anchor) is shown beside them.

    python benchmarks/robust_fit_check.py      # markdown to stdout (about 10 minutes)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.perf.breakeven import Verdict  # noqa: E402
from specmoe.perf.calibrate import is_moe, load_measurements  # noqa: E402
from specmoe.perf.heldout import Scored, fit_all, in_sample, leave_one_source_out, summary, trivial  # noqa: E402
from specmoe.perf.priors import load_priors  # noqa: E402
from specmoe.perf.runtimes import load_engines  # noqa: E402

DATA = ROOT / "docs" / "results" / "calibration" / "published.csv"
EXAMPLES = ROOT / "docs" / "perf-examples"
LOSSES = {"squares": False, "soft-L1": True}


def _errors(results: list[Scored]) -> str:
    s = summary(results)
    return f"{s['median_error_factor']:.2f} / {s['p80_error_factor']:.2f} / {s['worst_error_factor']:.2f}"


def _right(results: list[Scored]) -> str:
    s = summary(results)
    return f"{s['go_no_go_agree']} of {s['go_no_go_decided']}"


def contradictions(results: list[Scored]) -> list[Scored]:
    return [
        s
        for s in results
        if (s.verdict is Verdict.NO_GO and s.row.speedup >= 1.10)
        or (s.verdict is Verdict.GO and s.row.speedup < 0.95)
    ]


def main() -> int:
    rows = load_measurements(DATA)
    engines, priors = load_engines(), load_priors()
    held, fitted = {}, {}
    for name, robust in LOSSES.items():
        held[name] = {s.row.id: s for s in leave_one_source_out(rows, engines, priors, EXAMPLES, robust)}
        profiles = fit_all(rows, engines, priors, EXAMPLES, robust)
        fitted[name] = {s.row.id: s for s in in_sample(rows, profiles, EXAMPLES)}
    easy = {s.row.id: s for s in trivial(rows)}
    chosen = [r for r in rows if r.scored and held["squares"][r.id].predicted is not None]

    lines = [
        "| rows | n | held out, squares (median / p80 / worst) | held out, soft-L1 | trivial "
        "| in sample, squares | in sample, soft-L1 | go/no-go right held out: squares | soft-L1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups = [
        ("all scored rows", chosen),
        ("  MoE targets", [r for r in chosen if is_moe(r, EXAMPLES)]),
        ("  dense targets", [r for r in chosen if not is_moe(r, EXAMPLES)]),
    ]
    groups += [(f"  {e}", [r for r in chosen if r.engine == e]) for e in sorted({r.engine for r in chosen})]
    groups += [
        (f"  source: {s}", [r for r in chosen if r.source == s]) for s in sorted({r.source for r in chosen})
    ]
    for label, group in groups:
        cells = [_errors([rule[r.id] for r in group]) for rule in (held["squares"], held["soft-L1"], easy)]
        cells += [_errors([fitted[n][r.id] for r in group]) for n in LOSSES]
        cells += [_right([held[n][r.id] for r in group]) for n in LOSSES]
        lines.append(f"| {label} | {len(group)} | " + " | ".join(cells) + " |")
    for name in LOSSES:
        misses = contradictions([held[name][r.id] for r in chosen])
        lines += ["", f"Held-out verdicts that contradict the measurement, {name}: {len(misses)}"]
        lines += [
            f"- {s.row.id}: {s.verdict.value}, predicted {s.predicted:.2f}×, measured {s.row.speedup:.2f}×"
            for s in misses
        ]
    lines += ["", "| row | engine | B | measured | held out, squares | held out, soft-L1 | trivial |"]
    lines.append("|---|---|---|---|---|---|---|")
    for r in chosen:
        a, b = held["squares"][r.id].predicted, held["soft-L1"][r.id].predicted
        t = easy[r.id].predicted
        lines.append(
            f"| {r.id} | {r.engine} | {r.batch} | {r.speedup:.2f} | {a:.2f} | {b:.2f} "
            f"| {'–' if t is None else f'{t:.2f}'} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
