"""Decode-loop speed on the bench zoo: specmoe eager and compiled vs transformers' assisted generation.

Not a test: prints a table and writes JSON.

    python -m benchmarks.decoding.decode_speed --zoo ~/.cache/specmoe/zoo/bench-seed0 \
        --out docs/results/cpu/decode_speed.json

For each target (bench `moe`, `dense-s`) and dtype (float32, bfloat16), with draft `draft-xs`, B = 1,
greedy, gamma = 4 constant, a fixed number of new tokens:
1. T(1,1) of the target eager and compiled, beside its bandwidth floor (bytes of weights one token
   reads / measured read bandwidth), and the share of each forward that is framework cost (wall time
   outside matmul and attention kernels, torch profiler);
2. tokens/s of specmoe eager, specmoe compiled and transformers' `generate(assistant_model=...)` with
   the same pair and schedule (`assistant_confidence_threshold = 0`), each arm warmed up once, then
   the arms alternated (the order rotating every repeat) so all see the same machine load; medians
   over repeats; tokens compared with transformers' (asserted identical in float32 eager);
3. on `moe`, the drafter before this change (one recomputed token per round) as a fourth arm, with
   draft forwards and token positions per round;
4. exactness of the compiled path: float64 SD through compiled graphs vs plain eager greedy decoding
   on the tiny zoo, B = 1 and 3.
Compile time is reported apart (`compile_s`, from the warm-up run) and is in no tokens/s figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path

import torch

from benchmarks.decoding.decode_parts import (
    CountingBackend,
    RecomputingDrafter,
    active_weight_bytes,
    framework_share,
    hf_assisted,
    read_bandwidth,
    step_time,
)
from specmoe.api import load_model, load_tokenizer
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.divergence import find_divergences
from specmoe.decoding.drafters import ModelDrafter

PROMPT = "Explain step by step how a hash map resolves collisions, and compare open addressing with chaining."
GAMMA = 4


def specmoe_run(target, draft, prompt_ids, new_tokens: int, drafter_class=ModelDrafter) -> dict:
    config = DecodeConfig(max_new_tokens=new_tokens, gamma=GAMMA, ignore_eos=True)
    result = decode(target, [prompt_ids], config, drafter_class(draft))
    emitted = len(result.outputs[0].token_ids)
    return {
        "tokens": list(result.outputs[0].token_ids),
        "wall_tok_s": emitted / result.wall_s,
        "decode_tok_s": emitted / result.decode_s,
        "compile_s": result.compile_s,
        "rounds": len(result.rounds),
    }


def hf_run(target, draft, prompt_ids, new_tokens: int) -> dict:
    tokens, wall, prefill = hf_assisted(target.model, draft.model, prompt_ids, new_tokens, GAMMA)
    return {"tokens": tokens, "wall_tok_s": new_tokens / wall, "decode_tok_s": new_tokens / (wall - prefill)}


def draft_work(target, draft, prompt_ids, new_tokens: int, drafter_class) -> dict:
    """Draft forwards and token positions per round (deterministic: counted on one run)."""
    counting = CountingBackend(draft)
    config = DecodeConfig(max_new_tokens=new_tokens, gamma=GAMMA, ignore_eos=True)
    rounds = len(decode(target, [prompt_ids], config, drafter_class(counting)).rounds)
    return {
        "forwards_per_round": counting.forwards / rounds,
        "positions_per_round": counting.positions / rounds,
    }


def measure_config(zoo: Path, name: str, dtype: str, device: str, args, prompt_ids, bandwidth) -> dict:
    target = load_model(zoo / name, dtype=dtype, device=device)
    draft = load_model(zoo / "draft-xs", dtype=dtype, device=device)
    arms = {
        "specmoe eager": lambda: specmoe_run(target, draft, prompt_ids, args.new_tokens),
        "transformers assisted": lambda: hf_run(target, draft, prompt_ids, args.new_tokens),
    }
    report: dict = {}
    context = prompt_ids * 2
    floor = active_weight_bytes(target.model) / bandwidth
    report["T11"] = {"floor_s": floor, "eager_s": step_time(target, 1, context, 10)}
    report["framework_share"] = {"eager": framework_share(target, context)}
    if args.compile:
        # Own copies: the compiled path may pick another experts kernel (hf.default_experts_implementation).
        ctarget = load_model(zoo / name, dtype=dtype, device=device, compile=True)
        cdraft = load_model(zoo / "draft-xs", dtype=dtype, device=device, compile=True)
        arms["specmoe compiled"] = lambda: specmoe_run(ctarget, cdraft, prompt_ids, args.new_tokens)
        report["T11"]["compiled_s"] = step_time(ctarget, 1, context, 10)
        report["framework_share"]["compiled"] = framework_share(ctarget, context)
    if name == "moe":
        arms["specmoe eager, recomputing drafter"] = lambda: specmoe_run(
            target, draft, prompt_ids, args.new_tokens, RecomputingDrafter
        )
        report["draft_work"] = {
            "before": draft_work(target, draft, prompt_ids, args.new_tokens, RecomputingDrafter),
            "after": draft_work(target, draft, prompt_ids, args.new_tokens, ModelDrafter),
        }
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    warm = {arm: fn() for arm, fn in arms.items()}  # compiles every shape; not in the medians
    order = list(arms)
    loads = [os.getloadavg()[0]]
    for repeat in range(args.repeats):
        for arm in order[repeat % len(order) :] + order[: repeat % len(order)]:
            runs[arm].append(arms[arm]())
        loads.append(os.getloadavg()[0])
    reference = runs["transformers assisted"][0]["tokens"]
    report["arms"] = {}
    for arm, results in runs.items():
        tokens = results[0]["tokens"]
        entry = {
            "wall_tok_s": statistics.median(r["wall_tok_s"] for r in results),
            "decode_tok_s": statistics.median(r["decode_tok_s"] for r in results),
            "wall_tok_s_runs": [r["wall_tok_s"] for r in results],
            "identical_to_transformers": tokens == reference,
            "same_tokens_every_run": all(r["tokens"] == tokens for r in results),
        }
        if "compile_s" in warm[arm]:
            entry["compile_s"] = warm[arm]["compile_s"]
        if tokens != reference:
            found = find_divergences(target, [prompt_ids], [tokens], [reference])
            entry["first_difference"] = [{"position": d.position, "margin": d.margin} for d in found]
        report["arms"][arm] = entry
    if dtype == "float32":
        assert report["arms"]["specmoe eager"]["identical_to_transformers"], "eager tokens differ in float32"
    hf = report["arms"]["transformers assisted"]
    for entry in report["arms"].values():
        entry["wall_ratio_to_transformers"] = entry["wall_tok_s"] / hf["wall_tok_s"]
        entry["decode_ratio_to_transformers"] = entry["decode_tok_s"] / hf["decode_tok_s"]
    report["load_average_1min"] = loads
    return report


def exact_compiled(device: str, dtype: str = "float64") -> dict:
    """SD through compiled graphs vs plain eager greedy decoding, tiny zoo, float64."""
    from specmoe.zoo import build_zoo

    prompts = [[11, 12, 13, 14, 15, 16, 17], [40, 41], [99]]
    with tempfile.TemporaryDirectory() as tmp:
        zoo = Path(tmp) / "tiny"
        build_zoo("tiny", zoo, seed=0)
        eager = load_model(zoo / "moe", dtype=dtype, device=device)
        target = load_model(zoo / "moe", dtype=dtype, device=device, compile=True)
        draft = load_model(zoo / "draft-xs", dtype=dtype, device=device, compile=True)
        report = {}
        for batch in (1, 3):
            config = DecodeConfig(max_new_tokens=24, ignore_eos=True)
            expected = [decode(eager, [p], config).outputs[0].token_ids for p in prompts[:batch]]
            sd = decode(
                target,
                prompts[:batch],
                DecodeConfig(max_new_tokens=24, gamma=GAMMA, ignore_eos=True),
                ModelDrafter(draft),
            )
            plain = decode(target, prompts[:batch], config)
            report[f"B{batch}"] = {
                "sd_identical": [o.token_ids for o in sd.outputs] == expected,
                "plain_identical": [o.token_ids for o in plain.outputs] == expected,
                "compile_s": sd.compile_s + plain.compile_s,
            }
    return report


SPEED_HEADER = (
    "| target | dtype | arm | tok/s (wall) | × transformers | tok/s (decode) | × transformers "
    "| identical | compile s |\n|---|---|---|---|---|---|---|---|---|"
)
STEP_HEADER = (
    "| target | dtype | T(1,1) eager ms | compiled ms | floor ms | eager / floor | compiled / floor "
    "| framework share eager | compiled |\n|---|---|---|---|---|---|---|---|---|"
)


def table(report: dict) -> str:
    lines = [SPEED_HEADER]
    for key, config in report["configs"].items():
        name, dtype = key.split("/")
        for arm, e in config["arms"].items():
            cells = [
                name,
                dtype,
                arm,
                f"{e['wall_tok_s']:.2f}",
                f"{e['wall_ratio_to_transformers']:.3f}",
                f"{e['decode_tok_s']:.2f}",
                f"{e['decode_ratio_to_transformers']:.3f}",
                "yes" if e["identical_to_transformers"] else "no",
                f"{e.get('compile_s', 0):.0f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", STEP_HEADER]
    for key, config in report["configs"].items():
        name, dtype = key.split("/")
        t, share = config["T11"], config["framework_share"]
        compiled = t.get("compiled_s", float("nan"))
        cells = [
            name,
            dtype,
            f"{t['eager_s'] * 1e3:.2f}",
            f"{compiled * 1e3:.2f}",
            f"{t['floor_s'] * 1e3:.2f}",
            f"{t['eager_s'] / t['floor_s']:.2f}",
            f"{compiled / t['floor_s']:.2f}",
            f"{share['eager']:.0%}",
            f"{share.get('compiled', float('nan')):.0%}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", type=Path, required=True)
    parser.add_argument("--targets", default="moe,dense-s")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    parser.add_argument(
        "--no-exact", dest="exact", action="store_false", help="skip the float64 compiled check"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--table", type=Path, default=None, help="also write the markdown table here")
    args = parser.parse_args()
    import transformers

    report: dict = {
        "machine": {
            "device": torch.cuda.get_device_name()
            if args.device.startswith("cuda")
            else platform.processor() or "cpu",
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "load_average_at_start": os.getloadavg(),
        },
        "setup": {
            "draft": "draft-xs",
            "batch": 1,
            "gamma": GAMMA,
            "new_tokens": args.new_tokens,
            "repeats": args.repeats,
        },
    }
    prompt_ids = load_tokenizer(args.zoo / "moe").encode(PROMPT, add_special_tokens=False)
    bandwidth = read_bandwidth() if args.device == "cpu" else cuda_bandwidth()
    report["read_bandwidth_gb_s"] = bandwidth / 1e9
    report["configs"] = {}
    for name in args.targets.split(","):
        for dtype in args.dtypes.split(","):
            print(f"{name} {dtype} ...", flush=True)
            report["configs"][f"{name}/{dtype}"] = measure_config(
                args.zoo, name, dtype, args.device, args, prompt_ids, bandwidth
            )
            print(table({"configs": {f"{name}/{dtype}": report["configs"][f"{name}/{dtype}"]}}), flush=True)
            if args.out:  # partial results survive an interrupted run
                write(args.out, report)
    if args.exact and args.compile:
        report["exact_compiled_float64"] = exact_compiled(args.device)
        print(json.dumps(report["exact_compiled_float64"]))
    report["machine"]["load_average_at_end"] = os.getloadavg()
    print(table(report))
    if args.out:
        write(args.out, report)
    if args.table:
        args.table.write_text(table(report) + "\n")


def cuda_bandwidth(gib: float = 2.0, repeats: int = 10) -> float:
    """Bytes per second of a full read of a large float32 tensor on the GPU (sum), median."""
    x = torch.ones(int(gib * 2**30 / 4), dtype=torch.float32, device="cuda")
    x.sum()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        x.sum()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return x.numel() * 4 / statistics.median(times)


def write(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
