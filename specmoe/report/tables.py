"""The report's tables: baseline throughput, every SD result, and drafts compared on one target.

Each table has two forms: `records` with raw numbers (interval bounds in their own columns) for the
CSV file, and `cells`, formatted strings with units, for the HTML page.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmoe.report.figures import Omitted
from specmoe.report.intervals import Interval
from specmoe.report.results import BaselineResult, Results, SdResult
from specmoe.report.sizes import is_moe_target, target_size
from specmoe.report.slices import (
    AXES,
    SORT_AXES,
    axis_value,
    format_axis,
    group_by,
    sort_key,
    varying_axes,
)

# Setting columns shown on the page: those of AXES that vary (target, draft, γ always shown).
_SETTING_AXES = tuple(a for a in AXES if a not in ("target", "draft", "gamma"))
_CSV_SETTINGS = (*_SETTING_AXES, "moe_top_k")


@dataclass(frozen=True)
class Table:
    name: str  # file stem of the CSV
    title: str
    caption: str
    columns: tuple[str, ...]  # page headings
    cells: tuple[tuple[str, ...], ...]  # page rows, formatted
    records: tuple[dict[str, Any], ...]  # CSV rows, raw values; keys in CSV column order


class Rows:
    """A table's rows as they are built, each with its configuration; `table` puts them in the
    report's row order (`slices.sort_key`: target, draft, γ, batch size, then the other axes)."""

    def __init__(self) -> None:
        self._rows: list[tuple[dict[str, Any], tuple[str, ...], dict[str, Any]]] = []

    def add(self, config: dict[str, Any], cells: tuple[str, ...], record: dict[str, Any]) -> None:
        self._rows.append((config, cells, record))

    def table(
        self, name: str, title: str, caption: str, columns: tuple[str, ...], axes: Sequence[str] = SORT_AXES
    ) -> Table:
        ordered = sorted(self._rows, key=lambda row: sort_key(row[0], axes))
        return Table(
            name, title, caption, columns, tuple(c for _, c, _ in ordered), tuple(r for _, _, r in ordered)
        )


def write_csv(table: Table, folder: Path) -> Path:
    path = folder / f"{table.name}.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(table.records[0]))
        writer.writeheader()
        writer.writerows(table.records)
    return path


def interval_fields(prefix: str, interval: Interval) -> dict[str, float | int | None]:
    """The estimate, its bounds, their level (empty: the bounds are the units' range) and n."""
    return {
        prefix: interval.value,
        f"{prefix}_low": interval.low,
        f"{prefix}_high": interval.high,
        f"{prefix}_level": interval.level,
        f"{prefix}_n": interval.n,
    }


def no_number_fields(*prefixes: str) -> dict[str, None]:
    """The interval fields of a row the noise guard left without a number: empty in the CSV."""
    empty = Interval(math.nan, math.nan, math.nan, 0)
    return {key: None for prefix in prefixes for key in interval_fields(prefix, empty)}


def csv_settings(config: dict[str, Any]) -> dict[str, Any]:
    return {axis: config.get(axis) for axis in _CSV_SETTINGS}


def shown_axes(varying: Sequence[str]) -> list[str]:
    return [a for a in _SETTING_AXES if a in varying]


def setting_cells(config: dict[str, Any], shown: Sequence[str]) -> tuple[str, ...]:
    return tuple(format_axis(a, axis_value(config, a)) or "–" for a in shown)


def _params(result: BaselineResult | SdResult) -> tuple[str, str]:
    if result.size is None:
        return "unknown", "unknown"
    return f"{result.size.active_params:,}", f"{result.size.total_params:,}"


NOISY_NOTE = (
    "Runs the noise guard flagged noisy are in no number: a configuration with some flagged runs shows "
    "the numbers of the rest and how many were left out; one with every run (or every pair) flagged is "
    "listed with no number."
)


UNSTABLE_NOTE = (
    "UNSTABLE (as `specmoe bench summary` marks it): the configuration's repeats of one prompt batch "
    "disagree: the machine did not time the same work the same way, so measure it again before "
    "relying on its numbers."
)


def status_cell(audit_failures: int, unstable: str) -> str:
    """The audit / stability cell: "pass" only for a row that passed its audit and is stable."""
    audit = "pass" if not audit_failures else f"{audit_failures} failed"
    if not unstable:
        return audit
    return f"UNSTABLE: {unstable}" if not audit_failures else f"{audit}; UNSTABLE: {unstable}"


def count_cell(count: int, noisy: int) -> str:
    """Runs or units behind a row's numbers, and the flagged runs left out of them."""
    return f"{count} ({noisy} noisy left out)" if noisy else str(count)


