"""Serving views: throughput and speedup across concurrency, and TTFT / TPOT distributions per arm.

Concurrency (requests in flight) is the serving analog of the batch size: an SD server that wins
at concurrency 1 can lose at 64, where the target's verify pass is no longer free. Per-request
latencies are in `specmoe.report.served`; these builders only draw them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from specmoe.report.figures import (
    PAIR,
    Drawn,
    Omitted,
    Outcome,
    fixed_phrase,
    integer_ticks,
    new_figure,
    series_color,
    throughput_and_speedup,
    two_panel_note,
)
from specmoe.report.results import Results, SdResult
from specmoe.report.served import NO_SERVER_RUNS, ServedArm, arm_pairs, ecdf, sd_cell_key
from specmoe.report.slices import Slice, best_slice, label


def _served(results: Results) -> list[SdResult]:
    return [r for r in results.sd if r.settings.concurrency is not None]


def _concurrency_axis(ax, items: Sequence[SdResult]) -> None:
    levels = [r.settings.concurrency for r in items]
    if max(levels) / min(levels) >= 8:
        ax.set_xscale("log", base=2)
    integer_ticks(ax, levels)
    ax.set_xlabel("concurrency (requests in flight)")


def speedup_vs_concurrency(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Throughput and speedup vs concurrency (server runs)"
    served = _served(results)
    if not served:
        return Omitted(title, NO_SERVER_RUNS)
    chosen = best_slice(served, x="concurrency", series=PAIR, min_x=2)
    if chosen is None:
        return Omitted(title, "no server pair was run at two or more concurrencies")
    fig, left, right = throughput_and_speedup(chosen.items, "concurrency")
    for ax in (left, right):
        _concurrency_axis(ax, chosen.items)
        ax.legend(loc="best")
    left.set_ylabel("decode throughput (tokens/s, all requests)")
    at = fixed_phrase(chosen.fixed, varying)
    caption = (
        "Left: decode tokens/s over all requests of a run, plain server (dashed) and SD server (solid); "
        f"right: speedup{at}. {two_panel_note(chosen.items)}"
    )
    return Drawn("speedup_vs_concurrency", title, caption, fig)


@dataclass(frozen=True)
class LatencyCurve:
    pair: str  # the target/draft pair
    concurrency: int
    arm: str  # "baseline" | "sd"
    ttft: tuple[np.ndarray, np.ndarray]  # ECDF of seconds to first token
    tpot: tuple[np.ndarray, np.ndarray]  # ECDF of seconds per output token


def latency_curves(results: Results) -> tuple[list[LatencyCurve], Slice[SdResult] | None]:
    """Both arms' latency ECDFs for each served pair and concurrency of the widest slice."""
    chosen = best_slice(_served(results), x="concurrency", series=PAIR)
    if chosen is None:
        return [], None
    arms = {sd_cell_key(sd.settings): (base, sd) for base, sd in arm_pairs(results)}
    curves = []
    for r in sorted(chosen.items, key=lambda r: r.settings.concurrency):
        both: tuple[ServedArm, ServedArm] | None = arms.get(sd_cell_key(r.settings))
        for arm in both or ():
            if arm.ttft_s and arm.tpot_s:
                pair = label(r.config, PAIR)
                curves.append(
                    LatencyCurve(pair, r.settings.concurrency, arm.arm, ecdf(arm.ttft_s), ecdf(arm.tpot_s))
                )
    return curves, chosen


def latency_cdfs(results: Results, varying: Sequence[str]) -> Outcome:
    title = "TTFT and TPOT distributions per arm (server runs)"
    curves, chosen = latency_curves(results)
    if not curves or chosen is None:
        return Omitted(
            title, NO_SERVER_RUNS if not _served(results) else "no server run kept per-request times"
        )
    pairs = list(dict.fromkeys(c.pair for c in curves))
    levels = sorted({c.concurrency for c in curves})
    fig = new_figure(10, 3.6 * len(pairs) + 0.6)
    axes = np.atleast_2d(fig.subplots(len(pairs), 2, squeeze=False))
    for row, pair in enumerate(pairs):
        ttft_ax, tpot_ax = axes[row]
        for c in (c for c in curves if c.pair == pair):
            style = {
                "color": series_color(levels.index(c.concurrency)),
                "linestyle": "-" if c.arm == "sd" else "--",
            }
            ttft_ax.step(1000 * c.ttft[0], c.ttft[1], where="post", **style)
            tpot_ax.step(1000 * c.tpot[0], c.tpot[1], where="post", **style)
        ttft_ax.set_xlabel("time to first token (ms)")
        tpot_ax.set_xlabel("time per output token after the first (ms)")
        for ax, values in ((ttft_ax, [c.ttft[0] for c in curves]), (tpot_ax, [c.tpot[0] for c in curves])):
            _latency_axis(ax, np.concatenate(values))
            ax.set_ylim(0, 1.02)
            ax.set_ylabel("share of requests at or below")
            ax.set_title(pair)
    handles = [Line2D([], [], color=series_color(i), label=f"concurrency {c}") for i, c in enumerate(levels)]
    handles += [
        Line2D([], [], color="black", linestyle="--", label="baseline server"),
        Line2D([], [], color="black", linestyle="-", label="SD server"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False)
    at = fixed_phrase(chosen.fixed, varying)
    caption = (
        f"Empirical CDFs over every request of each arm{at}: dashed the plain server, solid the SD "
        "server, one colour per concurrency. A curve further left is faster; the spread between the "
        "median (0.5) and the top shows the tail the percentiles in the serving table report. The time "
        "axis is logarithmic where latencies span 20× or more."
    )
    return Drawn("latency_cdf", title, caption, fig)


def _latency_axis(ax, seconds: np.ndarray) -> None:
    """A log x axis when latencies span 20× or more: queueing tails would squash the rest."""
    positive = seconds[seconds > 0]
    if positive.size and positive.max() / positive.min() >= 20:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))


SERVING_FIGURES = (speedup_vs_concurrency, latency_cdfs)
