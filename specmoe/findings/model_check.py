"""The performance model's end-to-end SD speedups checked against measured runs, cell by cell.

For every paired unit (one prompt batch in one repeat: an SD run and its baseline run) the decode
seconds of each arm are composed (`specmoe.perf.compose`) from

- forward times from the fits: T_T(B, γ + 1) per verify, T_T(B, 1) per plain step, the draft's
  T_D(B, 1) and T_D(B, 2);
- the schedule the SD run recorded: per round, its live rows and whether its first draft step fed
  two tokens (after a fully accepted round), and the tokens it emitted (acceptance as measured);
  from the round trace when the rows come from a store, else from the run's counts;
- the engine's host seconds per round and per plain step as the runs measured them (acceptance,
  bookkeeping, rollback; a drafter without a model, n-gram lookup, is host work too);
- where a run was replayed with its routers traced (`specmoe.findings.routing`), the experts its
  verify passes activated, in place of N(n) for independently routed tokens.

Predicted decode tokens/s of both arms then go through the measurement's own estimator (ratio of
means over the cell's units), so prediction and measurement count alike; prefill is in neither.
`advise` is checked on the same cells: at each group of cells that differ only in γ it picks a γ
from the measured ones, with the group's measured per-position acceptance and host times, and the
table says what following it lost against the measured best.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from specmoe.drafts import DraftSpec, draft_of
from specmoe.findings.cells import prompt_of
from specmoe.metrics import acceptance_rate
from specmoe.perf.advise import advise
from specmoe.perf.compose import PlainSchedule, Rounds, SDSchedule, plain_seconds, sd_seconds
from specmoe.results.compare import cell_key, compare
from specmoe.results.run_config import RunConfig
from specmoe.results.store import RunRow
from specmoe.stats import ratio_of_means
from specmoe.theory import per_token_alpha

ForwardModel = object  # anything with time(batch, tokens) -> seconds (specmoe.perf.compose.ForwardTimes)
Models = Callable[[RunConfig], tuple[ForwardModel, ForwardModel | None] | None]  # -> (target, draft)


@dataclass(frozen=True)
class Checked:
    """One measured SD cell beside its composed prediction."""

    engine: str
    suite: str
    target: str
    draft: str
    dtype: str
    gamma: int
    batch: int
    top_k: int | None
    prompt: str
    measured: float
    low: float
    high: float
    level: float | None  # None: fewer than 5 units, low/high are their range
    units: int
    predicted: float
    from_profiles: float | None  # the same composition from profiled (measured) forward times
    acceptance: float  # accepted / drafted, measured
    verify_error: float  # composed verify seconds / measured verify seconds − 1
    draft_error: float | None  # the same for the draft's forwards; None for a drafter without a model
    plain_error: float  # composed plain step / measured plain step − 1 (forward + host)
    host_share: float  # host seconds / decode seconds of the SD arm, measured
    host_s: float  # median host seconds per SD round (drafting without a model included)
    plain_host_s: float  # median host seconds per plain step
    routed: float | None = None  # experts per MoE layer per verify, traced from the runs; None: N(n)
    settings: RunConfig = field(repr=False, compare=False, default_factory=RunConfig)  # a run's, of the cell

    @property
    def error(self) -> float:
        """Relative error of the prediction: predicted / measured − 1."""
        return self.predicted / self.measured - 1

    @property
    def group(self) -> tuple:
        """Cells that differ only in γ."""
        return (
            self.engine,
            self.suite,
            self.target,
            self.draft,
            self.dtype,
            self.batch,
            self.top_k,
            self.prompt,
        )

    def interval(self) -> str:
        if self.level is None:
            return f"{self.measured:.2f}× (range {self.low:.2f}–{self.high:.2f}, n={self.units})"
        return f"{self.measured:.2f}× [{self.low:.2f}, {self.high:.2f}] {self.level:.0%} n={self.units}"


@dataclass(frozen=True)
class AdviceCheck:
    group: tuple
    alpha: float  # the per-position acceptance advise was given
    gammas: tuple[int, ...]
    advised: int
    predicted: float  # advise's predicted speedup at the advised γ
    best: int
    best_low: float  # low end of the measured best γ's interval
    lost: float  # 1 − measured speedup at the advised γ / measured speedup at the best γ


def is_free_drafter(draft: DraftSpec | None) -> bool:
    """Whether a stored run's draft runs no model (an n-gram draft), so costs nothing to model."""
    return draft is not None and not draft.runs_model


