"""Constants of the forward-time model from a hardware file, a config and an engine profile, with no
timing at all.

Every weight-bearing term of `specmoe.perf.model` is "time to stream the weights" times the
roofline G, so the constants follow from bytes and FLOPs:

    BW   = nominal bandwidth · D · engine bandwidth share                     [bytes/s]
    F    = matrix rate of the weights' compute dtype · D · engine compute share [FLOP/s]
    W_d  = bytes of the dense weights / BW                                    [s]
    w_e  = bytes of one routed expert (all MoE layers) / BW                   [s]
    λ    = F · bytes_per_weight / (2 · BW)                                    [tokens per weight read]
    w_kv = bytes of one cached token's keys and values (or MLA latent) / BW   [s per cached token]
    λ_kv = F_kv · kv_bytes_per_token / (BW · attention FLOPs per cached token)
    c_seq = 2 · linear-attention state bytes / BW                            [s per sequence]
    c₀   = the engine's forward_s + layer_s · layers (+ one link latency per collective)
    w_e  also carries the engine's fixed expert_s per activated expert and MoE layer
    c_tok = interconnect seconds per token in the pass (several devices)
    μ, s = the engine's re-read rows for the weights' format and its roofline sharpness

bytes_per_weight is the format's (`specmoe.perf.formats`: block scales included). Without an
engine profile the shares are 1, the fixed costs 0 and the roofline hard: what the hardware allows,
labelled UNFITTED.

Several devices (`device_count` D > 1): routed experts are split over the devices (expert
parallelism, E/D experts each) and the dense part by tensor parallelism, so with balanced routing
a pass reads and computes what one device with D× the bandwidth and FLOP rate would. The traffic
between them is charged from the hardware file's link: two ring all-reduces of the hidden state per
layer, 2·(D − 1)/D · n·H·2 bytes each, and for MoE layers a dispatch and a combine all-to-all of
the K routed copies, 2 · n·K·H·2·(D − 1)/D² bytes per device; each collective also costs
`link_latency_s`. Load imbalance between devices is not modelled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specmoe.canonical import json_value
from specmoe.errors import SpecmoeError
from specmoe.perf.engines import EngineProfile
from specmoe.perf.hardware import Hardware
from specmoe.perf.model import Constants, MoEShape
from specmoe.perf.structure import Architecture, parse_architecture
from specmoe.user_files import read_user_text

_ACTIVATION_BYTES = 2  # hidden states travel between devices in 16 bits
_NO_ENGINE = EngineProfile(name="roofline", description="the hardware alone", device="cuda")


@dataclass(frozen=True)
class Rates:
    bandwidth: float  # bytes/s, all devices
    weight_flops: float  # FLOP/s for the weights' compute dtype, all devices
    attention_flops: float  # FLOP/s for attention over the cache, in the cache's compute dtype


def rates(
    arch: Architecture, hardware: Hardware, engine: EngineProfile, where: str = "hardware file"
) -> Rates:
    """The bandwidth and matrix rates a pass of `arch` reaches under `engine`, all devices together."""
    devices = hardware.device_count
    share = engine.compute_share(arch.weights) * devices
    return Rates(
        bandwidth=hardware.bandwidth_bytes_per_s * devices * engine.bandwidth_efficiency,
        weight_flops=hardware.matmul_rate(arch.weights.compute_dtype, where) * share,
        attention_flops=hardware.matmul_rate(arch.kv.compute_dtype, where) * share,
    )


def _link_costs(arch: Architecture, hardware: Hardware) -> tuple[float, float]:
    """(seconds per token in the pass, fixed seconds per pass) that several devices exchange."""
    devices = hardware.device_count
    if devices == 1:
        return 0.0, 0.0
    link = hardware.link_bandwidth_bytes_per_s
    hidden_bytes = arch.hidden * _ACTIVATION_BYTES
    all_reduce = 2 * (devices - 1) / devices * hidden_bytes  # per token, one ring all-reduce
    all_to_all = arch.top_k * hidden_bytes * (devices - 1) / devices**2  # per token, one direction
    per_token = (2 * arch.layers * all_reduce + 2 * arch.moe_layers * all_to_all) / link
    collectives = 2 * arch.layers + 2 * arch.moe_layers
    return per_token, collectives * hardware.link_latency_s


def first_principles_constants(
    arch: Architecture,
    hardware: Hardware,
    where: str = "hardware file",
    engine: EngineProfile | None = None,
) -> Constants:
    engine = engine or _NO_ENGINE
    devices = hardware.device_count
    if arch.is_moe and devices > arch.num_experts:
        raise SpecmoeError(
            f"{where}: device_count {devices} exceeds the {arch.num_experts} experts to split over them; "
            f"use at most {arch.num_experts} devices"
        )
    achieved = rates(arch, hardware, engine, where)
    weight_bytes = arch.bytes_per_param
    per_token, latency = _link_costs(arch, hardware)
    kv_bytes = arch.kv_bytes_per_token
    kv_knee = 1.0
    if arch.attention_flops_per_token:
        kv_knee = achieved.attention_flops * kv_bytes / (achieved.bandwidth * arch.attention_flops_per_token)
    return Constants(
        overhead_s=engine.overhead_s(arch.layers) + latency,
        sequence_s=2 * arch.state_bytes / achieved.bandwidth,
        dense_s=arch.params_dense * weight_bytes / achieved.bandwidth,
        expert_s=arch.params_per_expert * weight_bytes / achieved.bandwidth
        + engine.expert_s * arch.moe_layers,
        knee_tokens=achieved.weight_flops * weight_bytes / (2 * achieved.bandwidth),
        sharpness=engine.roofline_sharpness,
        kv_s=kv_bytes / achieved.bandwidth,
        kv_knee_tokens=kv_knee,
        reread_tokens=engine.reread_rows(arch.weights),
        token_s=per_token,
    )


def load_config(path: Path, dtype: str | None = None, kv_dtype: str | None = None) -> Architecture:
    path = Path(path)
    try:
        config = json_value(read_user_text(path))
    except FileNotFoundError:
        raise SpecmoeError(f"config '{path}' not found; pass a Hugging Face config.json") from None
    except UnicodeDecodeError:
        raise SpecmoeError(f"config '{path}' is not UTF-8 text; pass a Hugging Face config.json") from None
    except json.JSONDecodeError as err:
        raise SpecmoeError(f"config '{path}' is not valid JSON ({err.msg}, line {err.lineno})") from None
    return parse_architecture(config, str(path), dtype, kv_dtype)


def unfitted_model(
    arch: Architecture, hardware: Hardware, where: str, engine: EngineProfile | None = None
) -> tuple[Constants, MoEShape]:
    return first_principles_constants(arch, hardware, where, engine), MoEShape(arch.num_experts, arch.top_k)
