"""Can this machine produce the regime a claim is about? Checked before the claim is judged.

A claim about a mechanism can only be tested where the mechanism exists. The study explains its
speedups (claims b and d) by *batch verification amortisation*: a decode step that is bound by
reading the weights from memory, so verifying γ + 1 tokens costs little more than one. Where a
decode step is far slower than its bandwidth floor, fixed per-layer framework cost dominates it and
the amortisation the claim is about is absent: such a machine says nothing about the claim, and the
verdict is "cannot tell here", whatever the speedups are.

The check: the profiled one-token step T(1, 1) of the MoE target against its bandwidth floor, the
time to read the weights one token touches (the dense part plus top-k of E experts' share of the
expert weights) at the read bandwidth `specmoe hw` measured. A step within BANDWIDTH_BOUND times its
floor counts as bandwidth-bound.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

BANDWIDTH_BOUND = 2.0  # T(1,1) at most this many times its bandwidth floor: bandwidth-bound


@dataclass(frozen=True)
class Regime:
    ok: bool
    why: str  # one sentence for the findings document


def step_over_floor(profile: dict, hardware: dict) -> float | None:
    """T(1, 1) ÷ the time to read the weights one token touches; None without a (1, 1) point."""
    model = profile["model"]
    point = next((p for p in profile["points"] if p["batch"] == 1 and p["tokens"] == 1), None)
    if point is None:
        return None
    touched = model["bytes_dense"]
    if model.get("is_moe"):
        touched += model["bytes_experts"] * model["top_k"] / model["num_experts"]
    floor_s = touched / hardware["bandwidth_bytes_per_s"]
    return point["median_s"] / floor_s


def bandwidth_regime(out: Path, model: str = "moe", folder: str = "profiles", weights: str = "*") -> Regime:
    """Whether the target's decode step is bandwidth-bound here (out/<folder>/<model>-<weights>.json,
    out/hw.json)."""
    profiles = sorted((out / folder).glob(f"{model}-{weights}.json"))
    hw_path = out / "hw.json"
    if not profiles or not hw_path.is_file():
        return Regime(
            False, f"no profile of the {model} target or no `specmoe hw` result to check it against"
        )
    profile = json.loads(profiles[0].read_text(encoding="utf-8"))
    ratio = step_over_floor(profile, json.loads(hw_path.read_text(encoding="utf-8")))
    if ratio is None:
        return Regime(False, f"the {model} profile has no one-token step at batch 1")
    dtype = profile["model"].get("dtype", "")
    measured = f"the {model} target's one-token step ({dtype}) takes {ratio:.1f}× its bandwidth floor"
    if ratio <= BANDWIDTH_BOUND:
        return Regime(True, f"{measured}: bandwidth-bound (within {BANDWIDTH_BOUND:g}×)")
    return Regime(
        False,
        f"{measured}, so fixed per-layer cost, not reading weights, dominates it: the amortisation the "
        "claim is about is absent here",
    )
