"""Can this machine produce the regime a claim is about? Checked before the claim is judged.

A claim about a mechanism can only be tested where the mechanism exists. The study explains its
speedups (claims b and d) by *batch verification amortisation*: a decode step that is bound by
reading the weights from memory, so verifying γ + 1 tokens costs little more than one. Where a
decode step is far slower than its bandwidth floor, fixed per-layer framework cost dominates it and
the amortisation the claim is about is absent: such a machine says nothing about the claim, and the
verdict is "cannot tell here", whatever the speedups are.

The check has two parts, both on the MoE target's profile at batch 1:

1. bandwidth-bound: the one-token step T(1, 1) against its bandwidth floor, the time to read the
   weights one token touches (the dense part plus top-k of E experts' share of the expert weights)
   at the read bandwidth `specmoe hw` measured. A step within BANDWIDTH_BOUND times its floor counts
   as bandwidth-bound;
2. amortised: a verify pass of VERIFY_TOKENS = 5 tokens (γ = 4, the study pass's smallest γ)
   against one step. Within AMORTISED times, verification is amortised. A step near its floor is
   not enough: on one CPU thread a runtime whose step reads weights near the floor may still spend
   as long on each extra token's arithmetic (llama.cpp on this CPU does), and then verifying γ + 1
   tokens costs about γ + 1 steps, the opposite of the mechanism.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specmoe.findings.rules import RULES

# The gates a mechanism claim may pass through, in the order they were added (each after verdicts had
# been seen: docs/findings.md shows the verdicts under every one). The rule is the last.
GATES = ("no gate", "bandwidth gate", "bandwidth + verify gates")
RULE_GATES = RULES["regime"]["gates"]
BANDWIDTH_BOUND = RULES["regime"]["bandwidth_bound"]  # T(1,1) within this many times its floor
VERIFY_TOKENS = RULES["regime"]["verify_tokens"]  # γ + 1 at the study pass's smallest γ
AMORTISED = RULES["regime"]["amortised"]  # T(1, VERIFY_TOKENS) within this many times T(1, 1)
GATE_MODEL = RULES["claims"]["b_gate_model"]
if RULE_GATES not in GATES:
    raise ValueError(f"rules.toml: regime.gates must be one of {GATES}, got {RULE_GATES!r}")


# The runs measure one thread on one core, so their floors take the read bandwidth one thread
# reaches (`specmoe hw --threads 1`); hw.json, at torch's default threads, is the fits' hardware.
FLOOR_HARDWARE = ("hw-1thread.json", "hw.json")


def floor_hardware(out: Path) -> dict | None:
    """The hardware file the bandwidth floors use: the one-thread measurement where there is one."""
    for name in FLOOR_HARDWARE:
        if (out / name).is_file():
            return json.loads((out / name).read_text(encoding="utf-8"))
    return None


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


def bandwidth_regime(
    out: Path, model: str = "moe", folder: str = "profiles", weights: str = "*", gates: str = RULE_GATES
) -> Regime:
    """Whether the target's decode step is bandwidth-bound here (out/<folder>/<model>-<weights>.json,
    out/hw.json) and, under the rule's gates, whether its verify is amortised. `gates` names one of
    GATES: "no gate" passes every machine, "bandwidth gate" asks the first part only."""
    if gates == GATES[0]:
        return Regime(True, "no regime gate")
    profiles = sorted((out / folder).glob(f"{model}-{weights}.json"))
    hardware = floor_hardware(out)
    if not profiles or hardware is None:
        return Regime(
            False, f"no profile of the {model} target or no `specmoe hw` result to check it against"
        )
    profile = json.loads(profiles[0].read_text(encoding="utf-8"))
    ratio = step_over_floor(profile, hardware)
    if ratio is None:
        return Regime(False, f"the {model} profile has no one-token step at batch 1")
    dtype = profile["model"].get("dtype", "")
    threads = hardware.get("settings", {}).get("threads")
    at = f" at {threads} thread{'s' if threads != 1 else ''}" if threads else ""
    measured = f"the {model} target's one-token step ({dtype}) takes {ratio:.1f}× its bandwidth floor{at}"
    if ratio <= BANDWIDTH_BOUND:
        bound = f"{measured}: bandwidth-bound (within {BANDWIDTH_BOUND:g}×)"
        return Regime(True, bound) if gates == GATES[1] else _amortisation(profile, bound)
    return Regime(
        False,
        f"{measured}, so fixed per-layer cost, not reading weights, dominates it: the amortisation the "
        "claim is about is absent here",
    )


def verify_over_step(profile: dict, tokens: int = VERIFY_TOKENS) -> float | None:
    """T(1, tokens) ÷ T(1, 1) from a profile; None without both points."""
    times = {p["tokens"]: p["median_s"] for p in profile["points"] if p["batch"] == 1}
    return times[tokens] / times[1] if tokens in times and 1 in times else None


def _amortisation(profile: dict, bound: str) -> Regime:
    """The second part of the check, for a bandwidth-bound step (`bound` says so)."""
    ratio = verify_over_step(profile)
    if ratio is None:
        return Regime(False, f"{bound}, but the profile has no {VERIFY_TOKENS}-token verify at batch 1")
    verify = f"a {VERIFY_TOKENS}-token verify costs {ratio:.1f}× a step"
    if ratio <= AMORTISED:
        return Regime(True, f"{bound}, and {verify}: verification is amortised")
    return Regime(
        False,
        f"{bound}, yet {verify} (amortised would be within {AMORTISED:g}×): each extra token costs "
        "nearly a step of its own, so the amortisation the claim is about is absent here",
    )


def dense_amortisation(
    out: Path, folder: str = "profiles", weights: str = "*", model: str = GATE_MODEL
) -> Regime:
    """Whether this engine amortises a verify at all, measured on a dense model that is not under
    test (out/<folder>/<model>-<weights>.json): its T(1, VERIFY_TOKENS) within AMORTISED times
    T(1, 1). Where even a dense model pays about a step per verified token, no comparison of
    amortisation between targets can tell which one the mechanism favours."""
    profiles = sorted((out / folder).glob(f"{model}-{weights}.json"))
    if not profiles:
        return Regime(False, f"no profile of {model} to check that this engine amortises a verify")
    profile = json.loads(profiles[0].read_text(encoding="utf-8"))
    ratio = verify_over_step(profile)
    if ratio is None:
        return Regime(False, f"the {model} profile has no {VERIFY_TOKENS}-token verify at batch 1")
    dtype = profile["model"].get("dtype", "")
    verify = (
        f"{model} ({dtype}), a dense model not under test, verifies {VERIFY_TOKENS} tokens in "
        f"{ratio:.2f}× a step"
    )
    if ratio <= AMORTISED:
        return Regime(True, f"{verify}: this engine amortises a verify (within {AMORTISED:g}×)")
    return Regime(
        False,
        f"{verify} (amortised would be within {AMORTISED:g}×): each extra token costs nearly a step of "
        "its own even for a dense model, so no target can show the amortisation the claim is about",
    )
