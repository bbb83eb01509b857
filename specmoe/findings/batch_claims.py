"""MoESD's claims on batch size and sparsity, judged on the moesd suite's cells, with the fitted
performance model's prediction beside each measured speedup."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from statistics import median

from specmoe.drafts import draft_of
from specmoe.findings.cells import Cell, decided_by, select
from specmoe.findings.claims import FAILS, HOLDS, UNSURE, Verdict, duel, x
from specmoe.findings.rules import RULES
from specmoe.theory import expected_tokens_per_round

ORACLE = RULES["batch"]["oracle"]
ALPHA = draft_of(ORACLE).acceptance  # the oracle's per-token acceptance, the performance model's α

Predict = Callable[[str, int, int, int | None], float | None]  # (target, B, γ, top-k) -> speedup


def u_shape(series: Sequence[Cell]) -> str:
    """HOLDS: the peak lies strictly inside the batch range and clears its neighbours, and so both
    ends, beyond the intervals. FAILS: the peak is an end of the range and clears the other end (a
    monotone series). UNSURE otherwise: a peak the intervals cannot separate from its neighbours says
    nothing either way. Judged cells only (`Cell.beats`)."""
    if len(series) < 3:
        return UNSURE
    peak = max(range(len(series)), key=lambda i: series[i].speedup)
    top, last = series[peak], len(series) - 1
    if 0 < peak < last:
        clears = all(top.beats(series[i]) for i in {peak - 1, peak + 1, 0, last})
        return HOLDS if clears else UNSURE
    return FAILS if top.beats(series[last - peak]) else UNSURE


def inverted_u(series: Sequence[Cell]) -> bool:
    return u_shape(series) == HOLDS


def batch_series(items: Sequence[Cell], target: str, gamma: int, top_k: int | None = None) -> list[Cell]:
    found = select(items, target=target, gamma=gamma, draft=ORACLE)
    if top_k is not None:
        found = [c for c in found if c.top_k == top_k]
    elif target == "moe":
        found = [c for c in found if c.group == "batch"]
    return sorted(found, key=lambda c: c.batch)


def interior(batches: Sequence[int]) -> Sequence[int]:
    """The rule's "medium" batch sizes: neither the smallest nor the largest measured."""
    return batches[1:-1]


MEDIUM = {"interior": interior}  # rules.toml's batch.medium, by name


def claim_e(
    moesd: Sequence[Cell],
    predict: Predict,
    medium_of: Callable[[Sequence[int]], Sequence[int]] = MEDIUM[RULES["batch"]["medium"]],
    shape_of: Callable[[Sequence[Cell]], str] = u_shape,
) -> Verdict:
    """Speedup vs batch size is an inverted U, and MoE gains more than dense at medium batch sizes
    (`medium_of` picks them from the batch sizes both targets measured; the rule: `interior`;
    `shape_of` judges one series, the rule: `u_shape`)."""
    gammas = sorted({c.gamma for c in select(moesd, group="batch")})
    moe_shapes = [shape_of(batch_series(moesd, "moe", g)) for g in gammas]
    moe_u = [g for g, shape in zip(gammas, moe_shapes, strict=True) if shape == HOLDS]
    dense_u = [g for g in gammas if inverted_u(batch_series(moesd, "dense-s", g))]
    medium = moe_wins = dense_wins = 0
    medium_cells: list[Cell] = []
    for gamma in gammas:
        moe = {c.batch: c for c in batch_series(moesd, "moe", gamma)}
        dense = {c.batch: c for c in batch_series(moesd, "dense-s", gamma)}
        batches = sorted(set(moe) & set(dense))
        for batch in medium_of(batches):
            medium += 1
            medium_cells += [moe[batch], dense[batch]]
            moe_wins += moe[batch].beats(dense[batch])
            dense_wins += dense[batch].beats(moe[batch])
    if gammas and all(shape == HOLDS for shape in moe_shapes):
        shape = HOLDS
    elif gammas and all(shape == FAILS for shape in moe_shapes):
        shape = FAILS
    else:
        shape = UNSURE
    gain = duel(moe_wins, dense_wins, medium)
    # The claim is a conjunction: it fails when either part fails.
    verdict = FAILS if FAILS in (shape, gain) else HOLDS if shape == gain == HOLDS else UNSURE
    return Verdict(
        verdict,
        {
            "verdict": verdict,
            "shape": shape,
            "gain": gain,
            "gammas": ", ".join(map(str, gammas)),
            "moe_u": str(len(moe_u)),
            "dense_u": str(len(dense_u)),
            "medium": str(medium),
            "moe_wins": str(moe_wins),
            "dense_wins": str(dense_wins),
            "decided_by": decided_by(
                [c for c in medium_cells if c.judged], [c for c in medium_cells if not c.judged]
            ),
            "shape_decided_by": decided_by(
                [c for g in gammas for c in batch_series(moesd, "moe", g) if c.judged],
                [c for g in gammas for c in batch_series(moesd, "moe", g) if not c.judged],
            ),
            "table": _batch_table(moesd, gammas, predict),
            "acceptance": oracle_acceptance(moesd, gammas),
            **_peaks(moesd, gammas),
        },
    )


def oracle_acceptance(moesd: Sequence[Cell], gammas: Sequence[int]) -> str:
    """The measured acceptance rate beside the one the dialed per-position α implies, per γ."""
    parts = []
    for gamma in gammas:
        found = [
            c.acceptance for c in select(moesd, draft=ORACLE, gamma=gamma) if c.acceptance == c.acceptance
        ]
        expected = (float(expected_tokens_per_round(ALPHA, gamma)) - 1) / gamma
        measured = (
            f"{100 * median(found):.1f}% (range {100 * min(found):.1f}–{100 * max(found):.1f}%)"
            if found
            else "–"
        )
        parts.append(f"γ = {gamma}: expected {100 * expected:.1f}%, measured {measured}")
    return "; ".join(parts)