def sd_schedule(row: RunRow, active: float | None = None) -> SDSchedule:
    """The rounds an SD run went through, from its trace, or estimated from its counts; `active`,
    the experts per MoE layer its verify passes activated (traced), when known."""
    gamma = int(row.settings.gamma)
    forwards = row.counts.target_forwards
    draft_host = row.times.draft_s / forwards if is_free_drafter(row.settings.draft) else 0.0
    host = row.times.overhead_s / forwards
    groups = trace_rounds(row.rounds_trace, gamma) if row.rounds_trace else counted_rounds(row, gamma)
    if active is not None:
        groups = tuple(replace(g, active=active) for g in groups)
    return SDSchedule(gamma, groups, float(row.counts.emitted), host, draft_host)


def random_routing(schedule: SDSchedule) -> SDSchedule:
    """The schedule without traced expert counts: what profiled times (random tokens) can compose."""
    return replace(schedule, groups=tuple(replace(g, active=None) for g in schedule.groups))


def trace_rounds(trace: Sequence[dict], gamma: int) -> tuple[Rounds, ...]:
    """Rounds by (live rows, first draft step width). A row feeds two tokens first when it accepted
    all γ proposals in the round before; the batch step is as wide as its widest row."""
    counts: dict[tuple[int, bool], int] = defaultdict(int)
    full: set[int] = set()  # rows whose last round accepted everything
    for record in trace:
        rows = record["rows"]
        counts[(len(rows), any(r in full for r in rows))] += 1
        full = {r for r, a in zip(rows, record["accepted"], strict=True) if a == gamma}
    return tuple(Rounds(float(b), float(n), 1.0 if wide else 0.0) for (b, wide), n in sorted(counts.items()))


def counted_rounds(row: RunRow, gamma: int) -> tuple[Rounds, ...]:
    """Without a trace: the mean live rows per round, and the share of two-token first steps that
    i.i.d. acceptance at the run's per-position α gives."""
    forwards = row.counts.target_forwards
    live = row.counts.rounds / forwards  # sequence-rounds per batch round
    rate = acceptance_rate(row.counts.accepted, row.counts.drafted) or 0.0  # no proposals: none accepted
    alpha = per_token_alpha(min(rate, 1.0), gamma)
    wide = 1.0 - (1.0 - alpha**gamma) ** live
    return (Rounds(live, float(forwards), wide),)


def plain_schedule(row: RunRow) -> PlainSchedule:
    steps = row.counts.target_forwards
    host = (row.times.overhead_s + (row.times.draft_s or 0.0)) / steps
    return PlainSchedule(float(row.settings.batch_size), float(steps), float(row.counts.emitted), host)


def _paired_units(rows: Sequence[RunRow]) -> dict[str, list[tuple[RunRow, RunRow]]]:
    """SD runs with their baseline runs, per cell, noisy runs left out (as `bench.summary.compare`)."""
    baselines = {(r.config_key, r.repeat): r for r in rows if r.arm == "baseline"}
    pairs: dict[str, list[tuple[RunRow, RunRow]]] = defaultdict(list)
    for row in rows:
        base = baselines.get((row.baseline_key, row.repeat))
        if row.arm == "sd" and base is not None and not (row.noisy or base.noisy):
            pairs[cell_key(row)].append((row, base))
    return pairs


def _mean_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    return sum(predicted) / sum(measured) - 1


def _predicted(found, schedules: Sequence[tuple[SDSchedule, PlainSchedule]]) -> float:
    """The cell's speedup from composed seconds, through the measurement's estimator."""
    target, draft = found
    sd_rate = [sd.emitted / sd_seconds(target, draft, sd) for sd, _ in schedules]
    plain_rate = [plain.emitted / plain_seconds(target, plain) for _, plain in schedules]
    return ratio_of_means(sd_rate, plain_rate).value


