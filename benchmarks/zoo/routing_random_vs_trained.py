"""How a random router routes next to a trained one, on this CPU: distinct experts per layer for the
first n tokens of text, against balanced routing N(n) = E (1 - (1 - K/E)^n), and how evenly each
layer's picks spread over its experts.

    python -m benchmarks.zoo.routing_random_vs_trained --out docs/results/cpu/routing/routing.json

Models (float32, seed 0):
- trained: the `trained` preset's MoE (qwen3_moe, E = 32, K = 2, 2 layers), trained on text;
  built once in the per-user cache (`specmoe zoo build --preset trained`, about 3 minutes).
- random, same shape: the `tiny` preset's MoE, the same shape with the zoo's random init.
- random, config-built: `specmoe zoo build --config docs/perf-examples/olmoe-1b-7b.json` with the
  widths cut so it runs on a CPU (E = 64, K = 8 and the architecture kept; hidden 128, 4 layers).

Inputs: every built-in prompt (code, factual, reasoning, chinese; 39 prompts) tokenized by the
project tokenizer, and as many sequences of uniformly random token ids (1..2047) of the same
lengths. The routers are traced (`RouterTrace`) over one forward of each sequence.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from benchmarks.paths import OLMOE_CONFIG
from specmoe.backends.router_trace import RouterTrace, indices_per_layer
from specmoe.prompts import load_prompt_set
from specmoe.zoo.cache import default_zoo_dir
from specmoe.zoo.routing import expected_distinct_experts

SETS = ("code", "factual", "reasoning", "chinese")
NS = (1, 2, 4, 8, 16, 32)
OLMOE_CPU = {"hidden_size": 128, "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4}
OLMOE_CPU["num_key_value_heads"] = 4


def load(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def sequences(tokenizer_dir: Path, seed: int = 0) -> dict[str, list[torch.Tensor]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = [torch.tensor(tokenizer(p)["input_ids"]) for s in SETS for p in load_prompt_set(s)]
    generator = torch.Generator().manual_seed(seed)
    uniform = [torch.randint(1, 2048, (len(t),), generator=generator) for t in text]
    return {"text": text, "uniform": uniform}


@torch.no_grad()
def routing(model, seqs: list[torch.Tensor], experts: int, top_k: int) -> dict:
    """Distinct experts among the first n tokens (mean over sequences long enough, per layer) and
    each layer's pick shares over all tokens."""
    per_n: dict[int, list[list[float]]] = {n: [] for n in NS}
    picks: list[torch.Tensor] = []
    for ids in seqs:
        with RouterTrace(model) as trace:
            model(ids[None])
        layers = indices_per_layer(trace.records)  # L x [T, K]
        for n in NS:
            if len(ids) >= n:
                per_n[n].append([float(len(set(layer[:n].flatten().tolist()))) for layer in layers])
        counts = torch.stack([torch.bincount(layer.flatten(), minlength=experts) for layer in layers])
        picks.append(counts)
    total = torch.stack(picks).sum(0).float()  # [L, E]
    shares = total / total.sum(1, keepdim=True)
    balanced = top_k / experts / top_k  # each expert's share of picks under balanced routing: 1/E
    rows = []
    for n in NS:
        if not per_n[n]:
            continue
        values = torch.tensor(per_n[n], dtype=torch.float32)  # [sequences, L]
        rows.append(
            {
                "n": n,
                "sequences": len(per_n[n]),
                "balanced": round(expected_distinct_experts(experts, top_k, n), 2),
                "mean": round(values.mean().item(), 2),
                "layer_min": round(values.mean(0).min().item(), 2),
                "layer_max": round(values.mean(0).max().item(), 2),
            }
        )
    return {
        "distinct": rows,
        "hottest_share_over_balanced": [round(v, 2) for v in (shares.max(1).values / balanced).tolist()],
        "experts_never_picked": [int(v) for v in (total == 0).sum(1).tolist()],
        "tokens": int(sum(len(s) for s in seqs)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    from specmoe.zoo import build_zoo
    from specmoe.zoo.config_build import build_config_zoo
    from specmoe.zoo.config_source import read_config_source

    trained_dir = build_zoo("trained", default_zoo_dir("trained", 0), seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        tiny = build_zoo("tiny", Path(tmp) / "tiny", seed=0)
        source = read_config_source(OLMOE_CONFIG, OLMOE_CPU)
        olmoe = build_config_zoo([source], Path(tmp) / "olmoe", seed=0, dtype="float32")
        seqs = sequences(tiny / "moe")
        models = {
            "trained (qwen3_moe, E=32, K=2)": (trained_dir / "moe", 32, 2),
            "random, same shape (zoo tiny moe)": (tiny / "moe", 32, 2),
            "random, config-built (olmoe, E=64, K=8)": (olmoe / source.name, 64, 8),
        }
        result = {}
        for label, (path, experts, top_k) in models.items():
            model = load(path)
            result[label] = {kind: routing(model, s, experts, top_k) for kind, s in seqs.items()}
            print(label)
            for kind, measured in result[label].items():
                cells = "  ".join(
                    f"n={r['n']}: {r['mean']:.1f}/{r['balanced']:.1f}" for r in measured["distinct"]
                )
                print(f"  {kind:8s} {cells}  hottest x{max(measured['hottest_share_over_balanced']):.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
