"""Engine speed on the bench zoo, on this machine. Not a test: prints figures and writes JSON.

    python benchmarks/engine_speed.py --zoo ~/.cache/specmoe/zoo/bench-seed0 \
        --out docs/results/cpu/engine_speed.json

Measures, at B = 1, greedy, gamma = 4, target `moe`, draft `draft-xs`:
1. host overhead share of SD decode wall time (default dtype);
2. decode tokens/s of specmoe's loop vs transformers' assisted generation on the same pair
   (constant schedule of the same gamma, assistant_confidence_threshold = 0), float32, with a check
   that both produce identical tokens;
3. T(1,1) of the MoE next to its memory-bandwidth floor (bytes of weights one token reads divided by
   measured read bandwidth), for each experts implementation transformers offers;
4. T(1,1) and T(1,5) per dtype, to pick the default.
Medians over repeats; ratios are taken between numbers measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specmoe.api import load_model, load_tokenizer
from specmoe.engine.decode import DecodeConfig, decode
from specmoe.engine.drafters import ModelDrafter
from specmoe.metrics import summary

PROMPT = "Explain step by step how a hash map resolves collisions, and compare open addressing with chaining."


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
    """Median seconds of one forward over `tokens` new tokens after `context`."""
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


def ours(target, draft, prompt_ids, new_tokens, repeats):
    config = DecodeConfig(max_new_tokens=new_tokens, gamma=4, ignore_eos=True)
    decode(target, [prompt_ids], config, ModelDrafter(draft))  # warm-up
    runs = [decode(target, [prompt_ids], config, ModelDrafter(draft)) for _ in range(repeats)]
    stats = [summary(r) for r in runs]
    return runs[0].outputs[0].token_ids, stats


def hf_assisted(zoo: Path, prompt_ids, new_tokens, repeats, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(
        zoo / "moe", dtype=dtype, experts_implementation="grouped_mm"
    )
    draft = AutoModelForCausalLM.from_pretrained(zoo / "draft-xs", dtype=dtype)
    ids = torch.tensor([prompt_ids])
    # transformers reads the drafting schedule from the assistant's own generation config; arguments
    # of the same names passed to generate() do not reach the candidate generator.
    draft.generation_config.num_assistant_tokens = 4
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    kwargs = dict(
        assistant_model=draft, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False
    )
    with torch.inference_mode():
        target.generate(ids, **kwargs)
        walls, prefills = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            out = target.generate(ids, **kwargs)
            walls.append(time.perf_counter() - start)
            start = time.perf_counter()
            target(ids)
            draft(ids)
            prefills.append(time.perf_counter() - start)
    return out[0, len(prompt_ids) :].tolist(), statistics.median(walls), statistics.median(prefills)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", type=Path, required=True)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    report: dict = {"threads": torch.get_num_threads()}
    prompt_ids = load_tokenizer(args.zoo / "moe").encode(PROMPT, add_special_tokens=False)
    context = prompt_ids * 2

    bandwidth = read_bandwidth()
    report["read_bandwidth_gb_s"] = bandwidth / 1e9
    for impl in ("grouped_mm", "batched_mm", "eager"):
        target = load_model(args.zoo / "moe", dtype="bfloat16", experts_implementation=impl)
        floor = active_weight_bytes(target.model) / bandwidth
        t11 = step_time(target, 1, context, 10)
        report[f"moe_T11_{impl}"] = {"seconds": t11, "floor_s": floor, "ratio_to_floor": t11 / floor}
        print(f"T(1,1) {impl:<10} {t11 * 1e3:7.2f} ms  floor {floor * 1e3:6.2f} ms  ratio {t11 / floor:5.2f}")
        del target

    for dtype in ("bfloat16", "float32"):
        target = load_model(args.zoo / "moe", dtype=dtype)
        t1, t5 = step_time(target, 1, context, 10), step_time(target, 5, context, 10)
        report[f"moe_{dtype}"] = {"T11_s": t1, "T15_s": t5}
        print(f"{dtype:<9} T(1,1) {t1 * 1e3:7.2f} ms  T(1,5) {t5 * 1e3:7.2f} ms")
        del target

    target, draft = load_model(args.zoo / "moe"), load_model(args.zoo / "draft-xs")
    _, stats = ours(target, draft, prompt_ids, args.new_tokens, args.repeats)
    share = statistics.median(s["overhead_s"] / s["decode_s"] for s in stats)
    report["overhead_share_default_dtype"] = share
    print(f"host overhead share (bf16): {share:.2%}")

    target32, draft32 = (
        load_model(args.zoo / "moe", dtype="float32"),
        load_model(args.zoo / "draft-xs", dtype="float32"),
    )
    tokens, stats = ours(target32, draft32, prompt_ids, args.new_tokens, args.repeats)
    del target32, draft32
    hf_tokens, hf_wall, hf_prefill = hf_assisted(args.zoo, prompt_ids, args.new_tokens, args.repeats)
    our_decode = statistics.median(s["decode_tokens_per_s"] for s in stats)
    our_wall = statistics.median(s["emitted"] / s["wall_s"] for s in stats)
    hf_decode = args.new_tokens / max(hf_wall - hf_prefill, 1e-9)
    report["vs_hf_assisted_float32"] = {
        "ours_decode_tok_s": our_decode,
        "hf_decode_tok_s": hf_decode,
        "decode_ratio": our_decode / hf_decode,
        "ours_wall_tok_s": our_wall,
        "hf_wall_tok_s": args.new_tokens / hf_wall,
        "wall_ratio": our_wall / (args.new_tokens / hf_wall),
        "identical_tokens": list(tokens) == hf_tokens,
        "overhead_share_float32": statistics.median(s["overhead_s"] / s["decode_s"] for s in stats),
    }
    print(json.dumps(report["vs_hf_assisted_float32"], indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
