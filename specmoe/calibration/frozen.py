"""The shipped profiles on sources they never saw (docs/results/calibration/frozen-test-rules.md).

Prices the scored rows of the named sources with the engine profiles as shipped (fitted on every
*other* row), beside the bare roofline, c·τ with c fitted on the other sources' reported rows, the
sweep's anchor held constant, and "always GO"; verdicts under the shipped NO-GO rule and under the
rule as first fixed. Run it at the commit whose profiles were frozen before the sources were read:
once the profiles are refitted on the new rows, the numbers are no longer a prediction. Rows kept
outside the table (the shipped issue-threads.csv, or a file of one's own) are priced, never fitted.
"""

from __future__ import annotations

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.heldout import Scored, in_sample, roofline, summary, tau_factor
from specmoe.calibration.rows import Measurement, Role
from specmoe.errors import SpecmoeError
from specmoe.perf.breakeven import Verdict
from specmoe.perf.engines import EngineProfile

OUTCOMES = (("paid (≥ 1.10×)", 1.10, None), ("about even", 0.95, 1.10), ("did not (< 0.95×)", None, 0.95))


def _trivial(new: list[Measurement], old: list[Measurement]) -> dict[str, Scored]:
    """c·τ (c from the old sources' reported rows) where τ is reported, else the anchor's speedup;
    no estimate for a reported row when no old source reports τ."""
    reported = [r for r in old if r.role is Role.REPORTED]
    c = tau_factor(reported) if reported else None
    by_id = {r.id: r for r in new}
    out = {}
    for r in new:
        if not r.scored:
            continue
        if r.role is Role.REPORTED:
            out[r.id] = Scored(r, "trivial", None if c is None else c * r.tau)
        else:
            out[r.id] = Scored(r, "trivial", by_id[r.anchor].speedup)
    return out


def _stats(results: list[Scored]) -> str:
    s = summary(results)
    if not s["rows"]:
        return "–"
    return f"{s['median_error_factor']:.2f} / {s['p80_error_factor']:.2f} / {s['worst_error_factor']:.2f}"


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _within(low: float | None, high: float | None, value: float) -> bool:
    return (low is None or value >= low) and (high is None or value < high)


def frozen_test(catalog: Catalog, engines: dict[str, EngineProfile], sources: list[str]) -> list[str]:
    """The table of the frozen test on the rows of `sources` (each as the rows spell it)."""
    unknown = sorted(set(sources) - {r.source for r in catalog.rows})
    if unknown:
        raise SpecmoeError(
            f"no rows from source '{unknown[0]}'; name a source as the rows spell it, and add the "
            "file that holds it with --extra"
        )
    new = [r for r in catalog.rows if r.source in sources]
    old = [r for r in catalog.rows if r.source not in sources]
    fresh = catalog.with_rows(new)
    model = {s.row.id: s for s in in_sample(fresh, engines, rule="frozen")}
    first = {s.row.id: s for s in in_sample(fresh, engines, rule="frozen", worst_case=False)}
    bare = {s.row.id: s for s in roofline(fresh, engines)}
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
            f"| {r.id} | {r.source} | {r.engine} | {'yes' if catalog.is_moe(r) else ''} | {r.role.value} "
            f"| {r.batch} | {r.speedup:.2f} | {s.predicted:.2f}{ceiling} | {s.error_factor:.2f} "
            f"| {'yes' if inside[r.id] else 'no'} | {s.verdict.value} | {first[r.id].verdict.value} "
            f"| {bare[r.id].predicted:.2f} | {_number(trivial[r.id].predicted)} |"
        )
    lines += ["", "| rows | n | frozen model (median / p80 / worst) | roofline | trivial | within 1.25× |"]
    lines.append("|---|---|---|---|---|---|")
    groups = [("all new scored rows", scored)] + [
        (f"source: {name}", [r for r in scored if r.source == name]) for name in sources
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
    return lines
