"""The measured γ × batch-size speedup grid per target/draft pair, with the performance model's pick.

MoESD's suite sweeps γ and B together: the best draft length moves with the batch size, because the
target's verify pass stops being free once the batch fills the hardware. The heatmap shows every
measured cell with its interval (level and n), and only the γ values and batch sizes that were run;
given fits of the pair's models (`bench report --fit`), a frame marks the γ that `specmoe advise`
(`specmoe.perf.advise`) picks among those run at each B, so a reader sees whether the model would
have chosen what the measurements favour. A companion table lists every cell with its interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import Patch, Rectangle

from specmoe.report.figures import PAIR, Drawn, Omitted, Outcome, fixed_phrase, new_figure
from specmoe.report.intervals import Interval
from specmoe.report.modelled import modelled_pair, pair_alpha
from specmoe.report.results import Results, SdResult
from specmoe.report.slices import axis_value, best_slice, format_axis, group_by, label
from specmoe.report.tables import (
    Rows,
    Table,
    csv_settings,
    interval_fields,
    no_number_fields,
    status_cell,
)
from specmoe.results.run_config import RunConfig

TITLE = "Speedup over γ × batch size"
NOT_SPANNED = "no target/draft pair was run at two or more γ and two or more batch sizes"


@dataclass(frozen=True)
class GridCell:
    """One γ × B cell: its measured speedup, or why it has none (every pair flagged noisy)."""

    speedup: Interval | None
    unstable: str = ""  # `SdResult.unstable`
    no_number: str = ""  # "all 4 runs flagged noisy: no number"


@dataclass(frozen=True)
class SpeedupGrid:
    label: str  # the target/draft pair
    config: dict[str, Any]  # a configuration of the pair (target, draft, dtype: to name and model it)
    settings: RunConfig  # `config` typed
    gammas: tuple[int, ...]  # rows: the γ values run, ascending
    batches: tuple[int, ...]  # columns: the batch sizes run, ascending
    cells: tuple[tuple[GridCell | None, ...], ...]  # [γ row][B column]; None: not run
    alpha: float  # the pair's per-position acceptance (`modelled.pair_alpha`)
    picks: dict[int, int] = field(default_factory=dict)  # B -> γ the performance model picks
    # Batch sizes where even the model's pick is predicted below 1×: its advice there is no draft.
    no_pay: frozenset[int] = frozenset()

    @property
    def speedup(self) -> tuple[tuple[float | None, ...], ...]:
        """[γ row][B column]: the measured mean speedup; None where no number was measured."""
        return tuple(
            tuple(c.speedup.value if c is not None and c.speedup is not None else None for c in row)
            for row in self.cells
        )

    def best_measured(self, column: int) -> int | None:
        """Row index of the highest measured speedup in a column; None when the column is empty."""
        values = [(v, i) for i, v in enumerate(r[column] for r in self.speedup) if v is not None]
        return max(values)[1] if values else None


def speedup_grids(
    results: Results, fits: Sequence[tuple[str, str, Any]] = ()
) -> tuple[list[SpeedupGrid], dict[str, Any]]:
    """A grid per pair measured at two or more γ and two or more batch sizes (oracle drafts
    included, as in MoESD's sweeps), and the axes the chosen slice holds fixed. Cells of the slice
    whose every pair was flagged noisy are kept, without a number."""
    chosen = best_slice(results.sd, x="batch_size", series=(*PAIR, "gamma"))
    if chosen is None:
        return [], {}
    noisy = [
        u
        for u in results.unmeasured
        if u.arm == "sd" and all(axis_value(u.config, a) == v for a, v in chosen.fixed.items())
    ]
    grids = []
    for group in group_by(chosen.items, PAIR):
        gammas = {r.settings.gamma for r in group}
        batches = {r.settings.batch_size for r in group}
        if len(gammas) >= 2 and len(batches) >= 2:
            pair = [
                u
                for u in noisy
                if all(axis_value(u.config, a) == axis_value(group[0].config, a) for a in PAIR)
            ]
            grids.append(_grid(group, pair, fits))
    return grids, chosen.fixed


def _grid(group: Sequence[SdResult], noisy: Sequence[Any], fits) -> SpeedupGrid:
    cell: dict[tuple[int, int], GridCell] = {
        (r.settings.gamma, r.settings.batch_size): GridCell(r.speedup, r.unstable) for r in group
    }
    for u in noisy:
        cell.setdefault((u.settings.gamma, u.settings.batch_size), GridCell(None, no_number=u.why))
    gammas = sorted({g for g, _ in cell})
    batches = sorted({b for _, b in cell})
    alpha = pair_alpha(group)
    picks, no_pay = model_picks(group[0].settings, fits, alpha, batches, gammas)
    return SpeedupGrid(
        label=label(group[0].config, PAIR),
        config=group[0].config,
        settings=group[0].settings,
        gammas=tuple(gammas),
        batches=tuple(batches),
        cells=tuple(tuple(cell.get((g, b)) for b in batches) for g in gammas),
        alpha=alpha,
        picks=picks,
        no_pay=no_pay,
    )


def model_picks(
    settings: RunConfig,
    fits: Sequence[tuple[str, str, Any]],
    alpha: float,
    batches: list[int],
    gammas: list[int],
) -> tuple[dict[int, int], frozenset[int]]:
    """(B -> the γ among `gammas` (those run) that `specmoe advise` picks for this pair, the B where
    that pick is predicted below 1×); both empty without the pair's fits."""
    from specmoe.perf.advise import advise

    pair = modelled_pair(settings, fits)
    if pair is None:
        return {}, frozenset()
    advice = advise(pair.target, [pair.draft], [alpha], batches, max(gammas), gammas=gammas)
    picks = {row["batch"]: row["best"]["gamma"] for row in advice["rows"]}
    return picks, frozenset(row["batch"] for row in advice["rows"] if not row["pays"])


def cell_text(cell: GridCell) -> str:
    """A cell's lines: the speedup, its interval, its level and n (and UNSTABLE); or why no number."""
    if cell.speedup is None:
        return "noisy:\nno number"
    s = cell.speedup
    lines = [f"{s.value:.2f}×"]
    if s.has_width:
        lines.append(f"[{s.low:.2f}, {s.high:.2f}]")
    lines.append(s.label.replace(" CI,", ""))  # "95% n=6", "range, n=2", "n=1"
    if cell.unstable:
        lines.append("UNSTABLE")
    return "\n".join(lines)


def gamma_batch_heatmap(results: Results, varying: Sequence[str]) -> Outcome:
    grids, fixed = speedup_grids(results, results.fits)
    if not grids:
        return Omitted(TITLE, NOT_SPANNED)
    values = [v for g in grids for row in g.speedup for v in row if v is not None]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min([*values, 0.95]), vmax=max([*values, 1.05]))
    cols = min(2, len(grids))
    rows = -(-len(grids) // cols)
    tallest = max(len(g.gammas) for g in grids)
    fig = new_figure(5.6 * cols, max(3.4, 1.4 + 0.75 * tallest) * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    image = None
    for ax, grid in zip(axes, grids, strict=False):
        image = _panel(ax, grid, norm)
    for ax in axes[len(grids) :]:
        ax.set_visible(False)
    fig.colorbar(image, ax=axes[: len(grids)].tolist(), label="speedup (×)", shrink=0.9)
    if handles := _legend(grids):
        fig.legend(handles=handles, loc="outside lower center", ncols=3, frameon=False)
    return Drawn("gamma_batch_speedup", TITLE, _caption(grids, fixed, varying), fig)


def _legend(grids: Sequence[SpeedupGrid]) -> list[Patch]:
    handles = []
    if any(c is None for g in grids for row in g.cells for c in row):
        handles.append(Patch(facecolor="0.9", label="not run"))
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
    return handles


def _caption(grids: Sequence[SpeedupGrid], fixed: dict[str, Any], varying: Sequence[str]) -> str:
    cells = [c for g in grids for row in g.cells for c in row if c is not None]
    at = fixed_phrase(fixed, varying)
    caption = (
        f"Measured speedup of each pair at the γ values and batch sizes run{at}; each cell gives the "
        "mean, its interval and the interval's level and n (a range below 5 units; one unit has no "
        "interval). Blue above 1×, red below; bold: the best measured γ at each batch size. "
    )
    if any(c is None for g in grids for row in g.cells for c in row):
        caption += "Grey cells were not run. "
    if flagged := sum(1 for c in cells if c.speedup is None):
        caption += f"{flagged} cell{'s' if flagged != 1 else ''} had every pair flagged noisy: no number. "
    if unstable := sum(1 for c in cells if c.unstable):
        caption += f"{unstable} cell{'s are' if unstable != 1 else ' is'} UNSTABLE (repeats disagree). "
    if any(g.picks for g in grids):
        caption += (
            "Framed: the γ among those run that the fitted performance model picks at each batch size "
            "(`specmoe advise` with the pair's α; docs/perf-model.md); dashed where even that pick is "
            "predicted below 1×, so the model's advice there is to decode without a draft. "
        )
    else:
        caption += "Pass `--fit` files of the pair's models to mark the performance model's pick. "
    return caption + "The table of γ × batch-size cells lists the same numbers."


def _panel(ax, grid: SpeedupGrid, norm: TwoSlopeNorm):
    data = np.ma.masked_invalid(np.array([[np.nan if v is None else v for v in row] for row in grid.speedup]))
    ax.set_facecolor("0.9")  # cells not run, and cells without a number, show the background
    image = ax.imshow(data, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
    for col, batch in enumerate(grid.batches):
        best = grid.best_measured(col)
        for row, cell in enumerate(r[col] for r in grid.cells):
            if cell is None:
                continue
            value = cell.speedup.value if cell.speedup is not None else None
            # White on the darkest blues and reds, black elsewhere: readable on every cell.
            dark = value is not None and abs(float(norm(value)) - 0.5) > 0.32
            ax.text(
                col,
                row,
                cell_text(cell),
                ha="center",
                va="center",
                fontsize=7,
                linespacing=1.1,
                fontweight="bold" if row == best else "normal",
                color="white" if dark else "black",
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


def gamma_batch_table(results: Results) -> Table | Omitted:
    """The heatmap's cells as a table: every γ × B cell of each pair, with its interval."""
    title = "Speedup over γ × batch size, cell by cell"
    grids, _ = speedup_grids(results, results.fits)
    if not grids:
        return Omitted(title, NOT_SPANNED)
    rows = Rows()
    for grid in grids:
        for i, gamma in enumerate(grid.gammas):
            for j, batch in enumerate(grid.batches):
                cell = grid.cells[i][j]
                if cell is not None:
                    _add_cell(rows, grid, gamma, batch, cell, grid.best_measured(j) == i)
    columns = (
        "target",
        "draft",
        "γ",
        "batch size",
        "speedup [interval] (level, n)",
        "best measured γ at this B",
        "model's pick",
        "stability",
    )
    caption = (
        "The cells of the γ × batch-size heatmap, at the settings its caption names. Speedup intervals: "
        "the ratio estimator's t-interval over paired units at the level shown, or their range (no "
        "level) below 5 units. A cell whose every pair was flagged noisy is listed with no number. "
        "Model's pick: the γ `specmoe advise` picks among those run (only with --fit files)."
    )
    return rows.table("gamma_batch_speedup", title, caption, columns)


def _add_cell(rows: Rows, grid: SpeedupGrid, gamma: int, batch: int, cell: GridCell, best: bool) -> None:
    config = {**grid.config, "gamma": gamma, "batch_size": batch}
    picked = grid.picks.get(batch) == gamma if grid.picks else None
    fields = interval_fields("speedup", cell.speedup) if cell.speedup else no_number_fields("speedup")
    rows.add(
        config,
        (
            format_axis("target", axis_value(config, "target")),
            str(grid.settings.draft_name),
            str(gamma),
            str(batch),
            cell.speedup.format(2, "×") if cell.speedup else cell.no_number,
            "✓" if best and cell.speedup else "",
            "" if picked is None else ("✓" if picked else ""),
            status_cell(0, cell.unstable) if cell.speedup else "–",
        ),
        {
            "target": grid.settings.target,
            "draft": grid.settings.draft_name,
            "gamma": gamma,
            "batch_size": batch,
            **csv_settings(config),
            **fields,
            "best_at_batch": best and cell.speedup is not None,
            "model_pick": picked,
            "model_pick_below_1x": (batch in grid.no_pay) if picked else None,
            "alpha": grid.alpha,
            "unstable": cell.unstable or None,
            "no_number": cell.no_number or None,
        },
    )
