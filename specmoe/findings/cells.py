"""One measured SD configuration against its paired baseline, in the shape the claims compare."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specmoe.results.compare import cell_key, compare
from specmoe.results.run_config import RunConfig
from specmoe.results.store import RunRow


def prompt_of(settings: RunConfig) -> str:
    """A cell's prompts: the prompt set as the suite named it, or len<N> for synthetic prompts."""
    return str(settings.prompt_set or f"len{settings.prompt_length}")


@dataclass(frozen=True)
class Cell:
    group: str
    target: str
    draft: str
    gamma: int
    prompt: str
    batch: int
    top_k: int | None
    preset: str | None  # the target's zoo preset, for its parameter counts
    speedup: float
    low: float  # the speedup's interval (specmoe.metrics.speedup): a t-interval when level is set
    high: float
    acceptance: float
    efficiency: float  # T(B,1) / T(B,γ+1), measured
    repeats: int  # paired units (prompt batch × repeat), noisy runs left out
    level: float | None = None  # None: fewer than 5 units, low/high are only their range
    unstable: bool = False  # repeats of one batch disagree (specmoe.results.compare)
    round_s: float | None = None  # mean decode seconds per SD round over the cell's SD runs
    draft_round_s: float | None = None  # of which drafting (the drafter's propose calls)
    step_s: float | None = None  # the paired baseline's decode seconds per target forward

    @property
    def judged(self) -> bool:
        """Whether the cell may decide a verdict: a real confidence interval, stable repeats."""
        return self.level is not None and not self.unstable

    def beats(self, other: Cell) -> bool:
        """Faster beyond both intervals: this cell's low end above the other's high end. Never from
        a cell without a confidence interval (fewer than 5 units) or with unstable repeats."""
        return self.judged and other.judged and self.low > other.high

    @property
    def parts(self) -> tuple[str, ...]:
        """The cell's name, field by field, for a "decided by" list."""
        top_k = f"top-k {self.top_k}" if self.top_k is not None else ""
        return (self.target, self.draft, f"γ={self.gamma}", self.prompt, f"B={self.batch}", top_k)

    def why_not_judged(self) -> str:
        """Why a cell decides nothing ("" for a judged cell)."""
        if self.level is None:
            return f"{self.repeats} units"
        return "unstable repeats" if self.unstable else ""

    def interval(self) -> str:
        """The speedup with its interval; a cell that decides nothing says so (a range from fewer
        than five units, or repeats that disagree)."""
        if self.level is None:
            spread = f"range {self.low:.2f}–{self.high:.2f}, n={self.repeats}"
            return f"{self.speedup:.2f}× ({spread}; decides nothing)"
        shown = f"{self.speedup:.2f}× [{self.low:.2f}, {self.high:.2f}] n={self.repeats}"
        return shown + (" (unstable; decides nothing)" if self.unstable else "")


def round_seconds(rows: Iterable[RunRow]) -> dict[str, float]:
    """Per cell: decode seconds per SD round, summed over its SD runs the noise guard passed."""
    seconds: dict[str, list[float]] = {}
    for row in rows:
        if row.arm == "sd" and not row.noisy and row.counts.rounds:
            total = seconds.setdefault(cell_key(row), [0.0, 0.0])
            total[0] += row.times.decode_s
            total[1] += row.counts.rounds
    return {key: s / n for key, (s, n) in seconds.items()}


def _per(rows: Iterable[RunRow], arm: str, seconds, count) -> dict[str, float]:
    """Per cell of `arm`: summed seconds over summed counts, over the runs the noise guard passed."""
    totals: dict[str, list[float]] = {}
    for row in rows:
        if row.arm == arm and not row.noisy and count(row):
            total = totals.setdefault(cell_key(row), [0.0, 0.0])
            total[0] += seconds(row)
            total[1] += count(row)
    return {key: s / n for key, (s, n) in totals.items()}


def cells(rows: Iterable[RunRow]) -> list[Cell]:
    rows = list(rows)
    per_round = round_seconds(rows)
    draft_per_round = _per(rows, "sd", lambda r: r.times.draft_s, lambda r: r.counts.rounds)
    step = _per(rows, "baseline", lambda r: r.times.decode_s, lambda r: r.counts.target_forwards)
    out = []
    for c in compare(rows):
        config = c.settings
        out.append(
            Cell(
                group=str(config.group),
                target=str(config.target),
                draft=str(config.draft_name),
                gamma=int(config.gamma),
                prompt=prompt_of(config),
                batch=int(config.batch_size),
                top_k=config.moe_top_k,
                preset=config.target_field("zoo_preset"),
                speedup=c.speedup.value,
                low=c.speedup.low,
                high=c.speedup.high,
                acceptance=c.acceptance_rate,
                efficiency=c.target_efficiency,
                repeats=c.units,
                level=c.speedup.level,
                unstable=bool(c.unstable),
                round_s=per_round.get(config.cell),
                draft_round_s=draft_per_round.get(config.cell),
                step_s=step.get(config.baseline_cell or ""),
            )
        )
    return sorted(out, key=lambda x: (x.group, x.target, x.draft, x.gamma, x.prompt, x.batch, x.top_k or 0))


def select(items: Iterable[Cell], **fields) -> list[Cell]:
    """Cells whose attributes equal the given values (a tuple value means any of them)."""

    def match(cell: Cell) -> bool:
        for name, want in fields.items():
            value = getattr(cell, name)
            if isinstance(want, tuple) and value not in want:
                return False
            if not isinstance(want, tuple) and value != want:
                return False
        return True

    return [c for c in items if match(c)]


def decided_by(counted: Iterable[Cell], left_out: Iterable[Cell] = ()) -> str:
    """The cells a verdict rested on, and those of its scope that decided nothing, with why. Each
    cell is named by the fields that vary among them (the rest is the claim's scope)."""
    counted, left_out = list(counted), list(left_out)
    every = [c.parts for c in counted + left_out]
    varies = [i for i in range(len(every[0])) if len({p[i] for p in every}) > 1] if every else []

    def name(cell: Cell) -> str:
        return " ".join(cell.parts[i] for i in varies if cell.parts[i]) or cell.target

    text = f"{len(counted)} judged cells" + (": " + ", ".join(name(c) for c in counted) if counted else "")
    if left_out:
        text += f"; decided nothing ({len(left_out)}): " + ", ".join(
            f"{name(c)} ({c.why_not_judged()})" for c in left_out
        )
    return text
