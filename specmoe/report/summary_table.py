"""The result table of a store, as `specmoe bench summary` and the end of `specmoe bench run` show it.

Rows are groups of SD runs (`--by`): by default one per configuration (cell), or one per value of
the columns named, every other column pooled (the speedup is then the ratio of mean rates over all
the group's paired units, `specmoe.results.compare.compare_by`) except the target and the draft, which
a speedup is of: rows are split by them too, and the table says so (`identity_split`). The table
shows the configuration columns that vary among its rows and no others: the ones the selection
holds fixed are listed once above it, and the ones a coarser `--by` pools over are named with
their values, so two rows never look alike while measuring different things. Server runs add a
latency table: TTFT and TPOT percentiles per arm and concurrency (`specmoe.results.latency`), noisy
runs left out and counted as in the result table.

The same table renders three ways: plain text (a file or a pipe), a rich table (a terminal,
`specmoe.report.summary_rich`) and JSON (`--json`, `specmoe.report.summary_json`), all from one
`SummaryTable`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmoe.errors import SpecmoeError
from specmoe.prompts import prompt_label
from specmoe.results.compare import Comparison, batch_category, cell_key, compare_by
from specmoe.results.latency import Latency, served_latency
from specmoe.results.noisy import NOISE_FIX
from specmoe.results.store import RunRow
from specmoe.stats import Estimate

CONFIG = "config"  # --by config: one row per configuration (the default)
CATEGORY = "category"  # --by category: the prompts' category (a batch's own, or "mixed")


def _prompt(config: dict) -> str:
    return prompt_label(config.get("prompt_set"), config.get("prompt_length"))


@dataclass(frozen=True)
class Column:
    """A configuration column: the name `--by` takes, its header, its value in a run's config."""

    name: str
    header: str
    value: Callable[[dict], Any]


def _key(key: str) -> Callable[[dict], Any]:
    return lambda config: config.get(key)


COLUMNS = (
    Column("target", "target", _key("target")),
    Column("draft", "draft", _key("draft")),
    Column("gamma", "γ", _key("gamma")),
    Column("prompt", "prompts", _prompt),
    Column("batch", "B", _key("batch_size")),
    Column("concurrency", "conc", _key("concurrency")),
    Column("request_rate", "req/s", _key("request_rate")),  # open loop; None in a closed loop
    Column("requests", "req/run", _key("requests")),
    Column("top_k", "top-k", _key("moe_top_k")),
    Column("temperature", "temp", _key("temperature")),
    Column("dtype", "dtype", _key("dtype")),
    Column("device", "device", _key("device")),
    Column("max_new_tokens", "max new", _key("max_new_tokens")),
    Column("compile", "compiled", _key("compile")),
    Column("chat", "chat", _key("chat")),
    Column("group", "group", _key("group")),
    Column("suite", "suite", _key("suite")),
)
BY_NAME = {c.name: c for c in COLUMNS}
ARM = Column("arm", "arm", _key("arm"))  # baseline or sd: rows of the latency table grouped by --by
ALWAYS = ("target", "draft", "gamma")  # what an SD row is: shown even when the selection fixes it
BY_CHOICES = (CONFIG, CATEGORY, *BY_NAME)
LOCAL_ONLY = ("batch", "dtype", "device", "compile")  # settings of local runs a server run records unused


def check_by(names: Sequence[str]) -> tuple[str, ...]:
    """The `--by` names, checked: an unknown one is one line with the choices and a near match."""
    for name in names:
        if name not in BY_CHOICES:
            near = difflib.get_close_matches(name, BY_CHOICES, n=1)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise SpecmoeError(f"unknown --by column '{name}'{hint}; choose from {', '.join(BY_CHOICES)}")
    return tuple(dict.fromkeys(names)) or (CONFIG,)


