"""MoESD's claims (e) and (f) on the moesd-wide pass: models whose decode step is bound by reading
weights on this CPU (the wide-sparsity zoo, `specmoe/suites/moesd-wide.toml`), judged by rules.toml [wide].

The bench zoo's steps are bound by per-layer overhead here, so (e) and (f) cannot be told on it
(`batch_claims`). The wide-sparsity zoo keeps wide's layer widths (the demo's bandwidth-bound
models): two MoEs with the same experts and active size at K/E = 1/4 and 1/16, the dense model of
that active size, and the dense model of the sparser MoE's total size. Every rule reads its
thresholds and definitions from rules.toml [wide]; each definition a rule names has its variants
here too (`GATES`, `U_RULES`, `F_RULES`), which `specmoe.findings.sensitivity` judges beside it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import median

from specmoe.findings.batch_claims import u_shape
from specmoe.findings.cells import Cell, decided_by, select
from specmoe.findings.claims import FAILS, HOLDS, UNSURE, Verdict, duel
from specmoe.findings.regime import BANDWIDTH_BOUND, Regime
from specmoe.findings.rules import RULES
from specmoe.results.store import RunRow
from specmoe.zoo.params import count_params
from specmoe.zoo.presets import get_preset

STEP = "moesd-wide"
WIDE = RULES["wide"]
ORACLE: str = WIDE["oracle"]
GAMMA: int = WIDE["gamma"]
MOES: tuple[str, ...] = tuple(WIDE["moes"])  # densest first
DENSE: str = WIDE["dense"]
TOTAL: str = WIDE["total"]
READ_SHARE: float = WIDE["read_share"]

GATES = ("read share", "no gate", "bandwidth gate")
U_RULES = ("rise and fall", "neighbours")
F_RULES = ("paying width", "upper end")
for _key, _names in (("gate", GATES), ("u_rule", U_RULES), ("f_rule", F_RULES)):
    if WIDE[_key] not in _names:
        raise ValueError(f"rules.toml: wide.{_key} must be one of {_names}, got {WIDE[_key]!r}")
if WIDE["medium"] != "interior":
    raise ValueError(f"rules.toml: wide.medium must be 'interior', got {WIDE['medium']!r}")


# --- the regime gate ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step1:
    """A target's plain one-token step at batch 1, from its baseline runs, and the weight bytes one
    token's step reads (its active parameters less the input table, of which a step reads a row)."""

    target: str
    seconds: float  # median over the units' baseline runs the noise guard passed
    read_bytes: float
    units: int


def steps_at_batch_1(rows: Sequence[RunRow]) -> dict[str, Step1]:
    found: dict[str, list[RunRow]] = {}
    for row in rows:
        s = row.settings
        if row.arm == "baseline" and not row.noisy and s.batch_size == 1 and row.counts.target_forwards:
            found.setdefault(str(s.target), []).append(row)
    out = {}
    for target, runs in found.items():
        first = runs[0].settings
        preset, zoo = first.target_field("zoo_preset"), first.target_field("zoo")
        shape = get_preset(preset).model(zoo)
        counts = count_params(shape, get_preset(preset).vocab_size)
        width = 8 if first.dtype == "float64" else 4 if first.dtype == "float32" else 2
        out[target] = Step1(
            target,
            median(r.times.decode_s / r.counts.target_forwards for r in runs),
            float((counts.active - counts.embedding) * width),
            len(runs),
        )
    return out


def marginal_bandwidth(steps: dict[str, Step1]) -> float | None:
    """Bytes per second the two dense models' steps imply: their step difference over their
    weight-byte difference (None without both, or when the larger one is not slower)."""
    small, large = steps.get(DENSE), steps.get(TOTAL)
    if small is None or large is None or large.seconds <= small.seconds:
        return None
    return (large.read_bytes - small.read_bytes) / (large.seconds - small.seconds)


def read_share(step: Step1, bandwidth: float) -> float:
    """The share of a step that reading its weights at `bandwidth` explains."""
    return step.read_bytes / bandwidth / step.seconds


def wide_regime(rows: Sequence[RunRow], gate: str = WIDE["gate"], hardware: dict | None = None) -> Regime:
    """Whether the pass's steps are bound by reading weights, under `gate` (one of GATES)."""
    if gate == "no gate":
        return Regime(True, "no regime gate")
    steps = steps_at_batch_1(rows)
    if gate == "bandwidth gate":
        return _bandwidth_gate(steps, hardware)
    bandwidth = marginal_bandwidth(steps)
    if bandwidth is None:
        return Regime(False, f"no batch-1 baselines of both {DENSE} and {TOTAL} (or {TOTAL} not slower)")
    share = read_share(steps[DENSE], bandwidth)
    moes = ", ".join(f"{m} {read_share(steps[m], bandwidth):.2f}" for m in MOES if m in steps)
    measured = (
        f"at batch 1 {DENSE} steps in {1e3 * steps[DENSE].seconds:.1f} ms and {TOTAL} in "
        f"{1e3 * steps[TOTAL].seconds:.1f} ms, a read bandwidth of {bandwidth / 1e9:.1f} GB/s between "
        f"them; reading {DENSE}'s weights at it explains {share:.2f} of its step (the MoEs': {moes})"
    )
    if share >= READ_SHARE:
        return Regime(True, f"{measured}: bound by reading weights (at least {READ_SHARE:g})")
    return Regime(
        False,
        f"{measured}, under {READ_SHARE:g}: per-layer and host cost, not reading weights, sets the "
        "step, so the regime the claims are about is absent here",
    )


