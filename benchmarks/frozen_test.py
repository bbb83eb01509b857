"""The shipped profiles on sources they never saw (docs/results/calibration/frozen-test-rules.md).

Prices the scored rows of the named sources in published.csv with the engine profiles as shipped
(runtimes.toml, fitted on every *other* row), beside the bare roofline, c·τ with c fitted on the
other sources' reported rows, the sweep's anchor held constant, and "always GO"; verdicts under the
shipped NO-GO rule and under the rule as first fixed. Run it at the commit whose profiles were
frozen before the sources were read: once the profiles are refitted on the new rows, the numbers
are no longer a prediction.

    python benchmarks/frozen_test.py --source "NAME" [--source "NAME" ...]   # markdown to stdout

`--extra FILE` adds rows kept outside the table (issue-threads.csv): they are priced, never fitted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.perf.breakeven import Verdict  # noqa: E402
from specmoe.perf.calibrate import Measurement, Role, is_moe, load_measurements  # noqa: E402
from specmoe.perf.heldout import Scored, in_sample, roofline, summary, tau_factor  # noqa: E402
from specmoe.perf.runtimes import load_engines  # noqa: E402

DATA = ROOT / "docs" / "results" / "calibration" / "published.csv"
EXAMPLES = ROOT / "docs" / "perf-examples"
OUTCOMES = (("paid (≥ 1.10×)", 1.10, None), ("about even", 0.95, 1.10), ("did not (< 0.95×)", None, 0.95))


def _trivial(new: list[Measurement], old: list[Measurement]) -> dict[str, Scored]:
    """c·τ (c from the old sources' reported rows) where τ is reported, else the anchor's speedup."""
    c = tau_factor([r for r in old if r.role is Role.REPORTED])
    by_id = {r.id: r for r in new}
    return {
        r.id: Scored(r, "trivial", c * r.tau if r.role is Role.REPORTED else by_id[r.anchor].speedup)
        for r in new
        if r.scored
    }


def _stats(results: list[Scored]) -> str:
    s = summary(results)
    if not s["rows"]:
        return "–"
    return f"{s['median_error_factor']:.2f} / {s['p80_error_factor']:.2f} / {s['worst_error_factor']:.2f}"


def _within(low: float | None, high: float | None, value: float) -> bool:
    return (low is None or value >= low) and (high is None or value < high)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--extra", type=Path, action="append", default=[], help="rows kept outside the table")
    parser.add_argument("--source", action="append", required=True, help="a new source, as in the CSV")
    args = parser.parse_args(argv)
    rows = load_measurements(args.data) + [r for path in args.extra for r in load_measurements(path)]
    unknown = set(args.source) - {r.source for r in rows}
    if unknown:
        print(f"no rows from {sorted(unknown)} in {args.data} or an --extra file", file=sys.stderr)
        return 2
    new = [r for r in rows if r.source in args.source]
    old = [r for r in rows if r.source not in args.source]
    engines = load_engines()
    model = {s.row.id: s for s in in_sample(new, engines, EXAMPLES, rule="frozen")}
    first = {s.row.id: s for s in in_sample(new, engines, EXAMPLES, rule="frozen", worst_case=False)}
    bare = {s.row.id: s for s in roofline(new, engines, EXAMPLES)}
    trivial = _trivial(new, old)
    scored = [r for r in new if r.scored]
    inside = {
        r.id: model[r.id].error_factor <= engines[r.engine].uncertainty for r in scored
    }  # the band ×/÷ holds the measurement

    lines = [
        "| row | source | engine | MoE | role | B | measured | frozen model | error | band holds it "
        "| verdict (shipped) | verdict (as first fixed) | roofline | trivial |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in scored:
        s = model[r.id]
        ceiling = " (ceiling)" if s.at_ceiling else ""
        lines.append(
            f"| {r.id} | {r.source} | {r.engine} | {'yes' if is_moe(r, EXAMPLES) else ''} | {r.role.value} "
            f"| {r.batch} | {r.speedup:.2f} | {s.predicted:.2f}{ceiling} | {s.error_factor:.2f} "
            f"| {'yes' if inside[r.id] else 'no'} | {s.verdict.value} | {first[r.id].verdict.value} "
            f"| {bare[r.id].predicted:.2f} | {trivial[r.id].predicted:.2f} |"
        )
    lines += ["", "| rows | n | frozen model (median / p80 / worst) | roofline | trivial | within 1.25× |"]
    lines.append("|---|---|---|---|---|---|")
    groups = [("all new scored rows", scored)] + [
        (f"source: {name}", [r for r in scored if r.source == name]) for name in args.source
    ]
    for label, group in groups:
        mine = [model[r.id] for r in group]
        lines.append(
            f"| {label} | {len(group)} | {_stats(mine)} | {_stats([bare[r.id] for r in group])} "
            f"| {_stats([trivial[r.id] for r in group])} | {summary(mine)['within_1.25']} |"
        )
    s = summary(list(model.values()))
    decided = s["go_no_go_decided"]
    always = sum(r.speedup > 1.05 for r in scored if not 0.95 <= r.speedup <= 1.05)
    lines += ["", f"Go/no-go from the point estimate: {s['go_no_go_agree']} of {decided} (always GO: "]
    lines[-1] += f"{always} of {decided})."
    lines.append(f"Inside the engine's band (which claims 80%): {sum(inside.values())} of {len(scored)}.")
    for title, calls in (("shipped rule", model), ("rule as first fixed", first)):
        lines += [
            "",
            f"| verdict, {title} | " + " | ".join(o[0] for o in OUTCOMES) + " |",
            "|---|---|---|---|",
        ]
        for v in Verdict:
            counts = [
                sum(calls[r.id].verdict is v and _within(low, high, r.speedup) for r in scored)
                for _, low, high in OUTCOMES
            ]
            lines.append(f"| {v.value} | " + " | ".join(map(str, counts)) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