def show(value: Any) -> str:
    """A configuration value as a cell: "–" for none, 0.7 not 0.70000, yes/no for flags."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return format(value, "g")
    return str(value)


def speedup_text(estimate: Estimate, prompts: int = 0, copies: int = 0) -> str:
    """ "1.12× [1.05, 1.19] 95% n=10"; below 5 units "0.95× [0.90, 1.01] range, n=2"; one unit "n=1".
    With copies (a selection beyond the set), "... n=25 (10 prompts + 15 copies)": the units are
    not that many distinct prompts, which a reader of n would otherwise assume."""
    point = f"{estimate.value:.2f}×"
    label = f" ({prompts} prompts + {copies} copies)" if copies else ""
    if estimate.n < 2:
        return f"{point} n={estimate.n}{label}"
    bounds = f"[{estimate.low:.2f}, {estimate.high:.2f}]"
    if estimate.level is not None:
        return f"{point} {bounds} {estimate.level:.0%} n={estimate.n}{label}"
    return f"{point} {bounds} range, n={estimate.n}{label}"


def _fraction(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.1%}"


@dataclass(frozen=True)
class SummaryTable:
    """What the summary shows, before it is rendered."""

    by: tuple[str, ...]
    columns: tuple[Column, ...]  # configuration columns shown, in order
    with_category: bool
    comparisons: tuple[Comparison, ...]
    fixed: dict[str, Any]  # column name -> the one value every SD run of the selection has
    pooled: dict[str, list[str]]  # column name -> values pooled in each row (coarser --by)
    latency: tuple[Latency, ...]
    latency_columns: tuple[Column, ...]
    rows: tuple[RunRow, ...]
    split: tuple[str, ...] = ()  # identity columns --by did not name but rows are split by (identity_split)

    @property
    def noisy(self) -> list[RunRow]:
        return [r for r in self.rows if r.noisy]

    @property
    def beyond_bound(self) -> int:
        """Noisy runs the guard flagged for a speedup beyond their own acceptance's bound."""
        return sum(1 for r in self.noisy if r.measure.get("beyond_bound"))

    @property
    def failed(self) -> list[RunRow]:
        return [r for r in self.rows if r.audit_verdict != "pass"]


def distinct(configs: Sequence[dict], column: Column) -> list[Any]:
    """The column's values among the configs, in order of first appearance."""
    return list(dict.fromkeys(column.value(c) for c in configs))


def varying(configs: Sequence[dict], always: Sequence[str] = ()) -> tuple[Column, ...]:
    """The columns whose value differs between configs (plus `always`), in COLUMNS order; a column
    none of the configs has (None everywhere) is never shown."""
    shown = []
    for column in COLUMNS:
        values = {show(column.value(c)) for c in configs}
        if len(values) > 1 or (column.name in always and values != {"–"}):
            shown.append(column)
    return tuple(shown)


