"""Views that explain a speedup: where an SD run's decode time goes, and where its drafts fail.

A speedup is the baseline's time per token over the SD arm's; the SD arm spends that time drafting,
verifying and in host overhead (`metrics.time_shares_of`), and commits 1 + accepted tokens per
sequence-round, which the acceptance at each draft position decides (`metrics.position_acceptance`).
Each view has a pure data function (results in, plotted series out) and a builder that draws it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specmoe.report.figures import PAIR, Drawn, Omitted, Outcome, fixed_phrase, new_figure, series_color
from specmoe.report.results import Results, SdResult
from specmoe.report.slices import SORT_AXES, best_slice, group_by, label, sorted_by_config

TIME_PARTS = ("draft", "verify", "state", "overhead")  # metrics.time_shares_of's keys, in stacking order
TIME_COLORS = {"draft": "#fdb863", "verify": "#5e3c99", "state": "#e66101", "overhead": "#b2abd2"}


@dataclass(frozen=True)
class TimeSplitBar:
    label: str  # the configuration, e.g. "moe (top-4) · draft-xs · γ=4 · B=16"
    shares: dict[str, float]  # TIME_PARTS -> share of decode time, summing to 1
    speedup: float  # mean speedup of the configuration, printed beside its bar


def time_split_bars(results: Results, varying: Sequence[str]) -> list[TimeSplitBar]:
    """One bar per SD configuration whose runs measured their per-round times.

    Labels name the pair, γ and every other axis that varies in the result set; bars are sorted by
    those axes in that order (numbers by value), so a pair's configurations sit together.
    """
    axes = [*PAIR, "gamma", *(a for a in SORT_AXES if a in varying and a not in (*PAIR, "gamma"))]
    timed = sorted_by_config((r for r in results.sd if r.time_shares is not None), axes)
    return [TimeSplitBar(label(r.config, axes), dict(r.time_shares), r.speedup.value) for r in timed]


def time_split(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Where SD decode time goes: draft, verify, overhead"
    bars = time_split_bars(results, varying)
    if not bars:
        return Omitted(title, "no SD run measured its per-round draft and verify times (server runs do not)")
    fig = new_figure(7.5, max(2.5, 1.2 + 0.26 * len(bars)))
    ax = fig.add_subplot()
    ys = np.arange(len(bars))
    left = np.zeros(len(bars))
    parts = [p for p in TIME_PARTS if any(p in b.shares for b in bars)]  # "state": hybrid models only
    for part in parts:
        widths = np.array([100 * b.shares.get(part, 0.0) for b in bars])
        ax.barh(ys, widths, left=left, color=TIME_COLORS[part], label=part)
        left += widths
    ax.set_yticks(ys, [f"{b.label}  ({b.speedup:.2f}×)" for b in bars])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("share of SD decode time (%)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3, frameon=False)
    caption = (
        "Decode time of each SD configuration split into drafting (the draft's forwards), verification "
        "(the target's forwards over γ+1 tokens) and host overhead (acceptance, bookkeeping, cache "
        "rollback), summed over its runs; the mean speedup is in brackets. A large verify share at a low "
        "speedup points at the target's efficiency; a large draft share at the draft's cost."
        + (
            " Hybrid models add the rollback of their linear-attention state (state)."
            if "state" in parts
            else ""
        )
    )
    return Drawn("time_split", title, caption, fig)


@dataclass(frozen=True)
class PositionSeries:
    label: str  # the target/draft pair
    gamma: int
    shares: tuple[float, ...]  # [γ]: share of sequence-rounds that accepted position j = 1..γ
    oracle_p: float | None = None  # an oracle draft's dialed per-position probability


def position_series(results: Results) -> tuple[list[PositionSeries], dict]:
    """Acceptance by draft position per pair and γ, from the slice with the most such series.

    Returns the series (grouped by γ, then pair, in store order) and the axes the slice holds fixed.
    """
    counted = [r for r in results.sd if r.position_acceptance]
    chosen = best_slice(counted, x="gamma", series=PAIR)
    if chosen is None:
        return [], {}
    series = []
    for gamma in sorted({r.settings.gamma for r in chosen.items}):
        for group in group_by([r for r in chosen.items if r.settings.gamma == gamma], PAIR):
            r: SdResult = group[0]
            series.append(PositionSeries(label(r.config, PAIR), gamma, r.position_acceptance, r.oracle_p))
    return series, chosen.fixed


def acceptance_by_position(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Acceptance by draft position"
    series, fixed = position_series(results)
    if not series:
        return Omitted(title, "no SD run kept per-position acceptance counts")
    gammas = sorted({s.gamma for s in series})
    cols = min(3, len(gammas))
    rows = math.ceil(len(gammas) / cols)
    pairs = list(dict.fromkeys(s.label for s in series))  # one colour per pair across panels
    fig = new_figure(4.2 * cols, (3.0 + 0.17 * len(pairs)) * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, gamma in zip(axes, gammas, strict=False):
        for s in (s for s in series if s.gamma == gamma):
            positions = range(1, len(s.shares) + 1)
            color = series_color(pairs.index(s.label))
            ax.plot(positions, [100 * v for v in s.shares], marker="o", color=color, label=s.label)
        for p in sorted({s.oracle_p for s in series if s.gamma == gamma and s.oracle_p is not None}):
            # An oracle accepts each position independently with p: position j survives with p^j.
            positions = np.arange(1, gamma + 1)
            ax.plot(positions, 100 * p**positions, ":", color="0.3", label=f"p^j for oracle p={p:g}")
        ax.set_xticks(range(1, gamma + 1))
        ax.set_ylim(0, 100)
        ax.set_title(f"γ={gamma}")
        ax.set_xlabel("draft position j")
        ax.set_ylabel("rounds accepting position j (%)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    for ax in axes[len(gammas) :]:
        ax.set_visible(False)
    at = fixed_phrase(fixed, varying)
    caption = (
        f"Share of sequence-rounds whose j-th draft token the target accepted, one panel per γ{at}. "
        "A round stops at its first rejection, so the share never rises with j; how fast it falls says how "
        "far ahead the draft stays in step with the target. Its sum over j is the mean accepted "
        "draft tokens per round. Oracle drafts come with p^j, what their dialed p gives."
    )
    return Drawn("acceptance_by_position", title, caption, fig)


EXPLAIN_FIGURES = (time_split, acceptance_by_position)
