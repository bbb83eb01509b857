"""MoESD's views (arXiv 2505.19645): speedup and target efficiency across batch sizes, measured
speedup beside the analytic curve for oracle drafts, and the accepted length per round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.ticker import FuncFormatter

from specmoe.report.figures import (
    NO_SPEEDUP_STYLE,
    PAIR,
    SPEEDUP_LABEL,
    Drawn,
    Omitted,
    Outcome,
    fixed_phrase,
    integer_ticks,
    interval_note,
    new_figure,
    place_legend,
    plot_intervals,
    plot_speedup_per_pair,
    series_color,
)
from specmoe.report.intervals import Interval
from specmoe.report.modelled import modelled_pair, pair_alpha
from specmoe.report.results import Results, SdResult, StepTimes
from specmoe.report.slices import Slice, best_slice, group_by, label
from specmoe.theory import expected_active_experts, sd_speedup


def _batch_slice(results: Results) -> Slice[SdResult] | None:
    # Oracle drafts included: MoESD's batch sweeps fix acceptance with them, so the trend in batch
    # size is the target's efficiency, not how well a draft happens to agree.
    return best_slice(results.sd, x="batch_size", series=PAIR, min_x=2)


def speedup_vs_batch(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Speedup vs batch size"
    chosen = _batch_slice(results)
    if chosen is None:
        return Omitted(title, "no target/draft pair was run at two or more batch sizes")
    fig = new_figure()
    ax = fig.add_subplot()
    plot_speedup_per_pair(ax, chosen.items, "batch_size")
    modelled = _model_curves(ax, chosen.items, results.fits)
    _batch_axis(ax, chosen.items)
    ax.axhline(1.0, **NO_SPEEDUP_STYLE)
    ax.set_ylabel(SPEEDUP_LABEL)
    place_legend(ax)
    at = fixed_phrase(chosen.fixed, varying)
    caption = (
        f"Measured SD speedup per target across batch sizes{at}; MoESD predicts a "
        "rise then fall for MoE targets. Dashed line: no speedup. "
        + interval_note([r.speedup for r in chosen.items])
    )
    if modelled:
        caption += (
            " Dotted lines: the fitted performance model's speedup at each pair's measured acceptance "
            "rate (docs/perf-model.md)."
        )
    return Drawn("speedup_vs_batch", title, caption, fig)


def _model_curves(ax, items: Sequence[SdResult], fits) -> bool:
    """Dotted model curves for pairs whose target (and model draft) have fits; True if any drawn."""
    from specmoe.perf.compose import expected_speedup
    from specmoe.perf.predict import charged_draft

    drawn = False
    for index, group in enumerate(group_by(items, PAIR)):
        config = group[0].config
        pair = modelled_pair(group[0].settings, fits)
        if pair is None:
            continue
        gamma = group[0].settings.gamma
        alpha = pair_alpha(group)
        batches = sorted(r.settings.batch_size for r in group)
        grid = np.unique(np.geomspace(batches[0], batches[-1], 32).round()).astype(int)
        draft = charged_draft(pair.draft)
        speedups = [expected_speedup(pair.target, draft, alpha, gamma, int(b)) for b in grid]
        # The legend names the series the curve models: several pairs share one α.
        name = f"{label(config, PAIR)}, model (α={alpha:.2f})"
        ax.plot(grid, speedups, ":", color=series_color(index), linewidth=1.5, label=name)
        drawn = True
    return drawn


def efficiency_vs_batch(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Target efficiency vs batch size"
    chosen = _batch_slice(results)
    if chosen is None:
        return Omitted(title, "no target/draft pair was run at two or more batch sizes")
    fig = new_figure()
    ax = fig.add_subplot()
    for index, group in enumerate(group_by(chosen.items, PAIR)):
        group = sorted(group, key=lambda r: r.settings.batch_size)
        ax.plot(
            [r.settings.batch_size for r in group],
            [r.target_efficiency for r in group],
            marker="o",
            color=series_color(index),
            label=label(group[0].config, PAIR),
        )
    gamma = chosen.fixed["gamma"]
    ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1, label="1: verify as cheap as one step")
    ax.axhline(
        1 / (gamma + 1),
        color="0.4",
        linestyle=":",
        linewidth=1,
        label=f"1/(γ+1) = {1 / (gamma + 1):.2f}: verify costs γ+1 steps",
    )
    _batch_axis(ax, chosen.items)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("target efficiency T(B,1) ÷ T(B,γ+1)")
    place_legend(ax)
    at = fixed_phrase(chosen.fixed, varying)
    caption = (
        "The baseline's mean target step over the SD arm's mean verify pass (MoESD's system factor)"
        f"{at}. Near 1 the target is memory-bound and verification is almost free."
    )
    return Drawn("efficiency_vs_batch", title, caption, fig)


def _batch_axis(ax, items: Sequence[SdResult]) -> None:
    sizes = [r.settings.batch_size for r in items]
    if max(sizes) / min(sizes) >= 8:
        ax.set_xscale("log", base=2)
    integer_ticks(ax, sizes)
    ax.set_xlabel("batch size B (sequences decoded together)")


def _mean_times(group: Sequence[SdResult]) -> StepTimes | None:
    times = [r.step_times for r in group if r.step_times is not None]
    if not times:
        return None
    return StepTimes(
        target_step_s=float(np.mean([t.target_step_s for t in times])),
        verify_s=float(np.mean([t.verify_s for t in times])),
        draft_step_s=float(np.mean([t.draft_step_s for t in times])),
    )


def oracle_speedup(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Speedup vs acceptance (oracle drafts) beside the analytic curve"
    oracles = [r for r in results.sd if r.oracle_p is not None]
    if not oracles:
        return Omitted(title, "no oracle-draft runs (draft names like 'oracle:0.6')")
    chosen = best_slice(oracles, x="draft", series=("target", "gamma"))
    assert chosen is not None  # min_x=1 keeps every non-empty group
    fig = new_figure()
    ax = fig.add_subplot()
    alphas = np.linspace(0.0, 1.0, 101)
    compared: list[tuple[Interval, float]] = []  # (measured speedup, the curve at its p)
    for index, group in enumerate(group_by(chosen.items, ("target", "gamma"))):
        group = sorted(group, key=lambda r: r.oracle_p)
        color, name = series_color(index), label(group[0].config, ("target", "gamma"))
        plot_intervals(
            ax,
            [r.oracle_p for r in group],
            [r.speedup for r in group],
            color=color,
            label=f"{name}, measured",
            linestyle="",
        )
        times = _mean_times(group)
        if times is not None:
            curve = sd_speedup(
                alphas, int(group[0].settings.gamma), times.target_step_s, times.verify_s, times.draft_step_s
            )
            ax.plot(alphas, curve, color=color, linestyle="--", linewidth=1, label=f"{name}, analytic")
            gamma = int(group[0].settings.gamma)
            for r in group:
                at_p = sd_speedup(r.oracle_p, gamma, times.target_step_s, times.verify_s, times.draft_step_s)
                compared.append((r.speedup, float(at_p)))
    ax.axhline(1.0, **NO_SPEEDUP_STYLE)
    ax.set_xlim(0, 1)
    ax.set_xlabel("per-position acceptance probability α (the oracle's p)")
    ax.set_ylabel(SPEEDUP_LABEL)
    place_legend(ax)
    at = fixed_phrase(chosen.fixed, varying)
    caption = (
        f"Measured speedup of oracle drafts{at}, beside "
        "sd_speedup(α, γ, T_T(B,1), T_T(B,γ+1), T_D(B,1)) evaluated with the runs' mean measured times "
        "(baseline decode seconds per step; SD verify seconds per pass; draft seconds per step). "
        "The curve leaves out per-round host overhead, which alone would put it above the measurements. "
        f"{curve_relation(compared)} {interval_note([r.speedup for r in chosen.items])}"
    )
    return Drawn("oracle_speedup", title, caption, fig)


def curve_relation(compared: Sequence[tuple[Interval, float]]) -> str:
    """Where the analytic curve passes each measured point, in words: above its interval, inside it,
    or below it, counted over the points (a point measured once has a zero-width interval)."""
    if not compared:
        return "No series has the pass times the curve needs, so no curve is drawn."
    above = sum(1 for measured, curve in compared if curve > measured.high)
    below = sum(1 for measured, curve in compared if curve < measured.low)
    inside = len(compared) - above - below
    total = len(compared)
    if above == total:
        return f"Here the curve sits above all {total} measured points."
    if below == total:
        return f"Here the curve sits below all {total} measured points: the runs beat the model."
    parts = [
        f"{where} {count}"
        for count, where in ((above, "above"), (inside, "through the interval of"), (below, "below"))
        if count
    ]
    listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    return f"Here the curve passes {listed} of the {total} measured points."


def accepted_length_histogram(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Accepted draft tokens per round"
    traced = [r for r in results.sd if r.accepted_counts]
    if not traced:
        return Omitted(title, "no SD run carries a per-round trace (rounds_trace)")
    chosen = best_slice(traced, x="gamma", series=PAIR)
    assert chosen is not None  # min_x=1 keeps every non-empty group
    gammas = sorted({r.settings.gamma for r in chosen.items})
    cols = min(3, len(gammas))
    rows = math.ceil(len(gammas) / cols)
    # Legends sit under their panels (bars would hide them), so the height grows with the entries.
    entries = max(sum(r.settings.gamma == g for r in chosen.items) for g in gammas)
    fig = new_figure(4.2 * cols, (3.0 + 0.17 * entries) * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, gamma in zip(axes, gammas, strict=False):
        _histogram_panel(ax, [r for r in chosen.items if r.settings.gamma == gamma], gamma)
    for ax in axes[len(gammas) :]:
        ax.set_visible(False)
    at = fixed_phrase(chosen.fixed, varying)
    caption = (
        f"Share of sequence-rounds by the number of draft tokens accepted, one panel per γ"
        f"{at}. The legend gives the mean accepted length "
        "(tokens committed per sequence-round, the bonus/correction token included)."
    )
    return Drawn("accepted_length", title, caption, fig)


def _histogram_panel(ax, items: Sequence[SdResult], gamma: int) -> None:
    width = 0.8 / len(items)
    for index, r in enumerate(items):
        counts = np.asarray(r.accepted_counts, dtype=float)
        xs = np.arange(len(counts)) - 0.4 + width * (index + 0.5)
        mean = f", mean {r.mean_accepted_length:.2f}" if r.mean_accepted_length is not None else ""
        ax.bar(
            xs,
            100 * counts / counts.sum(),
            width=width,
            color=series_color(index),
            label=f"{label(r.config, PAIR)}{mean}",
        )
    ax.set_xticks(range(gamma + 1))
    ax.set_title(f"γ={gamma}")
    ax.set_xlabel("accepted draft tokens per sequence-round")
    ax.set_ylabel("share of sequence-rounds (%)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)


def experts_vs_tokens(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Activated experts vs tokens per forward, beside N(n)"
    traced = [p for p in results.profiles if p.get("experts")]
    if not traced:
        return Omitted(
            title,
            "needs an MoE profile: the runs record counts and times, not experts; pass "
            "--profile FILE from `specmoe profile`",
        )
    fig = new_figure()
    ax = fig.add_subplot()
    for index, profile in enumerate(traced):
        model = profile["model"]
        points = sorted(profile["experts"], key=lambda e: e["n_tokens"])
        tokens = [e["n_tokens"] for e in points]
        color = series_color(index)
        ax.plot(
            tokens,
            [e["distinct_mean"] for e in points],
            "o",
            color=color,
            label=f"{model['name']} measured (E={model['num_experts']}, K={model['top_k']})",
        )
        grid = np.unique(np.geomspace(1, max(tokens), 64).round())
        ax.plot(
            grid,
            expected_active_experts(grid, model["num_experts"], model["top_k"]),
            "-",
            color=color,
            linewidth=1,
            label=f"N(n), K={model['top_k']}",
        )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.set_xlabel("tokens in one forward, n = B·t")
    ax.set_ylabel("distinct experts per MoE layer (mean over layers)")
    place_legend(ax)
    caption = (
        "Points: distinct experts the router selected per layer, from the profiler's untimed traced "
        "passes; lines: N(n) = E·(1 − (1 − K/E)^n), the balanced i.i.d. expectation."
    )
    return Drawn("experts_vs_tokens", title, caption, fig)


MOESD_FIGURES = (
    speedup_vs_batch,
    efficiency_vs_batch,
    oracle_speedup,
    accepted_length_histogram,
    experts_vs_tokens,
)
