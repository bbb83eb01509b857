"""A forward pass's bandwidth floor: the time to read the weights it touches once, at the measured
read bandwidth of `specmoe hw`.

A pass over n = B·t tokens reads every dense weight (attention, dense MLPs, routers, norms, the
output matrix) and, in each MoE layer, the experts its tokens select. With balanced routing that is
N(n) = E·(1 − (1 − K/E)^n) distinct experts per layer (`specmoe.theory.expected_active_experts`), so

    floor(n) = (bytes_dense + bytes_experts · N(n) / E) / BW        [s]

The input embedding table is left out: a token reads one row of it. Nothing is floored below this
on a machine whose weights do not fit in cache; a step at 1× its floor streams weights at the full
measured bandwidth, and the step's `floor_fraction` (floor ÷ measured time, at most about 1) says
how much of the hardware's read rate the runtime reaches. Byte counts are those of the weights as
stored (bf16, f32, or a GGUF file's quantised blocks), from the profile's model description.
"""

from __future__ import annotations

from specmoe.theory import expected_active_experts


def touched_bytes(model: dict, n_tokens: int) -> float:
    """Weight bytes a pass over `n_tokens` tokens reads, under balanced routing (model: a profile's
    "model" entry with bytes_dense, bytes_experts, is_moe, num_experts, top_k)."""
    touched = float(model["bytes_dense"])
    if model.get("is_moe"):
        experts = expected_active_experts(n_tokens, model["num_experts"], model["top_k"])
        touched += model["bytes_experts"] * float(experts) / model["num_experts"]
    return touched


def floor_seconds(model: dict, n_tokens: int, bandwidth_bytes_per_s: float) -> float:
    """The bandwidth floor of a pass over `n_tokens` tokens, in seconds."""
    return touched_bytes(model, n_tokens) / bandwidth_bytes_per_s


def add_floors(profile: dict, hardware: dict) -> dict:
    """The profile with each point's `floor_s` and `floor_fraction` (floor ÷ median time) and the
    hardware they rest on; needs weight byte counts in the profile's model entry."""
    bandwidth = float(hardware["bandwidth_bytes_per_s"])
    points = []
    for point in profile["points"]:
        floor = floor_seconds(profile["model"], point["batch"] * point["tokens"], bandwidth)
        points.append({**point, "floor_s": floor, "floor_fraction": floor / point["median_s"]})
    source = {"name": hardware.get("name"), "bandwidth_bytes_per_s": bandwidth}
    return {**profile, "points": points, "hardware": source}