def check_rows(
    rows: Sequence[RunRow],
    models: Models,
    engine: str,
    profiled: Models | None = None,
    routing: Mapping[str, float] | None = None,
) -> list[Checked]:
    """Every SD cell of `rows` whose models `models` knows, measured beside predicted; with
    `profiled` (measured forward times), also the composition from those, which isolates the
    composition's error from the fit's. `routing` maps run ids to the experts per MoE layer their
    verify passes activated (replayed and traced); a cell uses it only when every unit has one."""
    routing = routing or {}
    units = _paired_units(rows)
    out = []
    for comparison in compare(list(rows)):
        config = comparison.settings
        found = models(config)
        pairs = units.get(config.cell, [])
        if found is None or not pairs:
            continue
        target, draft = found
        verify, draft_s, plain = ([], []), ([], []), ([], [])
        traced = all(s.run_id in routing for s, _ in pairs)
        schedules = [
            (sd_schedule(s, routing[s.run_id] if traced else None), plain_schedule(b)) for s, b in pairs
        ]
        profile_schedules = [(random_routing(sd), base) for sd, base in schedules]
        measured_times = profiled(config) if profiled is not None else None
        for (sd_row, base_row), (schedule, base) in zip(pairs, schedules, strict=True):
            no_draft = SDSchedule(schedule.gamma, schedule.groups, schedule.emitted)
            verify[0].append(sd_seconds(target, None, no_draft))
            verify[1].append(sd_row.times.verify_s)
            draft_s[0].append(sd_seconds(target, draft, no_draft) - verify[0][-1])
            draft_s[1].append(sd_row.times.draft_s)
            plain[0].append(plain_seconds(target, base))
            plain[1].append(base_row.times.decode_s)
        measured = comparison.speedup
        host = sum(s.times.overhead_s for s, _ in pairs) / sum(s.times.decode_s for s, _ in pairs)
        out.append(
            Checked(
                engine=engine,
                suite=str(config.suite),
                target=str(config.target),
                draft=str(config.draft_name),
                dtype=str(config.target_field("gguf") or config.dtype),
                gamma=int(config.gamma),
                batch=int(config.batch_size),
                top_k=config.moe_top_k,
                prompt=prompt_of(config),
                measured=measured.value,
                low=measured.low,
                high=measured.high,
                level=measured.level,
                units=comparison.units,
                predicted=_predicted(found, schedules),
                from_profiles=None
                if measured_times is None
                else _predicted(measured_times, profile_schedules),
                acceptance=comparison.acceptance_rate,
                verify_error=_mean_error(*verify),
                draft_error=None if draft is None else _mean_error(*draft_s),
                plain_error=_mean_error(*plain),
                host_share=host,
                host_s=statistics.median(s.host_s + s.draft_host_s for s, _ in schedules),
                plain_host_s=statistics.median(b.host_s for _, b in schedules),
                routed=statistics.fmean(routing[s.run_id] for s, _ in pairs) if traced else None,
                settings=config,
            )
        )
    return out


def group_alpha(cells: Sequence[Checked]) -> float:
    """The per-position acceptance a user would give advise: the oracle's dialed value, else the
    median over the group's cells of the α whose i.i.d. acceptance gives each cell's measured rate."""
    draft = draft_of(cells[0].draft)
    if draft is not None and draft.dialed_acceptance is not None:
        return draft.dialed_acceptance
    return min(statistics.median(per_token_alpha(c.acceptance, c.gamma) for c in cells), 0.999)


