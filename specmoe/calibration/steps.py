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
from specmoe.calibration.heldout import (
    PRIOR_BAND,
    Scored,
    band_of,
    call,
    leave_one_source_out,
    shortfall_of,
    summary,
    trivial,
)
from specmoe.calibration.pricing import price, setup_for
from specmoe.calibration.split import SPLITS, split_of
from specmoe.calibration.verdicts import OUTCOMES, outcome, ratio_band
from specmoe.perf.breakeven import Verdict, band_verdict
from specmoe.perf.constants import Constant
from specmoe.perf.engines import EngineProfile
from specmoe.perf.setup import StepForm


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
        priced = price(row, profile, catalog, measured_step=StepForm.FIXED)
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


def anchor_check(
    catalog: Catalog, engines: dict[str, EngineProfile], priors: dict[str, dict[str, Constant]]
) -> list[str]:
    """The test of change A (docs/results/calibration/anchor-verdict-rules.md): the rows with a
    measured plain step, held out, without it and with it in each form; median error and verdicts
    (under the shipped rule and the ratio band, each with the other sources' held-out band), split
    strict / design-time."""
    held_list = leave_one_source_out(catalog, engines, priors)
    held = {s.row.id: s for s in held_list if s.predicted}
    chosen = [r for r in catalog.scored if r.plain_step_s is not None and r.id in held]
    priced = {"without the step": {r.id: held[r.id].priced for r in chosen}}
    for form in StepForm:
        priced[f"step, {form.value}"] = {}
        for row in chosen:
            profile = with_values(
                prior_profile(engines[row.engine], priors[row.engine]), held[row.id].constants
            )
            priced[f"step, {form.value}"][row.id] = price(row, profile, catalog, measured_step=form)

    def others(row):
        return [
            o for o in held_list if o.predicted and o.row.engine == row.engine and o.row.source != row.source
        ]

    def verdict(rule: str, row, p) -> Verdict:
        rest = others(row)
        if rule == "shipped":
            return call(p, band_of([o.error_factor for o in rest]) or PRIOR_BAND, shortfall_of(rest))
        low, high = ratio_band(rest)
        return band_verdict(p.at_full, p.predicted, low, high)

    lines = [
        "| form | rows | n | median error | GO: paid / even / did not | NO-GO: paid / even / did not "
        "| GO on a measured loss (shipped rule / ratio band) |",
        "|---|---|---|---|---|---|---|",
    ]
    groups = [("all rows with a measured step", chosen)] + [
        (name, [r for r in chosen if split_of(r) == name]) for name in SPLITS
    ]
    for form, table in priced.items():
        for label, group in groups:
            if not group:
                lines.append(f"| {form} | {label} | 0 | – | – | – | – |")
                continue
            errors = [table[r.id].error_factor(r.speedup) for r in group]
            calls = {
                rule: [(verdict(rule, r, table[r.id]), outcome(r.speedup)) for r in group]
                for rule in ("shipped", "ratio")
            }
            ratio = calls["ratio"]
            go = " / ".join(str(sum(v is Verdict.GO and o == out for v, o in ratio)) for out in OUTCOMES)
            nogo = " / ".join(str(sum(v is Verdict.NO_GO and o == out for v, o in ratio)) for out in OUTCOMES)
            losses = [
                str(
                    sum(
                        v is Verdict.GO and r.speedup < 0.95
                        for (v, _), r in zip(calls[rule], group, strict=True)
                    )
                )
                for rule in ("shipped", "ratio")
            ]
            lines.append(
                f"| {form} | {label} | {len(group)} | {statistics.median(errors):.2f} | {go} | {nogo} "
                f"| {' / '.join(losses)} |"
            )
    lines += ["", "GO and NO-GO columns are under the ratio band; the last column under both rules.", ""]
    lines += ["| row | split | B | measured | without | fixed | scaled |", "|---|---|---|---|---|---|---|"]
    for r in chosen:
        cells = " | ".join(f"{priced[k][r.id].predicted:.2f}" for k in priced)
        lines.append(f"| {r.id} | {split_of(r)} | {r.batch} | {r.speedup:.2f} | {cells} |")
    return lines