def _bandwidth_gate(steps: dict[str, Step1], hardware: dict | None) -> Regime:
    """The bench pass's bandwidth gate on this pass: each MoE's and the dense model's batch-1 step
    within BANDWIDTH_BOUND times the time to read its weights at the probe's bandwidth."""
    if hardware is None:
        return Regime(False, "no `specmoe hw` result to hold the steps against")
    names = [n for n in (*MOES, DENSE) if n in steps]
    ratios = {n: steps[n].seconds * hardware["bandwidth_bytes_per_s"] / steps[n].read_bytes for n in names}
    shown = ", ".join(f"{n} {r:.1f}×" for n, r in ratios.items())
    ok = bool(ratios) and all(r <= BANDWIDTH_BOUND for r in ratios.values())
    return Regime(ok, f"batch-1 steps over the probe's floor: {shown} (within {BANDWIDTH_BOUND:g}×: {ok})")


# --- (e): the inverted U and the gain at medium batch -------------------------------------------


def sweep(items: Sequence[Cell], target: str) -> list[Cell]:
    """The target's batch series at the rules' oracle and γ, by batch size."""
    return sorted(select(items, target=target, draft=ORACLE, gamma=GAMMA), key=lambda c: c.batch)


def rise_and_fall(series: Sequence[Cell]) -> str:
    """HOLDS: the highest speedup is strictly inside the batch range and beats some cell below it
    and some cell above it. FAILS: it is at the smallest batch and beats the largest (it only falls).
    UNSURE otherwise. Judged cells only (`Cell.beats`)."""
    judged = [c for c in series if c.judged]
    if len(judged) < 3:
        return UNSURE
    peak = max(range(len(judged)), key=lambda i: judged[i].speedup)
    top = judged[peak]
    if 0 < peak < len(judged) - 1:
        rise = any(top.beats(c) for c in judged[:peak])
        fall = any(top.beats(c) for c in judged[peak + 1 :])
        return HOLDS if rise and fall else UNSURE
    return FAILS if peak == 0 and top.beats(judged[-1]) else UNSURE


U_SHAPES: dict[str, Callable[[Sequence[Cell]], str]] = {"rise and fall": rise_and_fall, "neighbours": u_shape}


def interior(batches: Sequence[int]) -> list[int]:
    return list(batches[1:-1])


def medium_pairs(
    items: Sequence[Cell], comparator: str, medium_of: Callable[[Sequence[int]], Sequence[int]] = interior
) -> list[tuple[Cell, Cell]]:
    """(MoE, comparator) cells matched by (draft, γ, B) at the medium batch sizes of the sweep."""
    batches = sorted({c.batch for m in MOES for c in sweep(items, m)})
    medium = set(medium_of(batches))
    other = {(c.draft, c.gamma, c.batch): c for c in select(items, target=comparator) if c.batch in medium}
    return [
        (c, other[(c.draft, c.gamma, c.batch)])
        for m in MOES
        for c in select(items, target=m)
        if (c.draft, c.gamma, c.batch) in other
    ]


def claim_e_wide(
    items: Sequence[Cell],
    regime: Regime,
    u_rule: str = WIDE["u_rule"],
    comparator: str = DENSE,
    medium_of: Callable[[Sequence[int]], Sequence[int]] = interior,
) -> Verdict:
    """(e) on the pass: each MoE's sweep an inverted U, and the MoEs ahead of `comparator` at medium
    batch sizes; "cannot tell here" where the regime gate fails."""
    shapes = {m: U_SHAPES[u_rule](sweep(items, m)) for m in MOES if sweep(items, m)}
    u_holds = sum(s == HOLDS for s in shapes.values())
    u_fails = sum(s == FAILS for s in shapes.values())
    shape = duel(u_holds, u_fails, len(shapes))
    pairs = medium_pairs(items, comparator, medium_of)
    wins = sum(m.beats(d) for m, d in pairs)
    losses = sum(d.beats(m) for m, d in pairs)
    gain = duel(wins, losses, len(pairs))
    verdict = FAILS if FAILS in (shape, gain) else HOLDS if shape == gain == HOLDS else UNSURE
    if not regime.ok:
        verdict = UNSURE
    cells_in = list({id(c): c for pair in pairs for c in pair}.values())  # a dense cell pairs with each MoE
    series = [c for m in MOES for c in sweep(items, m)]
    return Verdict(
        verdict,
        {
            "verdict": verdict,
            "regime": regime.why,
            "regime_ok": "yes" if regime.ok else "no",
            "shape": shape,
            "shapes": ", ".join(f"{m}: {s}" for m, s in shapes.items()) or "no series",
            "gain": gain,
            "pairs": str(len(pairs)),
            "wins": str(wins),
            "losses": str(losses),
            "shape_decided_by": decided_by(
                [c for c in series if c.judged], [c for c in series if not c.judged]
            ),
            "decided_by": decided_by(
                [c for c in cells_in if c.judged], [c for c in cells_in if not c.judged]
            ),
        },
    )