def check_advice(checked: Sequence[Checked], models: Models) -> list[AdviceCheck]:
    """advise's γ against the measured best γ, for each group of cells measured at ≥ 2 γ values.

    advise gets what a user would know before choosing γ: the fits, the group's per-position
    acceptance (`group_alpha`) and the engine's host seconds (medians over the group's cells)."""
    groups: dict[tuple, list[Checked]] = defaultdict(list)
    for cell in checked:
        groups[cell.group].append(cell)
    out = []
    for key, cells in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if len(cells) < 2:
            continue
        target, draft = models(cells[0].settings)
        gammas = sorted(c.gamma for c in cells)
        advice = advise(
            target,
            [draft],
            [group_alpha(cells)],
            [cells[0].batch],
            gammas=gammas,
            host_s=statistics.median(c.host_s for c in cells),
            plain_host_s=statistics.median(c.plain_host_s for c in cells),
        )
        chosen = advice["rows"][0]["best"]
        by_gamma = {c.gamma: c for c in cells}
        best = max(gammas, key=lambda g: by_gamma[g].measured)
        lost = 1 - by_gamma[chosen["gamma"]].measured / by_gamma[best].measured
        out.append(
            AdviceCheck(
                key,
                group_alpha(cells),
                tuple(gammas),
                chosen["gamma"],
                chosen["speedup"],
                best,
                by_gamma[best].low,
                lost,
            )
        )
    return out


def read_rows(path: Path) -> list[RunRow]:
    """A store (.db: round traces included) or an exported CSV (counts only)."""
    if Path(path).suffix == ".db":
        from specmoe.results.store import Store

        with Store(path) as store:
            return store.rows()
    from specmoe.findings.results import read_export

    return read_export(path)


class ModelLibrary:
    """Forward-time models for a run's config, from fits (the model) or profiles (measured times,
    interpolated in log B) in one or more folders.

    A model is looked up as `{zoo preset}-{name}-{dtype}.json`, dtype being the GGUF weight type for
    a llama.cpp run; `{preset}-{name}-top{K}-{dtype}.json` first when the run rerouted an MoE to K
    experts; and `{name}-{dtype}.json` last for the bench zoo (the findings' own files). A fit of the
    same MoE at another K serves as the sparsity what-if (`specmoe.perf.predict.with_top_k`); a
    profile must be at the run's K. A run whose models are not found is left out."""

    def __init__(self, folders: Sequence[Path], measured: bool = False) -> None:
        self.folders = [Path(f) for f in folders]
        self.measured = measured
        self._cache: dict[tuple, object] = {}

    def _path(self, preset: str | None, name: str, dtype: str, top_k: int | None) -> Path | None:
        names = [f"{preset}-{name}-{dtype}.json"] + ([f"{name}-{dtype}.json"] if preset == "bench" else [])
        if top_k is not None:
            names.insert(0, f"{preset}-{name}-top{top_k}-{dtype}.json")
        for folder in self.folders:
            for candidate in names:
                if (folder / candidate).is_file():
                    return folder / candidate
        return None

    def _times(self, preset: str | None, name: str, dtype: str, top_k: int | None = None):
        key = (preset, name, dtype, top_k)
        if key not in self._cache:
            path = self._path(preset, name, dtype, top_k)
            self._cache[key] = None if path is None else self._load(path, top_k)
        return self._cache[key]

    def _load(self, path: Path, top_k: int | None):
        import json

        from specmoe.perf.fit import load_fit
        from specmoe.perf.predict import fit_times, profile_times

        if self.measured:
            profile = json.loads(path.read_text())
            built = profile["model"].get("top_k") or None
            return None if top_k and built and top_k != built else profile_times(profile, path.name)
        fit = load_fit(path)
        built = fit["shape"].get("top_k") or None
        return fit_times(fit, path.name, top_k if top_k and built and top_k != built else None)

    def __call__(self, config: RunConfig):
        preset = config.target_field("zoo_preset")
        # A GGUF model is named by its weight type (q8_0): llama.cpp ignores the run's dtype.
        dtype = str(config.target_field("gguf") or config.dtype)
        target = self._times(preset, str(config.target), dtype, config.moe_top_k)
        if target is None:
            return None
        if is_free_drafter(config.draft):
            return target, None
        name = config.draft_name if config.draft is None else config.draft.cost_model(config.oracle_cost)
        draft_dtype = str(config.draft_field("gguf") or config.dtype)
        draft = self._times(config.draft_field("zoo_preset"), str(name), draft_dtype)
        return None if draft is None else (target, draft)