def _copies_note(r: SdResult) -> str:
    """Beside the units of a cell whose selection went past its set: they are not that many prompts."""
    return f" ({r.prompts} prompts + {r.copies} copies)" if r.copies else ""


def baseline_table(results: Results) -> Table | Omitted:
    title = "Baseline decode throughput (no speculative decoding)"
    unmeasured = [u for u in results.unmeasured if u.arm == "baseline"]
    if not results.baselines and not unmeasured:
        return Omitted(title, "no baseline runs")
    shown = shown_axes(
        varying_axes([*(b.config for b in results.baselines), *(u.config for u in unmeasured)])
    )
    rows = Rows()
    for b in results.baselines:
        active, total = _params(b)
        rows.add(
            b.config,
            (
                format_axis("target", axis_value(b.config, "target")),
                "MoE" if b.moe else "dense",
                active,
                total,
                *setting_cells(b.config, shown),
                count_cell(b.repeats, b.noisy),
                b.tokens_per_s.format(1),
            ),
            {
                "target": b.settings.target,
                "moe": b.moe,
                "active_params": b.size.active_params if b.size else None,
                "total_params": b.size.total_params if b.size else None,
                **csv_settings(b.config),
                "runs": b.repeats,
                **interval_fields("tokens_per_s", b.tokens_per_s),
                "noisy_runs": b.noisy,
                "no_number": None,
            },
        )
    for u in unmeasured:
        size = target_size(u.settings)
        active, total = (
            ("unknown", "unknown") if size is None else (f"{size.active_params:,}", f"{size.total_params:,}")
        )
        rows.add(
            u.config,
            (
                format_axis("target", axis_value(u.config, "target")),
                "MoE" if is_moe_target(u.settings) else "dense",
                active,
                total,
                *setting_cells(u.config, shown),
                count_cell(0, u.noisy),
                f"{u.why} ({u.reason})",
            ),
            {
                "target": u.settings.target,
                "moe": is_moe_target(u.settings),
                "active_params": size.active_params if size else None,
                "total_params": size.total_params if size else None,
                **csv_settings(u.config),
                "runs": 0,
                **no_number_fields("tokens_per_s"),
                "noisy_runs": u.noisy,
                "no_number": u.why,
            },
        )
    columns = (
        "target",
        "kind",
        "active params",
        "total params",
        *shown,
        "runs",
        "tokens/s [interval] (level, n)",
    )
    caption = (
        "Mean decode tokens/s (emitted tokens ÷ decode seconds) of each baseline configuration. " + NOISY_NOTE
    )
    return rows.table("baseline_throughput", title, caption, columns)


def sd_table(results: Results) -> Table | Omitted:
    title = "Speculative decoding results"
    unmeasured = [u for u in results.unmeasured if u.arm == "sd"]
    if not results.sd and not unmeasured:
        return Omitted(title, "no SD runs with a matching baseline")
    shown = shown_axes(varying_axes([*(r.config for r in results.sd), *(u.config for u in unmeasured)]))
    rows = Rows()
    for r in results.sd:
        rows.add(
            r.config,
            (
                format_axis("target", axis_value(r.config, "target")),
                str(r.settings.draft_name),
                str(r.settings.gamma),
                *setting_cells(r.config, shown),
                count_cell(r.repeats, r.noisy) + _copies_note(r),
                r.baseline_tokens_per_s.format(1),
                r.sd_tokens_per_s.format(1),
                _speedup_cell(r),
                f"{r.acceptance_rate:.1%}",
                _optional(r.mean_accepted_length),
                _optional(r.target_efficiency),
                status_cell(r.audit_failures, r.unstable),
            ),
            {
                "target": r.settings.target,
                "draft": r.settings.draft_name,
                "gamma": r.settings.gamma,
                **csv_settings(r.config),
                "units": r.repeats,
                "copies": r.copies,
                **interval_fields("baseline_tokens_per_s", r.baseline_tokens_per_s),
                **interval_fields("sd_tokens_per_s", r.sd_tokens_per_s),
                **_speedup_fields(r),
                "acceptance_rate": r.acceptance_rate,
                "mean_accepted_length": r.mean_accepted_length,
                "target_efficiency": r.target_efficiency,
                "audit_failures": r.audit_failures,
                "unstable": r.unstable or None,
                "noisy_runs": r.noisy,
                "no_number": None,
            },
        )
    for u in unmeasured:
        rows.add(
            u.config,
            (
                format_axis("target", axis_value(u.config, "target")),
                str(u.settings.draft_name),
                str(u.settings.gamma),
                *setting_cells(u.config, shown),
                count_cell(0, u.noisy),
                "–",
                "–",
                f"{u.why} ({u.reason})",
                "–",
                "–",
                "–",
                "–",
            ),
            {
                "target": u.settings.target,
                "draft": u.settings.draft_name,
                "gamma": u.settings.gamma,
                **csv_settings(u.config),
                "units": 0,
                "copies": None,
                **no_number_fields("baseline_tokens_per_s", "sd_tokens_per_s", "speedup"),
                "speedup_impossible": None,
                "acceptance_rate": None,
                "mean_accepted_length": None,
                "target_efficiency": None,
                "audit_failures": None,
                "unstable": None,
                "noisy_runs": u.noisy,
                "no_number": u.why,
            },
        )
    columns = (
        "target",
        "draft",
        "γ",
        *shown,
        "units",
        "baseline tokens/s [interval] (level, n)",
        "SD tokens/s [interval] (level, n)",
        "speedup [interval] (level, n)",
        "acceptance",
        "mean accepted length",
        "target efficiency",
        "audit / stability",
    )
    caption = (
        "Every SD configuration beside its baseline. Acceptance: accepted ÷ drafted. Mean accepted length: "
        "tokens committed per sequence-round, the bonus/correction token included. Target efficiency: "
        "T(B,1) ÷ T(B,γ+1). Units: paired prompt batches × repeats (both arms back to back). Speedup "
        "intervals: the ratio estimator's t-interval over the units at the level shown, or their range "
        "(no level) below 5 units. " + UNSTABLE_NOTE + " " + NOISY_NOTE
    )
    return rows.table("sd_results", title, caption, columns)


