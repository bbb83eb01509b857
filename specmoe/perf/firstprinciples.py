"""Constants of the forward-time model from a hardware file and a config, with no timing at all.

Every weight-bearing term of `specmoe.perf.model` is "time to stream the weights" times the
roofline G, so the constants follow from bytes and FLOPs:

    W_d  = bytes of the dense weights / BW                       [s]
    w_e  = bytes of one routed expert (all MoE layers) / BW      [s]
    λ    = F · bytes_per_param / (2 · BW)                        [tokens per weight read]
    w_kv = bytes of one cached token's keys and values / BW      [s per cached token per sequence]
    λ_kv = F · kv_bytes_per_token / (BW · 4 · q_heads · head_dim · layers)
    c₀ = c_tok = 0, s = ∞ (the hard roofline max(1, x))

with BW the read bandwidth and F the matmul FLOP rate for the weights' dtype. Nothing here knows
kernel launch costs, framework overhead, imperfect overlap or kernels that miss the roofline, so
predictions are labelled UNFITTED: they bound what the hardware allows rather than forecast a
particular runtime.

Several devices (`device_count` D > 1): routed experts are split over the devices (expert
parallelism, E/D experts each) and the dense part is split by tensor parallelism. With balanced
routing each device activates N(n)/D experts and computes 1/D of the FLOPs, so the pass costs what
one device with D× the bandwidth and FLOP rate would; all-to-all communication and load imbalance
are not modelled, which makes multi-device predictions optimistic.
"""

from __future__ import annotations

import json
from pathlib import Path

from specmoe.errors import SpecmoeError
from specmoe.perf.hardware import Hardware
from specmoe.perf.model import Constants, MoEShape
from specmoe.perf.structure import Architecture, parse_architecture


def first_principles_constants(
    arch: Architecture, hardware: Hardware, where: str = "hardware file"
) -> Constants:
    devices = hardware.device_count
    if arch.is_moe and devices > arch.num_experts:
        raise SpecmoeError(
            f"{where}: device_count {devices} exceeds the {arch.num_experts} experts to split over them; "
            f"use at most {arch.num_experts} devices"
        )
    bandwidth = hardware.bandwidth_bytes_per_s * devices
    flops = hardware.flops_for(arch.dtype, where) * devices
    weight_bytes = arch.bytes_per_param
    attention_flops_per_cached_token = 4 * arch.q_heads * arch.head_dim * arch.layers  # QKᵀ and AV
    return Constants(
        dense_s=arch.params_dense * weight_bytes / bandwidth,
        expert_s=arch.params_per_expert * weight_bytes / bandwidth,
        knee_tokens=flops * weight_bytes / (2 * bandwidth),
        kv_s=arch.kv_bytes_per_token / bandwidth,
        kv_knee_tokens=flops * arch.kv_bytes_per_token / (bandwidth * attention_flops_per_cached_token),
    )


def load_config(path: Path, dtype: str | None = None) -> Architecture:
    path = Path(path)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecmoeError(f"config '{path}' not found; pass a Hugging Face config.json") from None
    except UnicodeDecodeError:
        raise SpecmoeError(f"config '{path}' is not UTF-8 text; pass a Hugging Face config.json") from None
    except json.JSONDecodeError as err:
        raise SpecmoeError(f"config '{path}' is not valid JSON ({err.msg}, line {err.lineno})") from None
    return parse_architecture(config, str(path), dtype)


def unfitted_model(arch: Architecture, hardware: Hardware, where: str) -> tuple[Constants, MoEShape]:
    return first_principles_constants(arch, hardware, where), MoEShape(arch.num_experts, arch.top_k)
