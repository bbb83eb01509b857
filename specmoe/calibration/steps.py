"""The plain decode step: what the profiles imply against what a row measured, and what giving
`advise` the measured step does (docs/results/calibration/measured-step-rules.md).

Rows whose note gives both output throughputs ("X vs Y tok/s" or "X against Y tok/s", totals over
the batch, SD first) measured a plain step of batch ÷ Y seconds (`Measurement.plain_step_s`). That
time includes prefill, scheduling and idle time, so it bounds the decode step from above.

    step_audit         the shipped profiles' plain step against that bound: a profile whose step
                       exceeds it contradicts the measurement (the calibration fits speedups only)
    measured_step_check
                       each such row priced with its source's leave-one-source-out constants twice:
                       as calibration.md's held-out model does, and with its measured step
                       (`specmoe.perf.setup.with_measured_step`); an anchored row's acceptance is
                       read from its anchor priced the same way; the trivial rule beside them
"""

from __future__ import annotations

import statistics

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.fit import prior_profile, with_values
from specmoe.calibration.heldout import Scored, leave_one_source_out, summary, trivial
from specmoe.calibration.pricing import price, setup_for
from specmoe.perf.constants import Constant
from specmoe.perf.runtimes import EngineProfile


def step_audit(catalog: Catalog, engines: dict[str, EngineProfile]) -> list[str]:
    lines = [
        "| row | engine | B | measured plain step [ms] (upper bound) | profile's plain step [ms] | ratio |",
        "|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {}
    for row in catalog.rows:
        measured = row.plain_step_s
        if not row.scored or measured is None:
            continue
        setup = setup_for(row, engines[row.engine], catalog)
        modelled = float(setup.plain_step_s(row.batch))
        ratio = modelled / measured
        ratios.setdefault(row.engine, []).append(ratio)
        times = f"{measured * 1e3:.2f} | {modelled * 1e3:.2f}"
        lines.append(f"| {row.id} | {row.engine} | {row.batch} | {times} | {ratio:.2f} |")
    lines.append("")
    for name, values in sorted(ratios.items()):
        above = sum(v > 1 for v in values)
        lines.append(
            f"- {name}: {len(values)} rows, median ratio {statistics.median(values):.2f} "
            f"(range {min(values):.2f}–{max(values):.2f}), {above} above the measured bound"
        )
    return lines


def _cells(results: list[Scored]) -> tuple[str, str]:
    """ "median / p80 / worst" error factor and "right of decided" go/no-go of these estimates."""
    s = summary(results)
    errors = f"{s['median_error_factor']:.2f} / {s['p80_error_factor']:.2f} / {s['worst_error_factor']:.2f}"
    return errors, f"{s['go_no_go_agree']} of {s['go_no_go_decided']}"


def measured_step_check(
    catalog: Catalog, engines: dict[str, EngineProfile], priors: dict[str, dict[str, Constant]]
) -> list[str]:
    held = {s.row.id: s for s in leave_one_source_out(catalog, engines, priors) if s.predicted}
    easy = {s.row.id: s for s in trivial(list(catalog.rows))}
    chosen = [r for r in catalog.scored if r.plain_step_s is not None and r.id in held]
    stepped: dict[str, Scored] = {}
    for row in chosen:
        profile = with_values(prior_profile(engines[row.engine], priors[row.engine]), held[row.id].constants)
        priced = price(row, profile, catalog, measured_step=True)
        stepped[row.id] = Scored(row, "with the measured step", priced.predicted)

    lines = [
        "| rows | n | held out (median / p80 / worst) | held out, with the measured step | trivial "
        "| go/no-go right: held out | with the step | trivial |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups = [
        ("all rows with a measured step", chosen),
        ("  MoE targets", [r for r in chosen if catalog.is_moe(r)]),
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
    return lines
