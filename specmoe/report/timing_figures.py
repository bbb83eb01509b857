"""Figures of where each configuration's time goes (`report.arm_times`): decode milliseconds per output
token stacked by part, and the local prompt phase (prefill, time to first token). One row per
configuration, baselines and SD arms alike, in the tables' order; a configuration whose every run was
flagged noisy keeps its row, with the notice in place of a bar.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes

from specmoe.metrics import DECODE_PARTS, decode_parts
from specmoe.report.arm_times import ArmTiming, arm_timings
from specmoe.report.explain_figures import TIME_COLORS
from specmoe.report.figures import RUNS, Drawn, Omitted, Outcome, error_bars, interval_note, new_figure
from specmoe.report.results import Results
from specmoe.report.slices import SD_ONLY_AXES, label, varying_axes
from specmoe.report.timing_tables import NO_LOCAL_RUNS

BASELINE_ALPHA = 0.45  # baselines lighter than SD arms, as in the throughput view
ARM_COLORS = {"baseline": "0.45", "sd": "#5e3c99"}


def arm_label(t: ArmTiming, varying: Sequence[str]) -> str:
    """ "moe (top-2) · draft-xs · γ=4 · B=4" for an SD arm; "moe (top-2) · B=4 · baseline" for a baseline."""
    axes = ["target", *(a for a in varying if a not in ("target", *SD_ONLY_AXES))]
    if t.arm == "sd":
        return label(t.config, ["target", *SD_ONLY_AXES, *axes[1:]])
    return f"{label(t.config, axes)} · baseline"


def largest_parts(timings: Sequence[ArmTiming]) -> dict[str, int]:
    """For SD arms with numbers: how many spend most of their per-token time in each part."""
    counts = dict.fromkeys(DECODE_PARTS, 0)
    for t in timings:
        if t.arm == "sd" and t.per_token_ms:
            split = t.per_token_ms
            parts = decode_parts("state" in split)
            largest = max(parts, key=lambda part: split[part].value)
            counts[largest] = counts.get(largest, 0) + 1
    return counts


def decode_ms_per_token(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Decode time per output token: draft, verify, overhead"
    timings = [t for t in arm_timings(results.rows) if t.per_token_ms is not None or t.no_number]
    if not any(t.per_token_ms for t in timings):
        return Omitted(title, NO_LOCAL_RUNS)
    varying = varying_axes(t.config for t in timings)
    fig = new_figure(8.0, max(2.6, 1.3 + 0.27 * len(timings)))
    ax = fig.add_subplot()
    ys = np.arange(len(timings))
    left = np.zeros(len(timings))
    alphas = [BASELINE_ALPHA if t.arm == "baseline" else 1.0 for t in timings]
    for part in decode_parts(any("state" in (t.per_token_ms or {}) for t in timings)):
        widths = np.array(
            [
                t.per_token_ms[part].value if t.per_token_ms and part in t.per_token_ms else 0.0
                for t in timings
            ]
        )
        colors = [(TIME_COLORS[part], a) for a in alphas]
        ax.barh(ys, widths, left=left, color=colors, label=part)
        left += widths
    measured = [(y, t.per_token_ms["decode"]) for y, t in zip(ys, timings, strict=True) if t.per_token_ms]
    totals = [i for _, i in measured]
    ax.errorbar(
        [i.value for i in totals],
        [y for y, _ in measured],
        xerr=error_bars(totals),
        fmt="none",
        ecolor="black",
        capsize=2,
    )
    right = max(i.high for i in totals)
    for y, t in zip(ys, timings, strict=True):
        note = f"  {t.per_token_ms['decode'].value:.2f} ms" if t.per_token_ms else f"  {t.no_number}"
        ax.text(t.per_token_ms["decode"].high if t.per_token_ms else 0.0, y, note, va="center", fontsize=7)
    ax.set_xlim(0, 1.3 * right)  # room for the total printed after each bar
    ax.set_yticks(ys, [arm_label(t, varying) for t in timings])
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("decode milliseconds per output token")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3, frameon=False)
    return Drawn("decode_ms_per_token", title, _split_caption(timings, totals), fig)


def _split_caption(timings: Sequence[ArmTiming], totals) -> str:
    counts = largest_parts(timings)
    sd = sum(counts.values())
    caption = (
        "Decode milliseconds per output token of every configuration (light: baselines; solid: SD arms), "
        "stacked by part: drafting, verifying (the target's forwards) and host overhead; the printed "
        "number and its error bar are the decode time per token (decode_s, which the parts make up). "
    )
    if sd:
        parts = [f"{part} in {n}" for part, n in counts.items() if n]
        caption += f"The largest part of the SD arms' time per token is {', '.join(parts)} of {sd}. "
    flagged = sum(1 for t in timings if t.no_number)
    if flagged:
        caption += (
            f"{flagged} configuration{'s' if flagged != 1 else ''} had every run flagged noisy: no bar. "
        )
    return caption + interval_note(totals, RUNS).replace("Error bars:", "Error bars (on the sum):")


def prompt_phase(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Prefill and time to first token (local runs)"
    timings = [t for t in arm_timings(results.rows) if t.prefill_ms is not None or t.no_number]
    if not any(t.prefill_ms for t in timings):
        return Omitted(title, NO_LOCAL_RUNS)
    varying = varying_axes(t.config for t in timings)
    fig = new_figure(9.0, max(2.6, 1.3 + 0.27 * len(timings)))
    prefill_ax, ttft_ax = fig.subplots(1, 2, sharey=True)
    ys = np.arange(len(timings))
    _points(prefill_ax, timings, ys, lambda t: t.prefill_ms, "prefill (ms per run)")
    _points(ttft_ax, timings, ys, lambda t: t.ttft_ms, "time to first token (ms per run)")
    prefill_ax.set_yticks(ys, [arm_label(t, varying) for t in timings])
    prefill_ax.set_ylim(len(timings) - 0.5, -0.5)  # every row, top down, those without a point too
    return Drawn("prefill_ttft", title, _prompt_caption(timings), fig)


def _points(ax: Axes, timings: Sequence[ArmTiming], ys, value, xlabel: str) -> None:
    """One point per configuration with its interval; the notice where it has no number."""
    shown = [(y, t, value(t)) for y, t in zip(ys, timings, strict=True) if value(t) is not None]
    for arm in ("baseline", "sd"):
        items = [(y, i) for y, t, i in shown if t.arm == arm]
        if items:
            ax.errorbar(
                [i.value for _, i in items],
                [y for y, _ in items],
                xerr=error_bars([i for _, i in items]),
                fmt="o",
                color=ARM_COLORS[arm],
                capsize=2,
                markersize=4,
                label="SD arm" if arm == "sd" else "baseline",
            )
    values = [i for _, _, i in shown]
    if values and max(i.high for i in values) >= 20 * max(min(i.low for i in values), 1e-9):
        ax.set_xscale("log")
    elif values:
        ax.set_xlim(0, 1.08 * max(i.high for i in values))  # the rightmost point off the frame
    for y, t in zip(ys, timings, strict=True):
        if value(t) is None:
            text = t.no_number or "not traced"
            ax.text(0.02, y, text, va="center", fontsize=7, transform=ax.get_yaxis_transform())
    ax.grid(axis="y", visible=False)
    ax.set_xlabel(xlabel)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=2, frameon=False)


def _prompt_caption(timings: Sequence[ArmTiming]) -> str:
    caption = (
        "Mean milliseconds per run of the prompt phase (left: the batch's prompts cached by the target "
        "and, for SD arms, the drafter) and to the first output token (right: prefill plus the first "
        "round, which commits every sequence's first token). Grey: baselines; purple: SD arms. "
    )
    added = [t.ttft_ms.value - t.prefill_ms.value for t in timings if t.ttft_ms and t.prefill_ms]
    if added:
        caption += f"The first round adds a median {statistics.median(added):.2f} ms to prefill. "
    untraced = sum(1 for t in timings if t.prefill_ms and t.ttft_ms is None)
    if untraced:
        caption += f"{untraced} configuration{'s' if untraced != 1 else ''} kept no round trace: no TTFT. "
    flagged = sum(1 for t in timings if t.no_number)
    if flagged:
        caption += (
            f"{flagged} configuration{'s' if flagged != 1 else ''} had every run flagged noisy: no point. "
        )
    prefill = [t.prefill_ms for t in timings if t.prefill_ms]
    return caption + interval_note(prefill, RUNS).replace("Error bars:", "Error bars (prefill):")


TIMING_FIGURES = (decode_ms_per_token, prompt_phase)
