"""Does a measured plain step help advise? The test of docs/results/calibration/measured-step-rules.md.

On the scored rows of published.csv that measured a plain step (`Measurement.plain_step_s`), each
row is priced with its source's leave-one-source-out constants twice: as `calibration.md`'s
held-out model does, and with its measured step (`specmoe.perf.setup.with_measured_step`). An
anchored row's acceptance is read from its anchor priced the same way. Beside them: the trivial
rule (c·τ or the anchor), as in the calibration.

    python benchmarks/measured_step_check.py      # markdown to stdout (about 3 minutes)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.perf.breakeven import acceptance, breakeven_alpha  # noqa: E402
from specmoe.perf.calibrate import Measurement, Role, is_moe, load_measurements, setup_for  # noqa: E402
from specmoe.perf.heldout import leave_one_source_out, trivial  # noqa: E402
from specmoe.perf.priors import load_priors, prior_profile, with_values  # noqa: E402
from specmoe.perf.runtimes import EngineProfile, load_engines  # noqa: E402
from specmoe.perf.setup import SDSetup, with_measured_step  # noqa: E402

DATA = ROOT / "docs" / "results" / "calibration" / "published.csv"
EXAMPLES = ROOT / "docs" / "perf-examples"


def _setup(row: Measurement, profile: EngineProfile, stepped: bool) -> SDSetup:
    setup = setup_for(row, profile, EXAMPLES)
    if stepped and row.plain_step_s is not None:
        setup = with_measured_step(setup, row.batch, row.plain_step_s)
    return setup


def predicted(row: Measurement, anchor: Measurement | None, profile: EngineProfile, stepped: bool) -> float:
    """The row's speedup at its reported acceptance, or at the one its anchor implies (α = 1 where
    the anchor is out of reach), with or without the measured steps."""
    if row.role is Role.ANCHORED:
        anchor_setup = _setup(anchor, profile, stepped)
        alpha = breakeven_alpha(
            lambda a: anchor_setup.speedup(a, anchor.gamma, anchor.batch) / anchor.speedup
        )
        alpha = 1.0 if alpha is None else alpha
    else:
        alpha = acceptance(row.acceptance, row.acceptance_kind, row.gamma, row.id).alpha
    return _setup(row, profile, stepped).speedup(alpha, row.gamma, row.batch)


def _error(p: float, m: float) -> float:
    return max(p / m, m / p)


def _stats(errors: list[float]) -> str:
    if not errors:
        return "–"
    p80 = float(np.percentile(errors, 80))
    return f"{statistics.median(errors):.2f} / {p80:.2f} / {max(errors):.2f}"


def _right(pairs: list[tuple[float, float]]) -> str:
    decided = [(p, m) for p, m in pairs if not 0.95 <= m <= 1.05]
    return f"{sum((p >= 1) == (m >= 1) for p, m in decided)} of {len(decided)}"


def main() -> int:
    rows = load_measurements(DATA)
    by_id = {r.id: r for r in rows}
    engines, priors = load_engines(), load_priors()
    held = {s.row.id: s for s in leave_one_source_out(rows, engines, priors, EXAMPLES) if s.predicted}
    easy = {s.row.id: s.predicted for s in trivial(rows)}
    chosen = [r for r in rows if r.scored and r.plain_step_s is not None and r.id in held]
    out: dict[str, tuple[float, float]] = {}
    for row in chosen:
        profile = with_values(prior_profile(engines[row.engine], priors[row.engine]), held[row.id].constants)
        anchor = by_id.get(row.anchor or "")
        out[row.id] = (predicted(row, anchor, profile, False), predicted(row, anchor, profile, True))

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
        plain = [(out[r.id][0], r.speedup) for r in group]
        stepped = [(out[r.id][1], r.speedup) for r in group]
        easy_pairs = [(easy[r.id], r.speedup) for r in group]
        lines.append(
            f"| {label} | {len(group)} | {_stats([_error(*p) for p in plain])} "
            f"| {_stats([_error(*p) for p in stepped])} | {_stats([_error(*p) for p in easy_pairs])} "
            f"| {_right(plain)} | {_right(stepped)} | {_right(easy_pairs)} |"
        )
    lines += ["", "| row | engine | B | measured | held out | with the measured step | trivial |"]
    lines.append("|---|---|---|---|---|---|---|")
    for r in chosen:
        plain, stepped = out[r.id]
        lines.append(
            f"| {r.id} | {r.engine} | {r.batch} | {r.speedup:.2f} | {plain:.2f} | {stepped:.2f} "
            f"| {easy[r.id]:.2f} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
