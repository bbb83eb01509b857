"""Pieces of benchmarks/decoding/decode_speed.py: the transformers arm, per-forward costs, draft accounting.

Not part of the package: these measure it.
"""

from __future__ import annotations

import statistics
import time

import torch

from specmoe.decoding.drafters import ModelDrafter

# Kernels that do a forward's arithmetic (weights streamed through matmuls, attention); everything
# else in a forward's wall time is framework cost: dispatch, Python, small ops, allocation.
COMPUTE_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_grouped_mm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_attention_math",
    "aten::_weight_int8pack_mm",
)
# The profiler's name for the call of an inductor-compiled graph; its self time is the generated kernels.
GENERATED_CODE = "## Call CompiledFxGraph"


def read_bandwidth(gib: float = 1.0, repeats: int = 5) -> float:
    """Bytes per second of a full read of a large float32 tensor (sum), median over repeats."""
    x = torch.ones(int(gib * 2**30 / 4), dtype=torch.float32)
    x.sum()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - start)
    return x.numel() * 4 / statistics.median(times)


def active_weight_bytes(model) -> int:
    """Bytes of weights one decoded token reads: all but the unrouted experts and the embedding table."""
    config = model.config
    experts = getattr(config, "num_experts", None)
    top_k = getattr(config, "num_experts_per_tok", None)
    total = 0
    for name, param in model.named_parameters():
        size = param.numel() * param.element_size()
        if "embed_tokens" in name:
            size = param.shape[1] * param.element_size()  # one row is gathered
        elif experts and ".experts." in name:
            size = size * top_k // experts
        total += size
    return total


def step_time(backend, tokens: int, context: list[int], repeats: int) -> float:
    """Median seconds of one forward over `tokens` new tokens after `context` (2 untimed first)."""
    backend.prefill([context])
    block = torch.tensor([context[-tokens:]], device=backend.device)
    times = []
    for _ in range(repeats + 2):
        backend.synchronize()
        start = time.perf_counter()
        backend.forward(block)
        backend.synchronize()
        times.append(time.perf_counter() - start)
        backend.rollback([len(context)])
    return statistics.median(times[2:])


def framework_share(backend, context: list[int], forwards: int = 5) -> float:
    """Share of a T(1,1) forward's wall time outside matmul and attention kernels (torch profiler).

    On CUDA the compute is the GPU's kernel time; on CPU the self time of the ops in COMPUTE_OPS and
    of inductor's generated code (a compiled graph's own kernels: there the matmuls it fuses run).
    """
    from torch.profiler import ProfilerActivity, profile

    step_time(backend, 1, context, 2)  # compiled: every shape ready before profiling
    backend.prefill([context])
    block = torch.tensor([context[-1:]], device=backend.device)
    cuda = backend.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        backend.synchronize()
        start = time.perf_counter()
        for _ in range(forwards):
            backend.forward(block)
            backend.rollback([len(context)])
        backend.synchronize()
        wall = time.perf_counter() - start
    events = prof.key_averages()
    if cuda:
        compute = sum(e.self_device_time_total for e in events) / 1e6
    else:
        compute = sum(e.self_cpu_time_total for e in events if _computes(e.key)) / 1e6
    return max(0.0, 1.0 - compute / wall)


def _computes(key: str) -> bool:
    return key in COMPUTE_OPS or key.startswith(GENERATED_CODE)


class CountingBackend:
    """Wraps a backend and counts its forwards and the token positions they computed."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self.forwards = 0
        self.positions = 0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        self.positions += tokens.shape[0] * tokens.shape[1]
        return self._backend.forward(tokens)

    def __getattr__(self, name):
        return getattr(self._backend, name)


class RecomputingDrafter(ModelDrafter):
    """The drafter before this change: from the second round on every row feeds two tokens
    [second-to-last, last], recomputing one cached token after any rejection."""

    def feedback(self, verified) -> None:
        self._kept = [n + a - 1 for n, a in zip(self._committed, verified.accepted, strict=True)]


def hf_assisted(target_model, draft_model, prompt_ids, new_tokens: int, gamma: int):
    """One transformers assisted-generation run; returns (tokens, wall seconds, prefill seconds).

    transformers reads the drafting schedule from the assistant's own generation config: arguments
    of the same names passed to generate() do not reach its candidate generator, and its default
    confidence threshold (0.4) stops drafting early.
    """
    config = draft_model.generation_config
    config.num_assistant_tokens = gamma
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    ids = torch.tensor([prompt_ids], device=target_model.device)
    kwargs = dict(
        assistant_model=draft_model, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False
    )
    sync = torch.cuda.synchronize if ids.device.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        sync()
        start = time.perf_counter()
        out = target_model.generate(ids, **kwargs)
        sync()
        wall = time.perf_counter() - start
        start = time.perf_counter()
        target_model(ids)
        draft_model(ids)
        sync()
        prefill = time.perf_counter() - start
    return out[0, len(prompt_ids) :].tolist(), wall, prefill
