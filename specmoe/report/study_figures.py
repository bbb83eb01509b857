"""The empirical study's views (its figures 1-5), drawn from any result set.

Each builder takes the collected results and the axes that vary across them (to name the fixed
settings in captions) and returns `Drawn` or `Omitted`. Oracle drafts are left out of the views of
speedup and acceptance (`figures.model_drafts`): they exist to dial acceptance for the MoESD
comparison, not as drafts one would deploy. The throughput view lists every configuration, oracle
drafts included, as the tables do.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from specmoe.report.figures import (
    NO_SPEEDUP_STYLE,
    PAIR,
    RUNS,
    SPEEDUP_LABEL,
    Drawn,
    Omitted,
    Outcome,
    count_label,
    error_bars,
    family_color,
    fixed_phrase,
    integer_ticks,
    interval_note,
    model_drafts,
    new_figure,
    place_legend,
    plot_speedup_per_pair,
    series_color,
    throughput_and_speedup,
    two_panel_note,
)
from specmoe.report.results import Results, SdResult
from specmoe.report.slices import best_slice, group_by, label, sorted_by_config


def _count_unit(largest: int) -> tuple[float, str]:
    for scale, unit in ((1e9, "billions"), (1e6, "millions"), (1e3, "thousands")):
        if largest >= scale:
            return scale, unit
    return 1.0, "count"


def speedup_vs_active_params(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Speedup vs active parameters"
    candidates = model_drafts(results)
    if not candidates:
        return Omitted(title, "no SD configuration with a model draft and a matching baseline")
    sized = [r for r in candidates if r.size is not None]
    unsized = sorted({str(r.settings.target) for r in candidates if r.size is None})
    if not sized:
        return Omitted(
            title,
            f"parameter counts unknown for the targets ({', '.join(unsized)}); only zoo models have counts",
        )
    chosen = best_slice(sized, x="target", series=("draft",))
    assert chosen is not None  # min_x=1 keeps every non-empty group
    scale, unit = _count_unit(max(r.size.active_params for r in chosen.items))
    fig = new_figure(6.4, 4.2)
    ax = fig.add_subplot()
    handles = _param_points(ax, chosen.items, scale)
    ax.axhline(1.0, **NO_SPEEDUP_STYLE)
    ax.set_xlabel(f"target active parameters ({unit})")
    ax.set_ylabel(SPEEDUP_LABEL)
    ax.legend(handles=handles, loc="best")
    at = fixed_phrase(chosen.fixed, varying)
    caption = (
        f"SD speedup against the target's active parameter count{at}. "
        f"Stars mark MoE targets; labels give total and active parameters (K, M, B: thousands, millions, "
        f"billions). Dashed line: no speedup. {interval_note([r.speedup for r in chosen.items])}"
    )
    if unsized:
        caption += f" Left out for lack of parameter counts: {', '.join(unsized)}."
    return Drawn("speedup_vs_active_params", title, caption, fig)


def _param_points(ax: Axes, items: Sequence[SdResult], scale: float) -> list[Line2D]:
    """One point per target (star: MoE), one colour per draft; returns the legend handles."""
    handles = []
    for index, group in enumerate(group_by(items, ["draft"])):
        color = series_color(index)
        draft = group[0].settings.draft_name
        handles.append(Line2D([], [], color=color, marker="s", linestyle="", label=f"draft {draft}"))
        for r in group:
            ax.errorbar(
                [r.size.active_params / scale],
                [r.speedup.value],
                yerr=error_bars([r.speedup]),
                color=color,
                capsize=3,
                marker="*" if r.moe else "o",
                markersize=13 if r.moe else 7,
            )
    _label_targets(ax, items, scale)
    return [
        *handles,
        Line2D([], [], color="black", marker="*", markersize=11, linestyle="", label="MoE target"),
        Line2D([], [], color="black", marker="o", linestyle="", label="dense target"),
    ]


def _label_targets(ax: Axes, items: Sequence[SdResult], scale: float) -> None:
    """One label per target, beside its highest point (its drafts share its x), never on another."""
    anchors = []
    for group in group_by(items, ["target"]):
        top = max(group, key=lambda r: r.speedup.value)
        size = top.size
        text = f"{label(top.config, ['target'])}: {count_label(size.total_params)} total / "
        text += f"{count_label(size.active_params)} active"
        anchors.append((size.active_params / scale, top.speedup.value, text))
    xs, ys = [a[0] for a in anchors], [a[1] for a in anchors]
    spans = (max(xs) - min(xs) or 1.0, max(ys) - min(ys) or 1.0)
    middle = (max(xs) + min(xs)) / 2
    offsets = label_offsets(list(zip(xs, ys, strict=True)), spans)
    for (x, y, text), (dx, dy) in zip(anchors, offsets, strict=True):
        # Labels of points in the right half run leftwards, so none leaves the axes.
        right = len(anchors) > 1 and x > middle
        ax.annotate(
            text,
            (x, y),
            xytext=(-dx if right else dx, dy),
            textcoords="offset points",
            ha="right" if right else "left",
            fontsize=7,
        )


# Label offsets in points: above right first, then below right, then further above and below.
_OFFSETS = ((6, 6), (6, -12), (6, 18), (6, -24))


def label_offsets(points: Sequence[tuple[float, float]], spans: tuple[float, float]) -> list[tuple[int, int]]:
    """An offset per point so that labels of nearby points (within 15% of the x span and 8% of the y
    span) take different slots; points are visited in order, each taking the first free slot."""
    taken: list[tuple[float, float, int]] = []
    offsets = []
    for x, y in points:
        near = {
            slot
            for tx, ty, slot in taken
            if abs(tx - x) <= 0.15 * spans[0] and abs(ty - y) <= 0.08 * spans[1]
        }
        slot = next((i for i in range(len(_OFFSETS)) if i not in near), len(taken) % len(_OFFSETS))
        taken.append((x, y, slot))
        offsets.append(_OFFSETS[slot])
    return offsets


def throughput_bars(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Decode throughput of every configuration"
    if not results.baselines:
        return Omitted(title, "no baseline runs")
    context = ["target", *(a for a in varying if a not in ("target", "draft", "gamma"))]
    labels, values, colors = [], [], []
    for base in sorted_by_config(results.baselines):  # the tables' order
        labels.append(label(base.config, context))
        values.append(base.tokens_per_s)
        colors.append((family_color(base.moe), 0.35))
        for sd in sorted_by_config(s for s in results.sd if s.baseline_key == base.config_key):
            labels.append(f"+ {label(sd.config, ['draft', 'gamma'])}")
            values.append(sd.sd_tokens_per_s)
            colors.append((family_color(sd.moe), 1.0))
    fig = new_figure(7.5, max(2.5, 0.8 + 0.26 * len(labels)))
    ax = fig.add_subplot()
    ys = list(range(len(labels)))
    ax.barh(ys, [v.value for v in values], xerr=error_bars(values), color=colors, capsize=2)
    for y, v in zip(ys, values, strict=True):
        ax.text(v.high, y, f"  {v.value:.1f}", va="center", fontsize=7)
    ax.set_xlim(0, 1.15 * max(v.high for v in values))  # room for the value printed after each bar
    ax.set_yticks(ys, labels)
    ax.invert_yaxis()
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("decode throughput (tokens/s: emitted tokens ÷ decode seconds)")
    families = sorted({b.moe for b in results.baselines}, reverse=True)
    ax.legend(
        handles=[
            Patch(color=(family_color(moe), alpha), label=f"{'MoE' if moe else 'dense'} {arm}")
            for moe in families
            for arm, alpha in (("baseline", 0.35), ("SD", 1.0))
        ],
        loc="lower right",
    )
    caption = (
        "Mean decode tokens/s of each baseline configuration (light bars) followed by its SD "
        "configurations (solid bars, '+ draft · γ'). Purple: MoE targets; green: dense. "
        + interval_note(values, RUNS)
    )
    return Drawn("throughput", title, caption, fig)


def acceptance_vs_gamma(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Acceptance rate vs γ"
    chosen = best_slice(model_drafts(results), x="gamma", series=PAIR, min_x=2)
    if chosen is None:
        return Omitted(title, "no target/draft pair was run at two or more γ values")
    fig = new_figure()
    ax = fig.add_subplot()
    for index, group in enumerate(group_by(chosen.items, PAIR)):
        group = sorted(group, key=lambda r: r.settings.gamma)
        ax.plot(
            [r.settings.gamma for r in group],
            [100 * r.acceptance_rate for r in group],
            marker="o",
            color=series_color(index),
            label=label(group[0].config, PAIR),
        )
    integer_ticks(ax, [r.settings.gamma for r in chosen.items])
    # The whole range: an autoscaled axis turns a 0.1-point wobble near zero into a swing.
    ax.set_ylim(0, 100)
    ax.set_xlabel("draft length γ (tokens drafted per round)")
    ax.set_ylabel("acceptance rate (accepted ÷ drafted, %)")
    place_legend(ax)
    at = fixed_phrase(chosen.fixed, varying)
    caption = f"Share of drafted tokens the target accepted, pooled over repeats{at}; the axis spans 0-100%."
    return Drawn("acceptance_vs_gamma", title, caption, fig)


def prompt_length_sweep(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Throughput and speedup vs prompt length"
    synthetic = [r for r in model_drafts(results) if r.settings.prompt_length is not None]
    if not synthetic:
        return Omitted(title, "no SD runs with a synthetic prompt length (prompt_length)")
    chosen = best_slice(synthetic, x="prompt_length", series=PAIR, min_x=2)
    if chosen is None:
        return Omitted(title, "no target/draft pair was run at two or more prompt lengths")
    fig, left, right = throughput_and_speedup(chosen.items, "prompt_length", baseline_series=["target"])
    lengths = [r.settings.prompt_length for r in chosen.items]
    for ax in (left, right):
        integer_ticks(ax, lengths)
        ax.set_xlabel("prompt length (tokens)")
        ax.legend(loc="best")
    left.set_ylabel("decode throughput (tokens/s)")
    at = fixed_phrase(chosen.fixed, varying)
    caption = (
        f"Left: baseline (dashed) and SD (solid) decode tokens/s; right: speedup{at}. "
        + two_panel_note(chosen.items)
    )
    return Drawn("prompt_length", title, caption, fig)


def speedup_vs_gamma(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Speedup vs γ"
    chosen = best_slice(model_drafts(results), x="gamma", series=PAIR, min_x=2)
    if chosen is None:
        return Omitted(title, "no target/draft pair was run at two or more γ values")
    fig = new_figure()
    ax = fig.add_subplot()
    plot_speedup_per_pair(ax, chosen.items, "gamma")
    integer_ticks(ax, [r.settings.gamma for r in chosen.items])
    ax.axhline(1.0, **NO_SPEEDUP_STYLE)
    ax.set_xlabel("draft length γ (tokens drafted per round)")
    ax.set_ylabel(SPEEDUP_LABEL)
    place_legend(ax)
    at = fixed_phrase(chosen.fixed, varying)
    caption = f"SD speedup per target/draft pair{at}. Dashed line: no speedup. " + interval_note(
        [r.speedup for r in chosen.items]
    )
    return Drawn("speedup_vs_gamma", title, caption, fig)


STUDY_FIGURES = (
    speedup_vs_active_params,
    throughput_bars,
    acceptance_vs_gamma,
    prompt_length_sweep,
    speedup_vs_gamma,
)
