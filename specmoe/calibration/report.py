"""calibration.md and calibration.json: `advise --config`'s predictions scored against published
SD measurements, held out by source (`specmoe calibrate heldout`).

Every scored row of the catalog is priced from configs, a hardware file and an engine profile alone
(`specmoe.calibration.pricing`). Three kinds of number come out:

    in sample    the shipped profiles (constants.toml's fitted values, which saw every row): a
                 reconstruction, not a forecast
    held out     leave-one-source-out (`specmoe.calibration.heldout`): each source's rows predicted
                 from constants refitted from the priors on the other sources alone; an engine with
                 rows from one source only gets no held-out estimate
    baselines    the bare roofline, c·τ (c fitted on the other sources), the sweep's anchor held
                 constant, and "always GO", on the same rows

The error of a row is the factor max(predicted/measured, measured/predicted); go/no-go agrees when
both are on the same side of 1× (rows measured within 0.95–1.05 are listed but not counted).

Each engine's band (`uncertainty`) is the 80th percentile of its held-out error factors where it
has at least five, else the priors' 1.5; its `max_shortfall`, the largest measured ÷ predicted among
them, is what a NO-GO must survive (docs/results/calibration/nogo-rules.md). `calibrate fit`
writes both beside the fitted constants.
"""

from __future__ import annotations

from collections import Counter

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.fit import value_of
from specmoe.calibration.heldout import (
    PRIOR_BAND,
    Scored,
    always_go,
    anchor_constant,
    band_of,
    c_tau,
    contradictions,
    held_out_verdicts,
    in_sample,
    leave_one_source_out,
    roofline,
    shortfall_of,
    summary,
    trivial,
)
from specmoe.calibration.split import SPLITS, split_of
from specmoe.perf.breakeven import Verdict
from specmoe.perf.constants import fitted_keys

RULES = ("held out", "in sample", "roofline", "c·τ", "anchor", "trivial")


def _fmt(value, spec=".2f") -> str:
    return "–" if value is None else format(value, spec)


def _row_sets(catalog: Catalog) -> list[tuple[str, set[str]]]:
    scored = catalog.scored
    sets = [("all scored rows", {r.id for r in scored})]
    sets.append(("  MoE targets", {r.id for r in scored if catalog.is_moe(r)}))
    sets.append(("  dense targets", {r.id for r in scored if not catalog.is_moe(r)}))
    for split in SPLITS:
        sets.append((f"  {split}", {r.id for r in scored if split_of(r) == split}))
    for role in ("reported", "anchored"):
        sets.append((f"  {role} acceptance", {r.id for r in scored if r.role == role}))
    for engine in sorted({r.engine for r in scored}):
        sets.append((f"  {engine}", {r.id for r in scored if r.engine == engine}))
    # one source with many rows must not hide how the others fare: each source on its own, and all
    # rows but the largest source's
    counts = Counter(r.source for r in scored)
    largest = max(counts, key=lambda source: (counts[source], source))
    sets.append((f"  all but {largest}", {r.id for r in scored if r.source != largest}))
    for source in sorted(counts):
        sets.append((f"  source: {source}", {r.id for r in scored if r.source == source}))
    return sets


def _only(results: list[Scored], ids: set[str]) -> list[Scored]:
    return [s for s in results if s.row.id in ids]


