"""SmolLM2-135M-Instruct and its distilled draft on this machine, through both backends. Not a test:
prints tables and writes JSON.

    specmoe zoo fetch smollm2 && specmoe zoo build --preset smollm2-draft
    python -m benchmarks.zoo.real_weights --out docs/results/cpu/real/smollm2.json

Three measurements, each a section of the JSON:

- parity: greedy tokens of the transformers copy (float32) against llama.cpp on the Q4_1 GGUF it
  was converted from, 48 new tokens (EOS ignored) from the first two prompts of every built-in
  kind, plain and through the chat template. Where they part: the position, the top-2 logit margin
  of each runtime there, and the same comparison with llama.cpp's KV cache in f32 and flash
  attention off, and on the GGUF with every weight dequantized to f32 (what is left between the
  first two and the third is llama.cpp's 8-bit rounding of activations in quantized matmuls).
- acceptance: the draft against the target, greedy, gamma 4, --tokens new tokens (64; the shipped
  figures used 48), all built-in prompts of each kind as one batch, chat template applied; hf
  float32 and llama.cpp (`specmoe.zoo.agreement` definitions: accepted / drafted proposals).
- cost: one decode step (one new token after a 64-token context) of the target and of the draft,
  taking turns, median of 30 after 5 warm-up steps, one thread; the ratio is the draft's step cost
  relative to the target's (c in the speedup formulas).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from specmoe import api
from specmoe.decoding.divergence import first_difference, top2_margin
from specmoe.metrics import acceptance_rate, mean_accepted_length, totals
from specmoe.prompts import BUILTIN_PROMPT_SETS, load_prompt_set
from specmoe.zoo.gguf_derive import dequantized_gguf
from specmoe.zoo.smollm2 import DRAFT_DIR, default_dir
from specmoe.zoo.smollm2_draft import DRAFT_GGUF

NEW_TOKENS = 48
GAMMA = 4


def prompt_ids(tokenizer, texts: list[str], chat: bool) -> list[list[int]]:
    if chat:
        return [api.chat_prompt_ids(tokenizer, text) for text in texts]
    return [tokenizer.encode(text, add_special_tokens=False) for text in texts]


def parity(root: Path, only: list[str] | None = None) -> list[dict]:
    tokenizer = api.load_tokenizer(root / "hf")
    hf = api.load_model(root / "hf", dtype="float32")
    gguf = root / "SmolLM2-135M-Instruct.Q4_1.gguf"
    scratch = Path(tempfile.mkdtemp(prefix="smollm2-f32-"))
    loaders = {
        "llamacpp": lambda: api.load_model(gguf),
        "llamacpp-f32-cache": lambda: api.load_model(gguf, cache_type="f32", flash_attn=False),
        # every weight dequantized to f32: llama.cpp then computes what the transformers copy does
        "llamacpp-f32-weights": lambda: api.load_model(
            dequantized_gguf(gguf, scratch / "smollm2-f32.gguf"), cache_type="f32", flash_attn=False
        ),
    }
    runtimes = {name: load() for name, load in loaders.items() if only is None or name in only}
    config = api.DecodeConfig(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    rows = []
    for chat in (False, True):
        for kind in BUILTIN_PROMPT_SETS:
            prompts = prompt_ids(tokenizer, list(load_prompt_set(kind)[:2]), chat)
            reference = api.decode(hf, prompts, config)
            for name, runtime in runtimes.items():
                other = api.decode(runtime, prompts, config)
                for index, (prompt, a, b) in enumerate(
                    zip(prompts, reference.outputs, other.outputs, strict=True)
                ):
                    a, b = list(a.token_ids), list(b.token_ids)
                    position = first_difference(a, b)
                    row = {
                        "kind": kind,
                        "chat": chat,
                        "prompt": index,
                        "llamacpp": name,
                        "identical": position is None,
                    }
                    if position is not None:
                        context = [*prompt, *a[:position]]
                        row |= {
                            "first_difference": position,
                            "hf_margin": round(top2_margin(hf, context), 4),
                            "llamacpp_margin": round(top2_margin(runtime, context), 4),
                        }
                    rows.append(row)
                    print(row, flush=True)
    return rows


def acceptance(root: Path, max_new_tokens: int = 64) -> dict[str, list[dict]]:
    tokenizer = api.load_tokenizer(root / "hf")
    pairs = {
        "hf-float32": (root / "hf", root / DRAFT_DIR, {"dtype": "float32"}),
        "llamacpp": (root / "SmolLM2-135M-Instruct.Q4_1.gguf", root / DRAFT_GGUF, {}),
    }
    config = api.DecodeConfig(max_new_tokens=max_new_tokens, gamma=GAMMA, ignore_eos=True)
    out: dict[str, list[dict]] = {}
    for backend, (target_path, draft_path, options) in pairs.items():
        target = api.load_model(target_path, **options)
        drafter = api.ModelDrafter(api.load_model(draft_path, **options))
        out[backend] = []
        for kind in BUILTIN_PROMPT_SETS:
            prompts = prompt_ids(tokenizer, list(load_prompt_set(kind)), chat=True)
            count = totals(api.decode(target, prompts, config, drafter=drafter))
            row = {
                "kind": kind,
                "prompts": len(prompts),
                "drafted": count.drafted,
                "accepted": count.accepted,
                "acceptance_rate": round(acceptance_rate(count.accepted, count.drafted), 4),
                "mean_accepted_length": round(mean_accepted_length(count.accepted, count.rounds), 3),
            }
            out[backend].append(row)
            print(backend, row, flush=True)
    return out


def step_seconds(models: list, context: int = 64, warmup: int = 5, repeats: int = 30) -> list[float]:
    """Median seconds of one 1-token forward after `context` cached tokens, for each model; the
    models take turns step by step, so a busy machine slows them alike."""
    ids = list(range(100, 100 + context))
    times: list[list[float]] = [[] for _ in models]
    for step in range(warmup + repeats):
        for index, model in enumerate(models):
            model.prefill([ids])
            token = torch.tensor([[42]], device=model.device)
            model.synchronize()
            started = time.perf_counter()
            model.forward(token)
            model.synchronize()
            if step >= warmup:
                times[index].append(time.perf_counter() - started)
    return [statistics.median(t) for t in times]


def cost(root: Path) -> dict[str, dict]:
    pairs = {
        "hf-float32": (root / "hf", root / DRAFT_DIR, {"dtype": "float32"}),
        "llamacpp": (root / "SmolLM2-135M-Instruct.Q4_1.gguf", root / DRAFT_GGUF, {}),
    }
    out = {}
    for backend, (target_path, draft_path, options) in pairs.items():
        models = [api.load_model(target_path, **options), api.load_model(draft_path, **options)]
        target_s, draft_s = step_seconds(models)
        out[backend] = {
            "target_step_ms": round(target_s * 1e3, 3),
            "draft_step_ms": round(draft_s * 1e3, 3),
            "ratio": round(draft_s / target_s, 3),
        }
        print(backend, out[backend], flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=default_dir())
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", choices=["parity", "acceptance", "cost"], action="append")
    parser.add_argument("--runtime", action="append", help="parity: only these llama.cpp settings")
    parser.add_argument("--tokens", type=int, default=64, help="acceptance: new tokens per prompt")
    args = parser.parse_args()
    torch.set_num_threads(1)
    parts = args.only or ["parity", "acceptance", "cost"]
    results: dict = {}
    if args.out is not None and args.out.is_file():
        results = json.loads(args.out.read_text(encoding="utf-8"))
    runners = {
        "parity": parity,
        "acceptance": lambda root: acceptance(root, args.tokens),
        "cost": cost,
    }
    for part in parts:
        if part == "parity" and args.runtime:  # re-measure some runtimes, keep the others' rows
            kept = [row for row in results.get("parity", []) if row["llamacpp"] not in args.runtime]
            results[part] = kept + parity(args.root, args.runtime)
        else:
            results[part] = runners[part](args.root)
    results["machine"] = {"cpu": platform.processor() or platform.machine(), "threads": 1}
    results["versions"] = {"torch": torch.__version__}
    draft_record = args.root / "draft.json"
    if draft_record.is_file():
        record = json.loads(draft_record.read_text(encoding="utf-8"))
        results["draft_build"] = {k: v for k, v in record.items() if k != "data"}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
