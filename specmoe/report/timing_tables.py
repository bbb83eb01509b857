"""Tables of where each configuration's time goes (`report.arm_times`): decode milliseconds per output
token split into draft, verify and overhead, and the local prompt phase (prefill, time to first
token). One row per configuration, baselines and SD arms alike, in the report's row order.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from specmoe.metrics import decode_parts
from specmoe.report.arm_times import ArmTiming, arm_timings
from specmoe.report.figures import Omitted
from specmoe.report.results import Results
from specmoe.report.slices import axis_value, format_axis, varying_axes
from specmoe.report.tables import (
    NOISY_NOTE,
    Rows,
    Table,
    count_cell,
    csv_settings,
    interval_fields,
    no_number_fields,
    setting_cells,
    shown_axes,
)

NO_LOCAL_RUNS = "no local runs (server runs time neither the per-round parts nor a local prompt phase)"
INTERVAL_NOTE = (
    "Intervals over the arm's runs (one prompt batch in one repeat each): a t-interval at the level "
    "shown from 5 runs on, below that the runs' range (no level); one run has none. "
)


def decode_split_table(results: Results) -> Table | Omitted:
    title = "Decode time per output token, by configuration"
    timings = [t for t in arm_timings(results.rows) if t.per_token_ms is not None or t.no_number]
    if not timings:
        return Omitted(title, NO_LOCAL_RUNS)
    # the split's columns: its parts (the state rollback only where spent), then their sum
    parts = (*decode_parts(any("state" in (t.per_token_ms or {}) for t in timings)), "decode")
    columns = tuple(f"{part} ms/token [interval] (level, n)" for part in parts)
    caption = (
        "Milliseconds of decode per output token, split into drafting, verifying and host overhead "
        "(Σ part seconds ÷ Σ emitted tokens over the configuration's runs, metrics.decode_split_per_token); "
        "the decode column is their sum, the reciprocal of the arm's pooled decode tokens/s. A baseline "
        "has no drafter: its draft part is zero. "
        + ("The state column is hybrid models' linear-attention state rollback. " if "state" in parts else "")
        + INTERVAL_NOTE
        + NOISY_NOTE
    )
    empty = no_number_fields(*(f"{part}_ms" for part in parts))
    values = partial(_split_values, parts)
    return _arm_table("decode_ms_per_token", title, caption, timings, columns, values, empty)


def _split_values(parts: tuple[str, ...], t: ArmTiming) -> tuple[tuple[str, ...], dict[str, Any]]:
    split = t.per_token_ms or {}
    zero = split["draft"].scaled(0.0) if "draft" in split else None  # a dense arm among hybrid ones

    def part_of(part: str):
        return split.get(part, zero)

    cells = tuple(
        "–" if t.arm == "baseline" and part == "draft" else part_of(part).format(3) for part in parts
    )
    fields = {k: v for part in parts for k, v in interval_fields(f"{part}_ms", part_of(part)).items()}
    return cells, fields


def prompt_phase_table(results: Results) -> Table | Omitted:
    title = "Prefill and time to first token, by configuration"
    timings = [t for t in arm_timings(results.rows) if t.prefill_ms is not None or t.no_number]
    if not timings:
        return Omitted(title, NO_LOCAL_RUNS)
    columns = ("prefill ms [interval] (level, n)", "time to first token ms [interval] (level, n)")
    caption = (
        "Mean milliseconds per run of the prompt phase (prefill: the batch's prompts cached by the target "
        "and, for SD, the drafter) and to the first output token (prefill plus the first round, "
        "metrics.local_time_to_first_token; every sequence of a batch gets its first token then). Server "
        "runs' time to first token is per request, in the serving latency table. "
        + INTERVAL_NOTE
        + NOISY_NOTE
    )
    empty = no_number_fields("prefill_ms", "ttft_ms")
    return _arm_table("prefill_ttft", title, caption, timings, columns, _prompt_values, empty)


def _prompt_values(t: ArmTiming) -> tuple[tuple[str, ...], dict[str, Any]]:
    assert t.prefill_ms is not None
    ttft = t.ttft_ms
    cells = (t.prefill_ms.format(2), "not traced" if ttft is None else ttft.format(2))
    fields = {
        **interval_fields("prefill_ms", t.prefill_ms),
        **(no_number_fields("ttft_ms") if ttft is None else interval_fields("ttft_ms", ttft)),
    }
    return cells, fields


def _arm_table(
    name: str,
    title: str,
    caption: str,
    timings: list[ArmTiming],
    columns: tuple[str, ...],
    values: Callable[[ArmTiming], tuple[tuple[str, ...], dict[str, Any]]],
    empty: dict[str, None],
) -> Table:
    """One row per arm timing: its configuration, arm and runs, then `values`; a row without numbers
    says why in the first value column and leaves the CSV fields `empty`."""
    shown = shown_axes(varying_axes(t.config for t in timings))
    rows = Rows()
    for t in timings:
        if t.no_number:
            cells: tuple[str, ...] = (f"{t.no_number} ({t.reason})", *("–" for _ in columns[1:]))
            fields: dict[str, Any] = dict(empty)
        else:
            cells, fields = values(t)
        sd = t.arm == "sd"
        rows.add(
            t.config,
            (
                format_axis("target", axis_value(t.config, "target")),
                str(t.settings.draft_name) if sd else "–",
                str(t.settings.gamma) if sd else "–",
                *setting_cells(t.config, shown),
                "SD" if sd else "baseline",
                count_cell(t.runs, t.noisy),
                *cells,
            ),
            {
                "target": t.settings.target,
                "draft": t.settings.draft_name,
                "gamma": t.settings.gamma if sd else None,
                **csv_settings(t.config),
                "arm": t.arm,
                "runs": t.runs,
                **fields,
                "noisy_runs": t.noisy,
                "no_number": t.no_number or None,
            },
        )
    heads = ("target", "draft", "γ", *shown, "arm", "runs")
    return rows.table(name, title, caption, (*heads, *columns))