def build(rows: Sequence[RunRow], by: Sequence[str] = (CONFIG,), keep_noisy: bool = False) -> SummaryTable:
    """The summary of these runs grouped by `by` (see check_by); `keep_noisy`: a configuration whose
    runs were all flagged shows their numbers, marked BUSY (`summary.compare_by`)."""
    by = check_by(by)
    with_category = CATEGORY in by
    per_config = CONFIG in by
    split = () if per_config else identity_split(rows, by)
    named = [BY_NAME[n] for n in (*by, *split) if n in BY_NAME]

    def key(row: RunRow) -> tuple:
        parts: list[Any] = [cell_key(row)] if per_config else []
        parts += [show(c.value(row.config)) for c in named]
        return (*parts, batch_category(row) if with_category else None)

    # keep_unmeasured: a configuration whose runs were all flagged noisy is a row saying so, not gone.
    comparisons = tuple(
        compare_by(list(rows), key, with_category, keep_unmeasured=True, keep_noisy=keep_noisy)
    )
    sd_rows = [r for r in rows if r.arm == "sd"]
    if per_config:
        columns = varying([c.config for c in comparisons], ALWAYS)
        columns += tuple(c for c in named if c not in columns)
    else:
        columns = tuple(named)
    comparisons = sort_rows(comparisons, columns)
    # What the rows share or pool: over the configurations shown (one per row) or, when rows pool
    # configurations, over every SD run behind them.
    configs = [c.config for c in comparisons] if per_config and comparisons else [r.config for r in sd_rows]
    fixed, pooled = {}, {}
    served_only = bool(configs) and all(c.get("concurrency") is not None for c in configs)
    for column in COLUMNS:
        values = distinct(configs, column)
        if column in columns or values == [None] or (served_only and column.name in LOCAL_ONLY):
            continue
        if len(values) == 1:
            fixed[column.name] = values[0]
        else:
            pooled[column.name] = [show(v) for v in values]
    if per_config:
        served = tuple(served_latency(rows))
        latency_columns = varying([s.config for s in served], (*ALWAYS, "concurrency"))
    else:  # each arm apart, at each concurrency, within each group of --by
        load = [BY_NAME[n] for n in ("concurrency", "request_rate") if n not in by]  # never pooled
        pooled_by = (ARM, *named, *load)
        served = tuple(served_latency(rows, lambda r: tuple(show(c.value(r.config)) for c in pooled_by)))
        latency_columns = pooled_by
    return SummaryTable(
        by, columns, with_category, comparisons, fixed, pooled, served, latency_columns, tuple(rows), split
    )


IDENTITY = ("target", "draft")  # what a speedup is of: never pooled across (see identity_split)


def identity_split(rows: Sequence[RunRow], by: Sequence[str]) -> tuple[str, ...]:
    """The identity columns a coarser `--by` must split by too: target and draft where the SD runs
    hold more than one of them and `by` does not name them.

    A pooled speedup is the ratio of mean rates over every unit of the group; over two targets (an
    MoE and a dense model) or two drafts (a real draft and an oracle) it is the speedup of no
    configuration anyone runs, so it is never made. `--by gamma` over two drafts therefore gives one
    row per (gamma, target, draft), and the table says so above itself."""
    sd = [r.config for r in rows if r.arm == "sd"]
    return tuple(n for n in IDENTITY if n not in by and len(distinct(sd, BY_NAME[n])) > 1)


SORT_FIRST = ("target", "draft", "gamma", "batch")  # then the other shown columns, in COLUMNS order


def sort_rows(comparisons: Sequence[Comparison], columns: Sequence[Column]) -> tuple[Comparison, ...]:
    """Rows by target, draft, γ and batch size, then the other shown columns and the category, so
    a table reads as a grid whatever order the runs were measured in (blocks are shuffled)."""
    order = sorted(columns, key=lambda c: SORT_FIRST.index(c.name) if c.name in SORT_FIRST else 99)
    return tuple(
        sorted(
            comparisons,
            key=lambda c: (*(_order(col.value(c.config)) for col in order), _order(c.category)),
        )
    )


def _order(value: Any) -> tuple[int, float, str]:
    """A sort key for a configuration value: numbers by size, then text, then flags and none."""
    if value is None or isinstance(value, bool):
        return (2, 0.0, show(value))
    if isinstance(value, int | float):
        return (0, float(value), "")
    return (1, 0.0, str(value))


# --- rendering -----------------------------------------------------------------------------------

METRIC_HEADERS = ("base tok/s", "SD tok/s", "speedup [interval] level n", "accept", "T(1)/T(g+1)", "audit")
LATENCY_HEADERS = ("runs", "requests", "TTFT p50/p90/p99 ms", "TPOT p50/p90/p99 ms")
SPEEDUP_NOTE = (
    "speedup: mean SD tok/s / mean baseline tok/s over paired units (one prompt batch in one repeat, "
    "both arms back to back); interval: t-interval at the level shown, or the range of the units below "
    "5 of them"
)


IMPOSSIBLE = "impossible"  # the speedup cell of a row whose speedup breaks the physical bound