def _peaks(moesd: Sequence[Cell], gammas: Sequence[int]) -> dict[str, str]:
    values = {}
    for target in ("moe", "dense-s"):
        best = max(
            (c for g in gammas for c in batch_series(moesd, target, g)), key=lambda c: c.speedup, default=None
        )
        key = target.replace("-", "_")
        values[f"{key}_peak"] = x(best.speedup) if best else "–"
        values[f"{key}_peak_batch"] = str(best.batch) if best else "–"
        values[f"{key}_peak_gamma"] = str(best.gamma) if best else "–"
    return values


def _batch_table(moesd: Sequence[Cell], gammas: Sequence[int], predict: Predict) -> str:
    batches = sorted({c.batch for c in select(moesd, group="batch")})
    lines = [
        "| target, γ | " + " | ".join(f"B={b}" for b in batches) + " |",
        "|---" * (len(batches) + 1) + "|",
    ]
    for target in ("moe", "dense-s"):
        for gamma in gammas:
            by_batch = {c.batch: c for c in batch_series(moesd, target, gamma)}
            row = []
            for batch in batches:
                cell = by_batch.get(batch)
                predicted = predict(target, batch, gamma, None)
                shown = cell.interval() if cell else "–"
                if predicted is not None:
                    shown += f" (model {predicted:.2f}×)"
                row.append(shown)
            lines.append(f"| {target}, γ={gamma} | " + " | ".join(row) + " |")
    return "\n".join(lines)


# Batch sizes the fitted model is asked about beyond the sweep (extrapolated past the profiled 64).
MODEL_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _span(batches: Sequence[int]) -> str:
    if not batches:
        return "nowhere up to B=256"
    return f"B={batches[0]}–{batches[-1]}" if len(batches) > 1 else f"B={batches[0]}"


def paying_batches(series: Sequence[Cell]) -> list[int]:
    """Batch sizes where SD pays: the speedup's whole confidence interval above 1."""
    return [c.batch for c in series if c.judged and c.low > 1.0]


def peak_inside(series: Sequence[Cell]) -> bool:
    """The series' highest speedup is below its largest batch beyond the intervals: the window
    holds the peak, so the paying range cannot run on past it unseen."""
    if len(series) < 2:
        return False
    peak = max(series, key=lambda c: c.speedup)
    return peak is not series[-1] and peak.beats(series[-1])


def claim_f(moesd: Sequence[Cell], predict: Predict) -> Verdict:
    """Sparser MoE (lower top-k) widens the batch range where SD pays."""
    sparsity_batches = sorted({c.batch for c in select(moesd, group="sparsity")})
    top_ks = sorted({c.top_k for c in select(moesd, target="moe", gamma=4, draft=ORACLE) if c.top_k})
    widths: dict[int, list[int]] = {}
    scope: list[Cell] = []
    lines = [
        "| top-k | " + " | ".join(f"B={b}" for b in sparsity_batches) + " | SD pays at |",
        "|---" * (len(sparsity_batches) + 2) + "|",
    ]
    for k in top_ks:
        series = [c for c in batch_series(moesd, "moe", 4, top_k=k) if c.batch in sparsity_batches]
        widths[k] = paying_batches(series)
        scope += series
        by_batch = {c.batch: c for c in series}
        row = []
        for batch in sparsity_batches:
            cell = by_batch.get(batch)
            predicted = predict("moe", batch, 4, k)
            shown = cell.interval() if cell else "–"
            if predicted is not None:
                shown += f" (model {predicted:.2f}×)"
            row.append(shown)
        paid = ", ".join(map(str, widths[k])) or "nowhere"
        lines.append(f"| {k} | " + " | ".join(row) + f" | {paid} |")
    counts = [len(widths[k]) for k in top_ks]
    open_ended = [
        k
        for k in top_ks
        if not peak_inside([c for c in batch_series(moesd, "moe", 4, top_k=k) if c.batch in sparsity_batches])
    ]
    modelled = []
    for k in top_ks:
        paying = [b for b in MODEL_BATCHES if (predict("moe", b, 4, k) or 0.0) > 1.0]
        modelled.append(f"top-k {k}: {_span(paying)}")
    if len(counts) < 2 or not any(counts) or open_ended:
        verdict = UNSURE
    elif all(a >= b for a, b in itertools.pairwise(counts)) and counts[0] > counts[-1]:
        verdict = HOLDS
    elif all(a <= b for a, b in itertools.pairwise(counts)):
        verdict = FAILS
    else:
        verdict = UNSURE
    return Verdict(
        verdict,
        {
            "verdict": verdict,
            "top_ks": ", ".join(map(str, top_ks)),
            "regime_ok": "no" if open_ended else "yes",
            "regime": (
                f"the batch window (B ≤ {max(sparsity_batches, default=0)}) holds every top-k's peak"
                if not open_ended
                else "the batch window does not hold the peak of top-k "
                + ", ".join(map(str, open_ended))
                + " (still rising, or not beyond the intervals, at its largest batch): its paying range "
                "may run on past the window"
            ),
            "widths": ", ".join(f"top-k {k}: {len(widths[k])}" for k in top_ks),
            "decided_by": decided_by([c for c in scope if c.judged], [c for c in scope if not c.judged]),
            "model_ranges": "; ".join(modelled),
            "table": "\n".join(lines),
        },
    )
