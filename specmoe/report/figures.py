"""What every report figure shares: the outcome of building one, colours, error bars, saving.

Figures are `matplotlib.figure.Figure` objects created directly, never through pyplot, so no global
figure registry or interactive backend is involved; PNG output goes through the Agg renderer.
A view with nothing to show returns `Omitted` with the reason instead of an empty plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib.colors as mcolors
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from specmoe.report.intervals import Interval
from specmoe.report.results import Results, SdResult
from specmoe.report.slices import describe_fixed

RC_PARAMS = {
    # Model names, prompt sets and paths are user text: a "$" in one must not switch to math mode.
    "text.parse_math": False,
    # Fixed ids inside the SVG files, so the same store renders to the same bytes.
    "svg.hashsalt": "specmoe-report",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
}
PNG_DPI = 150

# The study's convention: purple for MoE targets, green for dense ones.
MOE_COLOR = "#7b3294"
DENSE_COLOR = "#1b7837"
SERIES_COLORS = tuple(mcolors.TABLEAU_COLORS.values())
SPEEDUP_LABEL = "speedup (× baseline decode tokens/s)"
NO_SPEEDUP_STYLE = {"color": "0.4", "linestyle": "--", "linewidth": 1}
PAIRED_UNITS = "paired units (prompt batch × repeat)"  # the units of a speedup's interval
RUNS = "runs (prompt batch × repeat)"  # the units of one arm's mean (tokens/s, prefill seconds)
PAIR = ("target", "draft")  # the series of most views: one line per target/draft pair


@dataclass(frozen=True)
class Drawn:
    name: str  # file stem of the PNG and SVG
    title: str
    caption: str
    figure: Figure


@dataclass(frozen=True)
class Omitted:
    title: str
    reason: str


Outcome = Drawn | Omitted


def model_drafts(results: Results) -> list[SdResult]:
    """SD results with a real draft model: oracle drafts dial acceptance, they are not deployable."""
    return [r for r in results.sd if r.oracle_p is None]


def fixed_phrase(fixed: dict, varying: Sequence[str]) -> str:
    """ " at B=1, γ=4" for a caption, naming only the fixed axes that vary in the result set."""
    text = describe_fixed(fixed, varying)
    return f" at {text}" if text else ""


def new_figure(width: float = 6.4, height: float = 4.0) -> Figure:
    """A figure of the given size in inches, laid out so labels are never clipped."""
    return Figure(figsize=(width, height), layout="constrained")


def family_color(moe: bool) -> str:
    return MOE_COLOR if moe else DENSE_COLOR


def series_color(index: int) -> str:
    return SERIES_COLORS[index % len(SERIES_COLORS)]


def interval_note(intervals: Sequence[Interval], units: str = PAIRED_UNITS) -> str:
    """What the error bars of these plotted intervals are, read from the intervals themselves: how
    many are t-intervals at which level and n, how many only the units' range (n below 5), and how
    many a single unit with no bar."""
    parts = []
    for level in sorted({i.level for i in intervals if i.level is not None}):
        at = [i.n for i in intervals if i.level == level]
        parts.append(f"{level:.0%} t-interval over {units} for {_points(len(at))} ({_n_span(at)})")
    ranges = [i.n for i in intervals if i.level is None and i.n > 1]
    if ranges:
        parts.append(f"the units' range, no confidence level, for {_points(len(ranges))} ({_n_span(ranges)})")
    single = sum(1 for i in intervals if i.n <= 1)
    if single:
        parts.append(f"no bar for {_points(single)} measured once (n=1)")
    return "Error bars: " + "; ".join(parts) + "." if parts else ""


def _points(count: int) -> str:
    return f"{count} point{'s' if count != 1 else ''}"


def _n_span(ns: Sequence[int]) -> str:
    low, high = min(ns), max(ns)
    return f"n={low}" if low == high else f"n={low}–{high}"


def error_bars(intervals: Sequence[Interval]) -> list[list[float]]:
    """matplotlib's asymmetric error format: distances below and above each point."""
    return [[i.value - i.low for i in intervals], [i.high - i.value for i in intervals]]