def _marks(c: Comparison) -> str:
    marks = ([f"{c.noisy} noisy"] if c.noisy else []) + (["BUSY"] if c.busy else [])
    marks += ["UNSTABLE"] if c.unstable else []
    return ", ".join(marks)


def header_cells(table: SummaryTable) -> list[str]:
    return (
        [c.header for c in table.columns] + ([CATEGORY] if table.with_category else []) + list(METRIC_HEADERS)
    )


def row_cells(table: SummaryTable, c: Comparison) -> list[str]:
    audit = "ok" if not c.audit_failures else f"{c.audit_failures} FAIL"
    marks = _marks(c)
    return [
        *(show(col.value(c.config)) for col in table.columns),
        *([c.category or "–"] if table.with_category else []),
        _rate(c.baseline_tokens_per_s),
        _rate(c.sd_tokens_per_s),
        c.no_number or (IMPOSSIBLE if c.impossible else speedup_text(c.speedup, c.prompts, c.copies)),
        _fraction(c.acceptance_rate),
        "–" if math.isnan(c.target_efficiency) else f"{c.target_efficiency:.2f}",
        audit + (f" ({marks})" if marks else ""),
    ]


def _rate(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.1f}"


def _ms(values: dict[str, float]) -> str:
    return "/".join(f"{values[p] * 1000:.0f}" for p in ("p50", "p90", "p99")) if values else "–"


def latency_headers(table: SummaryTable) -> list[str]:
    return [c.header for c in table.latency_columns] + list(LATENCY_HEADERS)


def latency_cells(table: SummaryTable, lat: Latency) -> list[str]:
    return [
        *(show(col.value(lat.config)) for col in table.latency_columns),
        str(lat.runs) + (f" (+{lat.noisy} noisy)" if lat.noisy else ""),
        str(lat.requests),
        _ms(lat.ttft_s),
        _ms(lat.tpot_s),
    ]


def context_lines(table: SummaryTable) -> list[str]:
    """What the table does not show: the values every row shares, and what rows pool."""
    lines = []
    if table.fixed:
        lines.append("every row: " + ", ".join(f"{n} {show(v)}" for n, v in table.fixed.items()))
    if table.pooled:
        lines.append(
            "pooled in each row: " + "; ".join(f"{n} {', '.join(v)}" for n, v in table.pooled.items())
        )
    if table.split:
        names, plural = " and ".join(table.split), " or ".join(f"{n}s" for n in table.split)
        lines.append(f"rows also split by {names}: a speedup is never pooled over different {plural}")
    return lines


def note_lines(table: SummaryTable) -> list[str]:
    """The lines under the table: the speedup's definition, the noise guard, the audit."""
    lines = [SPEEDUP_NOTE]
    flagged = [
        f"  {_describe(table, c)}: {what}"
        for c in table.comparisons
        for what in ([_noisy_note(c)] if c.noisy else [])
        + ([f"unstable: {c.unstable}"] if c.unstable else [])
    ]
    flagged += [
        f"  server latency {_describe_latency(table, lat)}: "
        f"{lat.noisy} noisy runs left out ({lat.noise_reason})"
        for lat in table.latency
        if lat.noisy
    ]
    noisy, rows = table.noisy, table.rows
    if noisy or flagged:
        lines.append(
            f"noise guard: {len(noisy)} of {len(rows)} runs flagged noisy (left out of every number"
            + (" but the BUSY rows'" if any(c.busy for c in table.comparisons) else "")
            + ")"
            + _beyond_bound_note(table.beyond_bound)
        )
        lines.extend(_first(flagged))
        if noisy:
            lines.append(f"  fix: {NOISE_FIX}")
    impossible = [f"  {_describe(table, c)}: {c.impossible}" for c in table.comparisons if c.impossible]
    if impossible:
        lines.append(
            f"{IMPOSSIBLE}: {len(impossible)} rows break the physical bound, so no speedup is shown for them"
        )
        lines.extend(_first(impossible))
    failed = table.failed
    lines.append(f"audit: {len(rows) - len(failed)} of {len(rows)} runs pass every invariant")
    lines.extend(_first([f"  FAIL {r.run_id[:12]} {r.group} {r.arm}: {r.audit_reason}" for r in failed]))
    # A baseline whose target cannot roll back a cache was measured alone (`Runner._runnable`).
    refused = sorted({r.env["sd_refused"] for r in rows if r.arm == "baseline" and r.env.get("sd_refused")})
    if refused:
        lines.append(f"SD skipped: {len(refused)} target(s) measured without their SD arms")
        lines.extend(_first([f"  {reason}" for reason in refused]))
    return lines