def _speedup_cell(r: SdResult) -> str:
    """The speedup with its interval, or "impossible" when it breaks the physical bound."""
    return f"impossible ({r.impossible})" if r.impossible else r.speedup.format(2, "×")


def _speedup_fields(r: SdResult) -> dict:
    """The speedup's CSV fields: empty for an impossible speedup, whose reason is given instead."""
    fields = interval_fields("speedup", r.speedup)
    if r.impossible:
        fields = dict.fromkeys(fields)
    return {**fields, "speedup_impossible": r.impossible or None}


def _optional(value: float | None) -> str:
    """Two decimals, or "–" for a value that is unknown (None, or nan for a server run's efficiency)."""
    return "–" if value is None or math.isnan(value) else f"{value:.2f}"


def draft_table(results: Results) -> Table | Omitted:
    title = "Draft comparison"
    model_drafts = [r for r in results.sd if r.oracle_p is None]
    others = [a for a in AXES if a != "draft"]
    others_sorted = [a for a in SORT_AXES if a != "draft"]
    groups = [g for g in group_by(model_drafts, others) if len({r.settings.draft_name for r in g}) > 1]
    if not groups:
        return Omitted(title, "no target was run with two or more draft models under the same settings")
    shown = shown_axes(varying_axes(r.config for g in groups for r in g))
    rows = Rows()
    for group in groups:
        possible = [r for r in group if not r.impossible]
        best = max(possible, key=lambda r: r.speedup.value) if possible else None
        for r in group:
            rows.add(
                r.config,
                (
                    format_axis("target", axis_value(r.config, "target")),
                    str(r.settings.gamma),
                    *setting_cells(r.config, shown),
                    str(r.settings.draft_name),
                    _speedup_cell(r),
                    f"{r.acceptance_rate:.1%}",
                    r.sd_tokens_per_s.format(1),
                    "✓" if r is best else "",
                ),
                {
                    "target": r.settings.target,
                    "gamma": r.settings.gamma,
                    **csv_settings(r.config),
                    "draft": r.settings.draft_name,
                    **_speedup_fields(r),
                    "acceptance_rate": r.acceptance_rate,
                    **interval_fields("sd_tokens_per_s", r.sd_tokens_per_s),
                    "fastest": r is best,
                },
            )
    columns = (
        "target",
        "γ",
        *shown,
        "draft",
        "speedup [interval] (level, n)",
        "acceptance",
        "SD tokens/s [interval] (level, n)",
        "fastest",
    )
    caption = (
        "Drafts compared on the same target and settings; ✓ marks the highest mean speedup (check whether "
        "the intervals overlap before calling a winner)."
    )
    # The drafts compared with each other sit together: the draft is this table's last sort key.
    return rows.table("draft_comparison", title, caption, columns, (*others_sorted, "draft"))


TABLES = (baseline_table, sd_table, draft_table)