def plot_intervals(
    ax: Axes,
    xs: Sequence[float],
    intervals: Sequence[Interval],
    *,
    color: str,
    label: str,
    linestyle: str = "-",
    marker: str = "o",
) -> None:
    ax.errorbar(
        xs,
        [i.value for i in intervals],
        yerr=error_bars(intervals),
        color=color,
        label=label,
        linestyle=linestyle,
        marker=marker,
        capsize=3,
        markersize=5,
    )


def plot_speedup_per_pair(ax: Axes, items: Sequence[SdResult], x: str) -> None:
    """One line of speedup (with intervals) against config[x] per target/draft pair."""
    from specmoe.report.slices import group_by, label

    for index, group in enumerate(group_by(items, PAIR)):
        group = sorted(group, key=lambda r: r.config[x])
        plot_intervals(
            ax,
            [r.config[x] for r in group],
            [r.speedup for r in group],
            color=series_color(index),
            label=label(group[0].config, PAIR),
        )


def throughput_and_speedup(items: Sequence[SdResult], x: str, baseline_series: Sequence[str] = PAIR):
    """A two-panel figure over config[x], one colour per target/draft pair: left, baseline (dashed)
    and SD (solid) decode tokens/s; right, speedup. Baselines are named by `baseline_series` (the
    target alone where drafts share one). Returns (figure, left axes, right axes) for the labels."""
    from specmoe.report.slices import group_by, label

    fig = new_figure(10, 4.0)
    left, right = fig.subplots(1, 2)
    for index, group in enumerate(group_by(items, PAIR)):
        group = sorted(group, key=lambda r: r.config[x])
        xs = [r.config[x] for r in group]
        name, color = label(group[0].config, PAIR), series_color(index)
        base = label(group[0].config, baseline_series)
        plot_intervals(
            left,
            xs,
            [r.baseline_tokens_per_s for r in group],
            color=color,
            label=f"{base}: baseline",
            linestyle="--",
            marker="s",
        )
        plot_intervals(left, xs, [r.sd_tokens_per_s for r in group], color=color, label=f"{name}: SD")
        plot_intervals(right, xs, [r.speedup for r in group], color=color, label=name)
    left.set_ylim(bottom=0)
    right.set_ylabel(SPEEDUP_LABEL)
    right.axhline(1.0, **NO_SPEEDUP_STYLE)
    return fig, left, right


def two_panel_note(items: Sequence[SdResult]) -> str:
    """The error bars of `throughput_and_speedup`, read from them: tokens/s means over each arm's
    runs (left), speedups over paired units (right)."""
    rates = [i for r in items for i in (r.baseline_tokens_per_s, r.sd_tokens_per_s)]
    left = interval_note(rates, RUNS).removeprefix("Error bars: ").removesuffix(".")
    right = interval_note([r.speedup for r in items]).removeprefix("Error bars: ")
    return f"Error bars on the left: {left}; on the right: {right}"


def place_legend(ax: Axes, inside: int = 4) -> None:
    """The axes' legend inside at its best spot for a few entries; below the axes for more, where it
    can hide no line (the figure grows by one row of entries per two)."""
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) <= inside:
        ax.legend(loc="best")
        return
    fig = ax.get_figure()
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + 0.2 * ((len(labels) + 1) // 2))
    fig.legend(handles, labels, loc="outside lower center", ncols=2, frameon=False)


def integer_ticks(ax: Axes, values: Sequence[float]) -> None:
    """Ticks at exactly the measured settings (γ, batch sizes, prompt lengths)."""
    ticks = sorted(set(values))
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])


def count_label(count: float) -> str:
    """A parameter or token count as people write it: 6580 -> "6.6K", 831e6 -> "831M", 12 -> "12"."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(count) >= scale:
            value = count / scale
            # Two significant digits below 10 ("6.6K"), whole numbers above ("831M", "76M").
            text = f"{value:.1f}" if value < 9.95 else f"{value:.0f}"
            return text.removesuffix(".0") + suffix
    return f"{count:g}"


def save_figure(drawn: Drawn, folder: Path) -> tuple[Path, Path]:
    """Write `<name>.png` and `<name>.svg` into folder; returns both paths."""
    png, svg = folder / f"{drawn.name}.png", folder / f"{drawn.name}.svg"
    drawn.figure.savefig(png, dpi=PNG_DPI)
    drawn.figure.savefig(svg, metadata={"Date": None})  # no timestamp: reproducible files
    return png, svg
