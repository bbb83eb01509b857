"""The study's claims on the study's own architecture: the hybrid zoo's pass (`study-hybrid`).

The study's target and drafts are hybrid (gated-DeltaNet linear attention beside full attention);
the bench zoo is not. The `study-hybrid` step decodes the study's suite B questions (two trained
hybrid drafts at γ 4 and 8 on the four prompt kinds) and oracle drafts at the study's < 4%
acceptance and at 100% on a scaled-down Qwen3.5-MoE target (docs/zoo.md). Claims (a), (c) and (d)
are judged there by the same rules as on the bench zoo (`specmoe.findings.claims`); (b) needs dense
targets of other sizes, which the hybrid family does not have, and (e), (f) batch sweeps. Beside the
verdicts: what the linear-attention rollback cost (state_s, a part of every hybrid SD round).
"""

from __future__ import annotations

from collections.abc import Sequence

from specmoe.findings.cells import Cell, select
from specmoe.findings.claims import claim_a, claim_c, claim_d, pct
from specmoe.findings.regime import Regime
from specmoe.findings.wide_doc import runs_line

STEP = "study-hybrid"
NOT_MEASURED = "not measured"


# The hybrid target's step is not profiled, so the bandwidth regime that (d)'s explanation needs is not
# established for it: (d) is then decided by arithmetic alone (the 1 + αγ bound), or cannot be told.
UNPROFILED = Regime(False, "the hybrid target was not profiled, so its bandwidth regime is unknown")


def hybrid_values(study: Sequence[Cell], rows: Sequence, regime: Regime = UNPROFILED) -> dict[str, str]:
    """hybrid.* values for the findings template; "not measured" throughout without a pass."""
    keys = ("a", "c", "d", "d_decided_by", "oracle", "state", "runs", "accept")
    if not rows:
        return {f"hybrid.{key}": NOT_MEASURED for key in keys}
    drafted = select(study, group="B", target="moe")
    d = claim_d(study, [], regime)
    found = {
        "hybrid.a": claim_a(study).values["verdict"],
        "hybrid.c": claim_c(study, drafted).values["verdict"],
        "hybrid.d": d.values["verdict"],
        "hybrid.d_decided_by": d.values["decided_by"],
        "hybrid.oracle": _oracle_line(study),
        "hybrid.state": _state_line(rows),
        "hybrid.runs": runs_line(rows),
        "hybrid.accept": _acceptance_line(drafted),
    }
    return found


def _oracle_line(study: Sequence[Cell]) -> str:
    """The oracle cells: speedup at the study's < 4% acceptance and at 100%, by γ."""
    parts = []
    for cell in sorted(select(study, group="D", target="moe"), key=lambda c: (c.draft, c.gamma, c.prompt)):
        level = f"{cell.level:.0%}" if cell.level else "range"
        parts.append(
            f"{cell.draft} γ={cell.gamma} {cell.prompt}: {cell.speedup:.2f}× "
            f"[{cell.low:.2f}, {cell.high:.2f}] ({level}, n={cell.repeats})"
        )
    return "; ".join(parts) if parts else NOT_MEASURED


def _state_line(rows: Sequence) -> str:
    """The rollback's share of SD decode time over the pass's SD runs (target and draft)."""
    sd = [r for r in rows if r.arm == "sd" and not r.noisy and r.times.state_s is not None]
    decode = sum(r.times.decode_s for r in sd)
    state = sum(r.times.state_s for r in sd)
    if not sd or decode <= 0:
        return NOT_MEASURED
    return f"{pct(state / decode)} of SD decode time over {len(sd)} SD runs"


def _acceptance_line(drafted: Sequence[Cell]) -> str:
    found = []
    for draft in ("draft-xs", "draft-s"):
        cells = select(drafted, draft=draft)
        if cells:
            rates = sorted(c.acceptance for c in cells)
            found.append(f"{draft} {pct(rates[0])}–{pct(rates[-1])}")
    return ", ".join(found) if found else NOT_MEASURED