# --- (f): the batch range where SD pays ---------------------------------------------------------


@dataclass(frozen=True)
class PayingRange:
    batches: tuple[int, ...]  # where the speedup's interval lies wholly above 1 (judged cells)
    closed: bool  # the window holds its end: see `paying_range`

    @property
    def width(self) -> int:
        return len(self.batches)

    @property
    def upper(self) -> int:
        return max(self.batches, default=0)

    def text(self) -> str:
        where = ", ".join(map(str, self.batches)) or "nowhere"
        return f"B = {where} ({'closed' if self.closed else 'open'})"


def paying_range(series: Sequence[Cell]) -> PayingRange:
    """Where SD pays, and whether the window closes the range: the highest speedup lies below the
    largest batch and beats it, and the largest batch does not pay."""
    judged = [c for c in series if c.judged]
    paying = tuple(c.batch for c in judged if c.low > 1.0)
    if len(judged) < 2 or not series[-1].judged:
        return PayingRange(paying, False)
    peak = max(judged, key=lambda c: c.speedup)
    last = series[-1]
    closed = peak is not last and peak.beats(last) and not last.low > 1.0
    return PayingRange(paying, closed)


def compare_ranges(sparse: PayingRange, dense: PayingRange, rule: str = WIDE["f_rule"]) -> str:
    """The sparsest MoE's range against the densest's: "wider", "narrower", "same" or "undecided".
    `rule` measures a range by its width ("paying width") or by its largest paying batch ("upper end")."""
    size = (lambda r: r.width) if rule == "paying width" else (lambda r: r.upper)
    if size(sparse) > size(dense) and dense.closed:
        return "wider"
    if size(sparse) < size(dense) and sparse.closed:
        return "narrower"
    if size(sparse) == size(dense) and sparse.closed and dense.closed:
        return "same"
    return "undecided"


F_VERDICTS = {"wider": HOLDS, "narrower": FAILS, "same": FAILS, "undecided": UNSURE}


def claim_f_wide(items: Sequence[Cell], regime: Regime, rule: str = WIDE["f_rule"]) -> Verdict:
    """(f) on the pass: the sparsest MoE's paying range against the densest's."""
    ranges = {m: paying_range(sweep(items, m)) for m in MOES}
    outcome = compare_ranges(ranges[MOES[-1]], ranges[MOES[0]], rule)
    verdict = F_VERDICTS[outcome] if regime.ok else UNSURE
    series = [c for m in MOES for c in sweep(items, m)]
    return Verdict(
        verdict,
        {
            "verdict": verdict,
            "outcome": outcome,
            "ranges": "; ".join(f"{m}: {r.text()}" for m, r in ranges.items()),
            "decided_by": decided_by([c for c in series if c.judged], [c for c in series if not c.judged]),
        },
    )


def point_cells(predicted: dict[tuple[str, str, int, int], float]) -> list[Cell]:
    """The model's predicted speedups as cells without width, so the rules read them as they read
    measurements: a point "beats" another when it is higher."""
    return [
        Cell(
            group="predicted",
            target=target,
            draft=draft,
            gamma=gamma,
            prompt="code",
            batch=batch,
            top_k=None,
            preset=None,
            speedup=value,
            low=value,
            high=value,
            acceptance=float("nan"),
            efficiency=float("nan"),
            repeats=0,
            level=1.0,
        )
        for (target, draft, gamma, batch), value in predicted.items()
    ]


def peak(series: Sequence[Cell]) -> Cell | None:
    judged = [c for c in series if c.judged]
    return max(judged, key=lambda c: c.speedup) if judged else None


def pairs_text(items: Sequence[Cell]) -> str:
    """Each adjacent step of the sweep that moved beyond the intervals, per target (for the tables)."""
    parts = []
    for target in (*MOES, DENSE):
        steps = itertools.pairwise(sweep(items, target))
        moved = [
            f"{a.batch}→{b.batch} {'up' if b.beats(a) else 'down'}"
            for a, b in steps
            if a.beats(b) or b.beats(a)
        ]
        parts.append(f"{target}: {', '.join(moved) or 'no step beyond the intervals'}")
    return "; ".join(parts)
