"""Routed experts kept in host memory: llama.cpp's `--n-cpu-moe N` and `--cpu-moe`, priced on the host.

llama.cpp's `--n-cpu-moe N` keeps the routed-expert tensors (`ffn_{up,down,gate}_exps`) of the first N
blocks in a CPU buffer, and `--cpu-moe` those of every block (common/arg.cpp, common/common.h
`LLM_FFN_EXPS_REGEX`); attention, routers and shared experts stay on the device. A pass then runs
those experts where their weights are, by the size of the operation (ggml-cuda's
`offload_op`, `GGML_OP_OFFLOAD_MIN_BATCH`, 32 tokens by default):

    fewer than 32 tokens   the CPU multiplies them from host memory: per offloaded layer, the
                           N(n) experts the pass activates read at the host's bandwidth (MoESD's
                           N(t), on the slowest tier), each over K·n/N(n) tokens at the CPU's
                           rate; the hidden states cross the link down and back (2·n·H·2 bytes),
                           each crossing a synchronisation (`link_latency_s`)
    32 tokens or more      the device runs them, after copying the layer's whole expert tensor over
                           the link (E experts, every pass)

Shape legend: n = B·t tokens in the pass, E experts per layer, K per token, H hidden size. A verify
of γ + 1 tokens per row wakes N(B·(γ + 1)) experts per layer where a plain step wakes N(B): on the
host tier that difference is what decides whether SD pays. Blocks are llama.cpp's: dense blocks come
first in the models that have them (DeepSeek's `first_k_dense_replace`), and a model's MTP block is
numbered after its main ones, so N larger than the layer count moves the MTP head's experts too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specmoe.errors import SpecmoeError
from specmoe.perf.hardware import Hardware
from specmoe.perf.model import Constants, roofline
from specmoe.theory import expected_active_experts, mean_expert_load

OP_OFFLOAD_MIN_BATCH = 32  # ggml-cuda: an op on host weights runs on the device from this batch
ALL_LAYERS = 1 << 30  # `--cpu-moe`: every block's experts
_ACTIVATION_BYTES = 2


@dataclass(frozen=True)
class HostExperts:
    """The seconds a pass spends on the experts of `layers` MoE layers kept in host memory."""

    layers: int
    experts: int  # E
    top_k: int  # K
    expert_bytes: float  # one routed expert of one layer
    hidden: int
    host_bandwidth: float  # bytes/s
    host_flops: float  # FLOP/s
    link_bandwidth: float  # bytes/s, one direction
    link_latency_s: float
    device_bandwidth: float  # bytes/s, the device's as the engine reaches it
    device_flops: float
    bytes_per_weight: float

    def time(self, batch: float, tokens: float, active: float | None = None) -> float:
        n = float(batch) * float(tokens)
        if active is None:
            active = float(expected_active_experts(n, self.experts, self.top_k))
            load = float(mean_expert_load(n, self.top_k / self.experts))
        else:
            load = self.top_k * n / active
        if n < OP_OFFLOAD_MIN_BATCH:
            knee = self.host_flops * self.bytes_per_weight / (2 * self.host_bandwidth)
            read = active * self.expert_bytes / self.host_bandwidth * float(roofline(load / knee, 2.0))
            hops = 2 * n * self.hidden * _ACTIVATION_BYTES / self.link_bandwidth + 2 * self.link_latency_s
            return self.layers * (read + hops)
        knee = self.device_flops * self.bytes_per_weight / (2 * self.device_bandwidth)
        copy = self.experts * self.expert_bytes / self.link_bandwidth + self.link_latency_s
        run = active * self.expert_bytes / self.device_bandwidth * float(roofline(load / knee, 2.0))
        return self.layers * (copy + run)


def offloaded_layers(blocks: int, layers: int, moe_layers: int) -> int:
    """MoE layers among llama.cpp's first `blocks` blocks, dense blocks coming first."""
    return max(0, min(blocks, layers) - (layers - moe_layers))


def check_offload(
    blocks: int | None, hardware: Hardware, is_moe: bool, engine_name: str, offloads: bool
) -> None:
    """The one-line refusals of `--n-cpu-moe` / `--cpu-moe`."""
    if blocks is None:
        return
    if not isinstance(blocks, int) or isinstance(blocks, bool) or blocks < 0:
        raise SpecmoeError(f"--n-cpu-moe takes a number of layers >= 0, got {blocks!r}")
    if not offloads:
        raise SpecmoeError(
            f"--n-cpu-moe / --cpu-moe is llama.cpp's; engine '{engine_name}' keeps every expert on the "
            "device (pick llamacpp-cuda, -rocm, -vulkan or -metal)"
        )
    if not is_moe:
        raise SpecmoeError("--n-cpu-moe / --cpu-moe moves routed experts to the host; this target has none")
    if hardware.host is None:
        raise SpecmoeError(
            f"--n-cpu-moe needs the hardware file's 'host' object (host memory bandwidth, CPU matrix rate, "
            f"device-host link); '{hardware.name}' has none: add one (as docs/perf-examples/rtx4090.json)"
        )


def host_experts(
    layers: int, arch, constants: Constants, hardware: Hardware, bandwidth: float, flops: float
) -> tuple[Constants, HostExperts | None]:
    """The device's constants without the experts of `layers` MoE layers, and those layers on the
    host; (constants, None) when no layer moves."""
    layers = min(layers, arch.moe_layers)
    if layers <= 0 or not arch.is_moe:
        return constants, None
    host = hardware.host
    kept = (arch.moe_layers - layers) / arch.moe_layers
    per_layer = arch.params_per_expert / arch.moe_layers * arch.bytes_per_param
    tier = HostExperts(
        layers=layers,
        experts=arch.num_experts,
        top_k=arch.top_k,
        expert_bytes=per_layer,
        hidden=arch.hidden,
        host_bandwidth=host.bandwidth_bytes_per_s,
        host_flops=host.flops_per_s,
        link_bandwidth=host.link_bandwidth_bytes_per_s,
        link_latency_s=host.link_latency_s,
        device_bandwidth=bandwidth,
        device_flops=flops,
        bytes_per_weight=arch.bytes_per_param,
    )
    return replace(constants, expert_s=constants.expert_s * kept), tier