def _beyond_bound_note(beyond: int) -> str:
    return (
        f"; {beyond} of them with a speedup beyond 1 + alpha*gamma of their own acceptance" if beyond else ""
    )


def _noisy_note(c: Comparison) -> str:
    if c.busy:
        return f"BUSY: {c.busy}, its numbers kept and including the disturbance ({c.noise_reason})"
    return f"{c.noisy} noisy runs left out ({c.noise_reason})"


def _first(lines: list[str], limit: int = 20) -> list[str]:
    """At most `limit` lines, and how many more there are."""
    more = len(lines) - limit
    return lines[:limit] + ([f"  ... and {more} more"] if more > 0 else [])


def _describe_latency(table: SummaryTable, lat: Latency) -> str:
    columns = table.latency_columns if ARM in table.latency_columns else (ARM, *table.latency_columns)
    return " ".join(f"{col.name}={show(col.value(lat.config))}" for col in columns)


def _describe(table: SummaryTable, c: Comparison) -> str:
    parts = [f"{col.name}={show(col.value(c.config))}" for col in table.columns]
    return " ".join(parts + ([f"category={c.category}"] if table.with_category else []))


def plain_table(headers: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    """Aligned text columns: numbers right, names left."""
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]
    right = [is_number_column(i, body) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True))
        return "  ".join(padded).rstrip()

    head = line(headers)
    return [head, "-" * len(head), *(line(r) for r in body)]


def is_number_column(index: int, body: Sequence[Sequence[str]]) -> bool:
    """A column of plain numbers (or "–"), which reads best right-aligned."""
    return all(_is_number(r[index]) for r in body if r[index] != "–")


def _is_number(cell: str) -> bool:
    try:
        float(cell.rstrip("%").replace("/", ""))
    except ValueError:
        return False
    return True


def format_text(table: SummaryTable) -> str:
    """The summary as plain text (a file, a pipe, the end of a suite run)."""
    lines = context_lines(table)
    lines += plain_table(header_cells(table), [row_cells(table, c) for c in table.comparisons])
    if table.latency:
        lines += ["", "server latency per request (ms):"]
        lines += plain_table(latency_headers(table), [latency_cells(table, s) for s in table.latency])
    lines += ["", *note_lines(table)]
    return "\n".join(lines)


def format_summary(rows: list[RunRow], by_category: bool = False) -> str:
    """The plain-text summary of rows, one line per configuration (and prompt category)."""
    return format_text(build(rows, (CONFIG, CATEGORY) if by_category else (CONFIG,)))


def suite_names(rows: Sequence[RunRow]) -> list[str]:
    return list(dict.fromkeys(r.suite for r in rows))


def select(rows: Sequence[RunRow], suite: str | None, db: Path) -> list[RunRow]:
    """The store's rows of one suite (all with None); an empty selection is one line saying why."""
    if not rows:
        raise SpecmoeError(
            f"{db} holds no runs; run a suite into it first (specmoe bench run SUITE --db {db})"
        )
    if suite is None:
        return list(rows)
    chosen = [r for r in rows if r.suite == suite]
    if not chosen:
        raise SpecmoeError(f"{db} holds no runs of suite '{suite}'; it holds: {', '.join(suite_names(rows))}")
    return chosen