def accuracy_table(catalog: Catalog, by_rule: dict[str, list[Scored]]) -> list[str]:
    """Median error factor of every rule on the rows the held-out model has an estimate for."""
    head = (
        "| rows | scored | held-out estimate | **model, held out** (median / p80 / worst) | within 1.25× "
        "| roofline | c·τ | anchor | trivial (c·τ or anchor) | model, in sample |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    held = {s.row.id for s in by_rule["held out"] if s.predicted is not None}
    for label, ids in _row_sets(catalog):
        same = ids & held
        model = summary(_only(by_rule["held out"], same))
        cells = [label, str(len(ids)), str(len(same))]
        cells.append(
            f"**{_fmt(model['median_error_factor'])}** / {_fmt(model['p80_error_factor'])} / "
            f"{_fmt(model['worst_error_factor'])}"
        )
        cells.append(str(model["within_1.25"]) if same else "–")
        for rule in ("roofline", "c·τ", "anchor", "trivial", "in sample"):
            s = summary(_only(by_rule[rule], same))
            cells.append(f"{_fmt(s['median_error_factor'])} ({s['rows']})" if s["rows"] else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def in_sample_table(catalog: Catalog, results: list[Scored]) -> list[str]:
    lines = [
        "| rows | scored | median | p80 | worst | within 1.25× | go/no-go right |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, ids in _row_sets(catalog):
        s = summary(_only(results, ids))
        lines.append(
            f"| {label} | {s['rows']} | {_fmt(s['median_error_factor'])} | {_fmt(s['p80_error_factor'])} | "
            f"{_fmt(s['worst_error_factor'])} | {s['within_1.25']} | "
            f"{s['go_no_go_agree']} of {s['go_no_go_decided']} |"
        )
    return lines


def go_table(catalog: Catalog, by_rule: dict[str, list[Scored]]) -> list[str]:
    """Point estimates on the right side of 1×, on rows measured outside 0.95–1.05."""
    held = {s.row.id for s in by_rule["held out"] if s.predicted is not None}
    lines = [
        "| rows | model, held out | roofline | trivial | always GO | model, in sample |",
        "|---|---|---|---|---|---|",
    ]
    for label, ids in _row_sets(catalog)[:5]:
        same = ids & held
        cells = [label]
        for rule in ("held out", "roofline", "trivial"):
            s = summary(_only(by_rule[rule], same))
            cells.append(f"{s['go_no_go_agree']} of {s['go_no_go_decided']}")
        decided = [s for s in _only(by_rule["always GO"], same) if not 0.95 <= s.row.speedup <= 1.05]
        cells.append(f"{sum(s.row.speedup > 1.05 for s in decided)} of {len(decided)}")
        s = summary(_only(by_rule["in sample"], same))
        cells.append(f"{s['go_no_go_agree']} of {s['go_no_go_decided']}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _outcome(measured: float) -> str:
    return "paid (≥ 1.10×)" if measured >= 1.10 else "did not (< 0.95×)" if measured < 0.95 else "about even"


OUTCOMES = ("paid (≥ 1.10×)", "about even", "did not (< 0.95×)")


def verdict_table(results: list[Scored]) -> list[str]:
    """advise's verdict at each row's acceptance against what the row measured, over all rows and
    then strict and design-time rows apart."""
    have = [s for s in results if s.verdict is not None]
    groups = [("all", have)] + [(split, [s for s in have if split_of(s.row) == split]) for split in SPLITS]
    lines = ["| rows | verdict | " + " | ".join(OUTCOMES) + " | all |", "|---|---|---|---|---|---|"]
    for label, group in groups:
        counts = Counter((s.verdict, _outcome(s.row.speedup)) for s in group)
        for v in Verdict:
            cells = [str(counts[(v, o)]) for o in OUTCOMES]
            total = sum(counts[(v, o)] for o in OUTCOMES)
            lines.append(f"| {label} | {v.value} | " + " | ".join(cells) + f" | {total} |")
    return lines


def bands(held: list[Scored], engines: dict) -> dict[str, dict]:
    """Each engine's band from its own held-out error factors, or the prior, and the largest
    shortfall a NO-GO must survive (`max_shortfall`; none without enough held-out rows)."""
    out = {}
    for name in sorted({s.row.engine for s in held}):
        mine = [s for s in held if s.row.engine == name and s.predicted is not None]
        band = band_of([s.error_factor for s in mine])
        shortfall = shortfall_of(mine)
        out[name] = {
            "held_out_rows": len(mine),
            "band": PRIOR_BAND if band is None else round(band, 2),
            "basis": "prior" if band is None else "held-out",
            "shipped": engines[name].uncertainty,
            "max_shortfall": None if shortfall is None else round(shortfall, 2),
            "shipped_max_shortfall": engines[name].max_shortfall,
        }
    return out


def constants_table(held: list[Scored], fitted: dict, priors: dict) -> list[str]:
    """One table per engine, a column per constant its priors mark for refitting."""
    lines: list[str] = []
    for name in sorted({s.row.engine for s in held}):
        keys = fitted_keys(priors[name])
        lines += [
            f"| {name}: fitted on | " + " | ".join(keys) + " |",
            "|---|" + "---|" * len(keys),
        ]
        start = " | ".join(f"{priors[name][k].value:.3g}" for k in keys)
        lines.append(f"| (the priors: the start of every fit) | {start} |")
        shipped = " | ".join(f"{value_of(fitted[name], k):.3g}" for k in keys)
        lines.append(f"| every source (shipped) | {shipped} |")
        for source in sorted({s.row.source for s in held if s.row.engine == name}):
            fold = next(s for s in held if s.row.engine == name and s.row.source == source)
            values = (
                " | ".join(f"{fold.constants[k]:.3g}" for k in keys) if fold.constants else "no other source"
            )
            lines.append(f"| all but {source} | {values} |")
        lines.append("")
    return lines[:-1]


def rows_table(catalog: Catalog, by_rule: dict[str, list[Scored]]) -> list[str]:
    index = {rule: {s.row.id: s for s in results} for rule, results in by_rule.items()}
    head = (
        "| row | source | engine | MoE | role | measured | held out | error | verdict held out "
        "| in sample | roofline | trivial |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(catalog.scored, key=lambda r: (r.engine, r.source, r.id)):
        held = index["held out"][row.id]
        mark = " (ceiling)" if held.at_ceiling else ""
        cells = [
            row.id,
            row.source,
            row.engine,
            "yes" if catalog.is_moe(row) else "",
            row.role,
            f"{row.speedup:.2f}",
            ("no held-out estimate" if held.predicted is None else f"{held.predicted:.2f}{mark}"),
            _fmt(held.error_factor),
            held.verdict.value if held.verdict else "–",
            _fmt(index["in sample"][row.id].predicted),
            _fmt(index["roofline"][row.id].predicted),
            _fmt(index["trivial"][row.id].predicted),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def evaluate(catalog: Catalog, engines: dict, priors: dict) -> dict[str, list[Scored]]:
    """Every rule's results, each list in the CSV's order of scored rows."""
    rows = list(catalog.rows)
    by_rule = {
        "held out": leave_one_source_out(catalog, engines, priors),
        "in sample": in_sample(catalog, engines),
        "in sample, first rule": in_sample(catalog, engines, worst_case=False),
        "roofline": roofline(catalog, engines),
        "c·τ": c_tau(rows),
        "anchor": anchor_constant(rows),
        "trivial": trivial(rows),
        "always GO": always_go(rows),
    }
    by_rule["held out, first rule"] = held_out_verdicts(by_rule["held out"], worst_case=False)
    order = {r.id: i for i, r in enumerate(rows)}
    return {rule: sorted(results, key=lambda s: order[s.row.id]) for rule, results in by_rule.items()}


def _value(v: Verdict | None) -> str | None:
    return v.value if v else None


def verdict_sections(by_rule: dict) -> list[str]:
    """Verdicts held out and in sample under the NO-GO rule shipped (docs/results/calibration/
    nogo-rules.md) and under the rule as first fixed, and the rows on which the two differ."""
    lines: list[str] = []
    held, first = by_rule["held out"], by_rule["held out, first rule"]
    for title, results in (
        ("NO-GO must survive the other sources' largest shortfall (shipped; nogo-rules.md)", held),
        ("NO-GO at the band's optimistic end (the rule as first fixed)", first),
    ):
        lines += [
            "",
            f"## Verdicts held out, {title}",
            "",
            "Each source's band (and, under the shipped rule, its shortfall) comes from the other sources' "
            "held-out rows.",
            "",
            *verdict_table(results),
        ]
        misses = contradictions(results)
        lines += ["", f"Held-out verdicts that contradict the measurement: {len(misses)}"]
        lines += [
            f"- {s.row.id}: {s.verdict.value}, predicted {s.predicted:.2f}×, measured {s.row.speedup:.2f}×"
            for s in misses
        ]
    moved = [(a, b) for a, b in zip(held, first, strict=True) if a.verdict is not b.verdict]
    lines += ["", f"Held-out verdicts the two rules disagree on: {len(moved)}"]
    lines += [
        f"- {a.row.id}: {b.verdict.value} → {a.verdict.value}, predicted {a.predicted:.2f}×, "
        f"measured {a.row.speedup:.2f}×"
        for a, b in moved
    ]
    for title, rule in (("shipped rule", "in sample"), ("rule as first fixed", "in sample, first rule")):
        lines += ["", f"## Verdicts in sample (the shipped profiles and bands), {title}", ""]
        lines += verdict_table(by_rule[rule])
    return lines


def report(catalog: Catalog, by_rule: dict, engines: dict, fitted: dict, priors: dict) -> str:
    """calibration.md: accuracy, verdicts, bands, fitted constants and every row."""
    rows = catalog.rows
    held = by_rule["held out"]
    sources = sorted({r.source for r in rows if r.scored})
    lines = ["# Calibration against published measurements, held out by source", ""]
    lines.append(
        f"{sum(r.scored for r in rows)} scored rows from {len(sources)} sources "
        f"({sum(r.role == 'excluded' for r in rows)} rows left out, listed at the end). Error factor = "
        "max(predicted/measured, measured/predicted). Every column is scored on the rows the held-out "
        "model has an estimate for; (n) is how many of them the rule covers."
    )
    lines += [
        "",
        "## Accuracy: the model held out, beside the baselines",
        "",
        *accuracy_table(catalog, by_rule),
    ]
    lines += [
        "",
        "## In sample: the shipped profiles on every scored row (a reconstruction, not a forecast)",
        "",
    ]
    lines += in_sample_table(catalog, by_rule["in sample"])
    lines += ["", "## Go/no-go: the point estimate on the measured side of 1× (rows outside 0.95–1.05×)", ""]
    lines += go_table(catalog, by_rule)
    lines += verdict_sections(by_rule)
    lines += ["", "## Bands: the 80th percentile of each engine's own held-out error factors", ""]
    lines += [
        "| engine | held-out rows | band | basis | shipped | largest shortfall | shipped |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, b in bands(held, engines).items():
        lines.append(
            f"| {name} | {b['held_out_rows']} | {b['band']:.2f} | {b['basis']} | {b['shipped']:.2f} | "
            f"{_fmt(b['max_shortfall'])} | {_fmt(b['shipped_max_shortfall'])} |"
        )
    lines += ["", "## Refitted constants, per fold", "", *constants_table(held, fitted, priors)]
    lines += ["", "## Every scored row", "", *rows_table(catalog, by_rule)]
    excluded = [r for r in rows if r.role == "excluded"]
    lines += ["", f"## Left out ({len(excluded)} rows)", "", "| row | why |", "|---|---|"]
    lines += [f"| {r.id} | {r.note.split('; ', 1)[-1]} |" for r in excluded]
    return "\n".join(lines) + "\n"


def payload(catalog: Catalog, by_rule: dict, engines: dict) -> dict:
    """calibration.json: every rule's summary per row set, the bands, and every scored row."""
    held = {s.row.id for s in by_rule["held out"] if s.predicted is not None}
    return {
        "summary": {
            label: {rule: summary(_only(by_rule[rule], ids & held)) for rule in RULES}
            for label, ids in _row_sets(catalog)
        },
        "bands": bands(by_rule["held out"], engines),
        "rows": [
            {
                "id": s.row.id,
                "source": s.row.source,
                "engine": s.row.engine,
                "moe": catalog.is_moe(s.row),
                "role": s.row.role.value,
                "measured": s.row.speedup,
                **{rule: by_rule[rule][i].predicted for rule in RULES},
                "verdict_held_out": _value(s.verdict),
                "verdict_held_out_first_rule": _value(by_rule["held out, first rule"][i].verdict),
                "verdict_in_sample": by_rule["in sample"][i].verdict.value,
                "at_ceiling": s.at_ceiling,
            }
            for i, s in enumerate(by_rule["held out"])
        ],
    }
