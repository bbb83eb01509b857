"""The compiled path on real shapes: compile seconds per shape, a plain step and an SD round against
what their forwards cost and against the bandwidth floor, eager beside compiled.

Not a test: prints JSON. Written for one CUDA GPU (CUDA graphs, `reduce-overhead`):

    python -m benchmarks.decoding.compiled_step --device cuda --layers 16 --batches 1,4,16 --out compiled.json

The pair is `decode_overhead.olmoe_pair`: an OLMoE-1B-7B-shaped MoE (bf16, 64 experts top-8) and a
Qwen3-0.6B-shaped draft, random weights, `--layers` layers each (16 and 28 in the real models; the
draft gets the same count here). Per batch size B:

- `compile_s` of the target and of the draft, and each shape's (logged as it compiles);
- a plain step, decode seconds per round of a plain decode, eager and compiled;
- an SD round at γ = 4, decode seconds per round, beside what its forwards cost when timed alone
  (γ draft steps at t = 1 plus one verify block at t = γ + 1): the round's own overhead is the rest;
- at B = 1, the floor: the bytes of weights one token reads (`decode_parts.active_weight_bytes`)
  over the device's read bandwidth. The goal on an H100 is a compiled plain step within 2x of it.

On a CPU inductor takes minutes per shape of these models; `--compiler eager` (graphs captured, no
code generated) checks that the script runs, and its times then mean nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.decoding.decode_overhead import GAMMA, olmoe_pair, prompts_for
from benchmarks.decoding.decode_parts import active_weight_bytes, read_bandwidth
from specmoe.backends.hf import HFBackend
from specmoe.backends.hf_static import StaticHFBackend
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter


def per_round(target, draft, prompts, tokens: int, repeats: int) -> float:
    """Median decode seconds per round (compile time is already out of decode_s)."""
    config = DecodeConfig(max_new_tokens=tokens, gamma=GAMMA, ignore_eos=True)
    times = []
    for _ in range(repeats):
        result = decode(target, prompts, config, ModelDrafter(draft) if draft is not None else None)
        times.append(result.decode_s / len(result.rounds))
    return statistics.median(times)


def forward_s(backend, prompts, t: int, repeats: int) -> float:
    """Median seconds of one forward of t tokens per row after the prompts (then rolled back)."""
    backend.prefill([p[:-t] for p in prompts])
    lengths = backend.cached_lengths()
    block = torch.tensor([p[-t:] for p in prompts], device=backend.device)
    times = []
    for _ in range(repeats + 2):
        backend.synchronize()
        start = time.perf_counter()
        backend.forward(block)
        backend.synchronize()
        times.append(time.perf_counter() - start)
        backend.rollback(lengths)
    return statistics.median(times[2:])


def backends(models, device: torch.device, compiled: bool, compiler: str):
    names = ("target", "draft")
    if not compiled:
        return tuple(HFBackend(m, name, device) for m, name in zip(models, names, strict=True))
    mode = "reduce-overhead" if device.type == "cuda" else None  # as `hf.compiled_backend` picks
    return tuple(
        StaticHFBackend(m, name, device, compile=True, mode=mode, compiler=compiler)
        for m, name in zip(models, names, strict=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per timed decode")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compiler", default="inductor", help="torch.compile backend (eager: a CPU check)")
    parser.add_argument("--experts", default=None, help="the compiled MoE's experts implementation")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    from benchmarks.decoding.decode_speed import cuda_bandwidth

    bandwidth = cuda_bandwidth() if device.type == "cuda" else read_bandwidth()
    report: dict = {
        "setup": vars(args) | {"out": None, "gamma": GAMMA},
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "read_bandwidth_gb_s": bandwidth / 1e9,
    }
    eager_models = olmoe_pair(args.layers, "bfloat16", args.device)
    compiled_models = olmoe_pair(args.layers, "bfloat16", args.device, compile=True)
    if args.experts:  # e.g. specmoe_gathered against grouped_mm (registered by olmoe_pair)
        compiled_models[0].set_experts_implementation(args.experts)
    report["experts"] = compiled_models[0].get_experts_implementation()
    report["floor_s_b1"] = active_weight_bytes(eager_models[0]) / bandwidth
    eager = backends(eager_models, device, False, args.compiler)
    compiled = backends(compiled_models, device, True, args.compiler)
    for batch in [int(b) for b in args.batches.split(",")]:
        prompts = prompts_for(batch, eager[0].vocab_size)
        entry: dict = {}
        before = [b.compile_s for b in compiled]
        per_round(compiled[0], None, prompts, 4, 1)  # compiles t = 1 for the target
        per_round(*compiled, prompts, 4, 1)  # t = gamma + 1, and the draft's t = 1 (and 2)
        entry["compile_s"] = {
            name: backend.compile_s - start
            for name, backend, start in zip(("target", "draft"), compiled, before, strict=True)
        }
        for label, (target, draft) in (("eager", eager), ("compiled", compiled)):
            entry[label] = {
                "plain_step_s": per_round(target, None, prompts, args.tokens, args.repeats),
                "sd_round_s": per_round(target, draft, prompts, args.tokens, args.repeats),
                "draft_step_s": forward_s(draft, prompts, 1, args.repeats),
                "verify_s": forward_s(target, prompts, GAMMA + 1, args.repeats),
            }
            entry[label]["round_forwards_s"] = GAMMA * entry[label]["draft_step_s"] + entry[label]["verify_s"]
        if batch == 1:
            entry["compiled_plain_over_floor"] = entry["compiled"]["plain_step_s"] / report["floor_s_b1"]
        report[f"B{batch}"] = entry
        print(json.dumps({f"B{batch}": entry}), flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
