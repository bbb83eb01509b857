"""Does a measured plain step help advise? The test of docs/results/calibration/measured-step-rules.md.

On the scored rows of published.csv that measured a plain step (`Measurement.plain_step_s`), each
row is priced with its source's leave-one-source-out constants twice: as `calibration.md`'s
held-out model does, and with its measured step (`specmoe.perf.setup.with_measured_step`). An
anchored row's acceptance is read from its anchor priced the same way. Beside them: the trivial
rule (c·τ or the anchor), as in the calibration.

    python benchmarks/measured_step_check.py      # markdown to stdout (about 3 minutes)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.perf.calibrate import is_moe, load_measurements, price  # noqa: E402
from specmoe.perf.heldout import Scored, leave_one_source_out, summary, trivial  # noqa: E402
from specmoe.perf.priors import load_priors, prior_profile, with_values  # noqa: E402
from specmoe.perf.runtimes import load_engines  # noqa: E402

DATA = ROOT / "docs" / "results" / "calibration" / "published.csv"
EXAMPLES = ROOT / "docs" / "perf-examples"


def _cells(results: list[Scored]) -> tuple[str, str]:
    """ "median / p80 / worst" error factor and "right of decided" go/no-go of these estimates."""
    s = summary(results)
    errors = f"{s['median_error_factor']:.2f} / {s['p80_error_factor']:.2f} / {s['worst_error_factor']:.2f}"
    return errors, f"{s['go_no_go_agree']} of {s['go_no_go_decided']}"


def main() -> int:
    rows = load_measurements(DATA)
    by_id = {r.id: r for r in rows}
    engines, priors = load_engines(), load_priors()
    held = {s.row.id: s for s in leave_one_source_out(rows, engines, priors, EXAMPLES) if s.predicted}
    easy = {s.row.id: s for s in trivial(rows)}
    chosen = [r for r in rows if r.scored and r.plain_step_s is not None and r.id in held]
    stepped: dict[str, Scored] = {}
    for row in chosen:
        profile = with_values(prior_profile(engines[row.engine], priors[row.engine]), held[row.id].constants)
        priced = price(row, profile, by_id.get(row.anchor or ""), EXAMPLES, measured_step=True)
        stepped[row.id] = Scored(row, "with the measured step", priced.predicted)

    lines = [
        "| rows | n | held out (median / p80 / worst) | held out, with the measured step | trivial "
        "| go/no-go right: held out | with the step | trivial |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups = [
        ("all rows with a measured step", chosen),
        ("  MoE targets", [r for r in chosen if is_moe(r, EXAMPLES)]),
    ]
    groups += [(f"  {e}", [r for r in chosen if r.engine == e]) for e in sorted({r.engine for r in chosen})]
    groups += [
        (f"  source: {s}", [r for r in chosen if r.source == s]) for s in sorted({r.source for r in chosen})
    ]
    for label, group in groups:
        cells = [_cells([rule[r.id] for r in group]) for rule in (held, stepped, easy)]
        errors, right = zip(*cells, strict=True)
        lines.append(f"| {label} | {len(group)} | " + " | ".join(errors + right) + " |")
    lines += ["", "| row | engine | B | measured | held out | with the measured step | trivial |"]
    lines.append("|---|---|---|---|---|---|---|")
    for r in chosen:
        lines.append(
            f"| {r.id} | {r.engine} | {r.batch} | {r.speedup:.2f} | {held[r.id].predicted:.2f} "
            f"| {stepped[r.id].predicted:.2f} | {easy[r.id].predicted:.2f} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
