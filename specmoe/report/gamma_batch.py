"""The measured γ × batch-size speedup grid per target/draft pair, with the performance model's pick.

MoESD's suite sweeps γ and B together: the best draft length moves with the batch size, because the
target's verify pass stops being free once the batch fills the hardware. The heatmap shows every
measured cell; given fits of the pair's models (`bench report --fit`), a frame marks the γ that
`specmoe advise` (`specmoe.perf.advise`) picks at each B, so a reader sees whether the model would
have chosen what the measurements favour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import Patch, Rectangle

from specmoe.report.figures import PAIR, Drawn, Omitted, Outcome, fixed_phrase, new_figure
from specmoe.report.modelled import modelled_pair, pair_alpha
from specmoe.report.results import Results, SdResult
from specmoe.report.slices import best_slice, group_by, label


@dataclass(frozen=True)
class SpeedupGrid:
    label: str  # the target/draft pair
    gammas: tuple[int, ...]  # rows: 1 .. the largest γ measured (unmeasured rows stay empty)
    batches: tuple[int, ...]  # columns: the measured batch sizes
    speedup: tuple[tuple[float | None, ...], ...]  # [γ row][B column]; None: not run
    alpha: float  # the pair's per-position acceptance (`modelled.pair_alpha`)
    picks: dict[int, int] = field(default_factory=dict)  # B -> γ the performance model picks
    # Batch sizes where even the model's pick is predicted below 1×: its advice there is no draft.
    no_pay: frozenset[int] = frozenset()

    def best_measured(self, column: int) -> int | None:
        """Row index of the highest measured speedup in a column; None when the column is empty."""
        values = [(v, i) for i, v in enumerate(r[column] for r in self.speedup) if v is not None]
        return max(values)[1] if values else None


def speedup_grids(
    results: Results, fits: Sequence[tuple[str, str, Any]] = ()
) -> tuple[list[SpeedupGrid], dict[str, Any]]:
    """A grid per pair measured at two or more γ and two or more batch sizes (oracle drafts
    included, as in MoESD's sweeps), and the axes the chosen slice holds fixed."""
    chosen = best_slice(results.sd, x="batch_size", series=(*PAIR, "gamma"))
    if chosen is None:
        return [], {}
    grids = []
    for group in group_by(chosen.items, PAIR):
        gammas = {r.config["gamma"] for r in group}
        batches = sorted({r.config["batch_size"] for r in group})
        if len(gammas) >= 2 and len(batches) >= 2:
            grids.append(_grid(group, batches, fits))
    return grids, chosen.fixed


def _grid(group: Sequence[SdResult], batches: list[int], fits) -> SpeedupGrid:
    rows = tuple(range(1, max(r.config["gamma"] for r in group) + 1))
    cell = {(r.config["gamma"], r.config["batch_size"]): r.speedup.value for r in group}
    alpha = pair_alpha(group)
    picks, no_pay = model_picks(group[0].config, fits, alpha, batches, max(rows))
    return SpeedupGrid(
        label=label(group[0].config, PAIR),
        gammas=rows,
        batches=tuple(batches),
        speedup=tuple(tuple(cell.get((g, b)) for b in batches) for g in rows),
        alpha=alpha,
        picks=picks,
        no_pay=no_pay,
    )


def model_picks(
    config: dict[str, Any],
    fits: Sequence[tuple[str, str, Any]],
    alpha: float,
    batches: list[int],
    gamma_max: int,
) -> tuple[dict[int, int], frozenset[int]]:
    """(B -> the γ in 1..gamma_max that `specmoe advise` picks for this pair, the B where that pick
    is predicted below 1×); both empty without the pair's fits."""
    from specmoe.perf.advise import advise

    pair = modelled_pair(config, fits)
    if pair is None:
        return {}, frozenset()
    advice = advise(pair.target, [pair.draft], [alpha], batches, gamma_max)
    picks = {row["batch"]: row["best"]["gamma"] for row in advice["rows"]}
    return picks, frozenset(row["batch"] for row in advice["rows"] if not row["pays"])


def gamma_batch_heatmap(results: Results, varying: Sequence[str]) -> Outcome:
    title = "Speedup over γ × batch size"
    grids, fixed = speedup_grids(results, results.fits)
    if not grids:
        return Omitted(title, "no target/draft pair was run at two or more γ and two or more batch sizes")
    values = [v for g in grids for row in g.speedup for v in row if v is not None]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(min(values), 0.95), vmax=max(max(values), 1.05))
    cols = min(2, len(grids))
    rows = -(-len(grids) // cols)
    fig = new_figure(5.2 * cols, 3.4 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    image = None
    for ax, grid in zip(axes, grids, strict=False):
        image = _panel(ax, grid, norm)
    for ax in axes[len(grids) :]:
        ax.set_visible(False)
    fig.colorbar(image, ax=axes[: len(grids)].tolist(), label="speedup (×)", shrink=0.9)
    handles = [Patch(facecolor="0.9", label="not run")]
    if any(g.picks for g in grids):
        handles.append(
            Patch(facecolor="none", edgecolor="black", linewidth=2, label="performance model's pick")
        )
    if any(g.no_pay for g in grids):
        handles.append(
            Patch(
                facecolor="none", edgecolor="black", linewidth=2, linestyle="--", label="pick predicted < 1×"
            )
        )
    fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
    at = fixed_phrase(fixed, varying)
    caption = (
        f"Measured speedup of each pair at every γ and batch size run{at}; blue above 1×, red below, "
        "bold: the best measured γ at each batch size. "
    )
    if any(g.picks for g in grids):
        caption += (
            "Framed: the γ the fitted performance model picks at each batch size (`specmoe advise` with "
            "the pair's α; docs/perf-model.md); dashed where even that pick is predicted below 1×, so the "
            "model's advice there is to decode without a draft. "
        )
    else:
        caption += "Pass `--fit` files of the pair's models to mark the performance model's pick. "
    caption += "Each cell's interval is in the table of SD results."
    return Drawn("gamma_batch_speedup", title, caption, fig)


def _panel(ax, grid: SpeedupGrid, norm: TwoSlopeNorm):
    data = np.ma.masked_invalid(np.array([[np.nan if v is None else v for v in row] for row in grid.speedup]))
    ax.set_facecolor("0.9")  # unmeasured cells show the background
    image = ax.imshow(data, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
    for col, batch in enumerate(grid.batches):
        best = grid.best_measured(col)
        for row, value in enumerate(r[col] for r in grid.speedup):
            if value is not None:
                weight = "bold" if row == best else "normal"
                # White on the darkest blues and reds, black elsewhere: readable on every cell.
                color = "white" if abs(float(norm(value)) - 0.5) > 0.32 else "black"
                ax.text(
                    col,
                    row,
                    f"{value:.2f}×",
                    ha="center",
                    va="center",
                    fontsize=8,
                    fontweight=weight,
                    color=color,
                )
        if batch in grid.picks:
            row = grid.gammas.index(grid.picks[batch])
            frame = Rectangle(
                (col - 0.47, row - 0.47), 0.94, 0.94, fill=False, edgecolor="black", linewidth=2
            )
            frame.set_linestyle("--" if batch in grid.no_pay else "-")
            ax.add_patch(frame)
    ax.set_xticks(range(len(grid.batches)), [str(b) for b in grid.batches])
    ax.set_yticks(range(len(grid.gammas)), [str(g) for g in grid.gammas])
    ax.grid(visible=False)
    ax.set_xlabel("batch size B")
    ax.set_ylabel("draft length γ")
    ax.set_title(f"{grid.label} (α={grid.alpha:.2f})")
    return image
