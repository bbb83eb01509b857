"""Drafters compared on the bench zoo, on this machine. Not a test: prints a table and writes JSON.

    specmoe zoo build --preset bench --out /tmp/zoo-bench2
    python -m benchmarks.decoding.drafters --zoo /tmp/zoo-bench2 --out docs/results/cpu/drafters.json

Target `moe`, B = 1, greedy, float32, 64 new tokens, medians over 3 repeats. For each prompt:
speedup (SD decode tokens/s over plain decode tokens/s) at gamma 1, 2, 4, 8, with acceptance; the
n-gram drafter's seconds per drafted token beside the target's verify seconds per forward; and one
forward step of each model, T(1, 1). Prompts:
- reasoning: the first prompt of the built-in `reasoning` set (drafts draft-xs, draft-moe, ngram);
- own-text: the reasoning prompt followed by 384 tokens of the target's own greedy continuation of
  it, text that a random-weight target keeps coming back to;
- repeated: the reasoning prompt's text three times over; a random-weight target does not continue
  a literal repeat, which is what this prompt shows.
The last two run the n-gram draft only, unless --all-drafts: the model drafts have independent
random weights and accept nothing on any prompt, so there they measure only their cost again, and
they take most of the time (about 14 minutes with them on 2 CPU cores, 9 without).
Every arm runs through `specmoe.decoding.decode.decode` with the same clock and token counting;
repeats interleave the arms so drift on a shared machine hits them alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.decoding.decode_speed import step_time  # T(1, t) timing shared with the decode-loop benchmark
from specmoe.api import load_model, load_tokenizer
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.decoding.ngram import NgramDrafter
from specmoe.decoding.records import DecodeResult
from specmoe.metrics import decode_tokens_per_s, totals
from specmoe.prompts import load_prompt_set

DRAFTS = ("draft-xs", "draft-moe", "ngram")
PROMPT_DRAFTS = {"reasoning": DRAFTS, "own-text": ("ngram",), "repeated": ("ngram",)}
STEP_MODELS = ("moe", "draft-s", "draft-moe", "draft-xs")


def prompts(tokenizer, target, own_tokens: int) -> dict[str, list[int]]:
    text = load_prompt_set("reasoning")[0]
    base = tokenizer.encode(text, add_special_tokens=False)
    own = decode(target, [base], DecodeConfig(max_new_tokens=own_tokens, ignore_eos=True)).outputs[0]
    return {
        "reasoning": base,
        "own-text": base + list(own.token_ids),
        "repeated": tokenizer.encode(" ".join([text] * 3), add_special_tokens=False),
    }


def stats(results: list[DecodeResult], gamma: int) -> dict[str, float]:
    """Medians over repeats of per-run figures; times in seconds."""
    per_run = []
    for result in results:
        t = totals(result)
        draft_s = sum(r.draft_s for r in result.rounds)
        verify_s = sum(r.verify_s for r in result.rounds)
        per_run.append(
            {
                "tokens_per_s": decode_tokens_per_s(t.emitted, result.decode_s),
                "acceptance": t.accepted / t.drafted if t.drafted else 0.0,
                "tokens_per_round": t.emitted / t.rounds,
                "verify_s_per_forward": verify_s / t.target_forwards,
                "draft_s_per_token": draft_s / (t.target_forwards * gamma) if gamma else 0.0,
                # the drafter's seconds per drafted token over the target's seconds per verify
                "draft_token_over_verify": draft_s / gamma / verify_s if gamma else 0.0,
            }
        )
    return {key: statistics.median(run[key] for run in per_run) for key in per_run[0]}


def measure_prompt(target, prompt: list[int], drafters: dict[str, Callable], args) -> dict:
    """Baseline and every (draft, gamma) arm on one prompt; repeats interleave the arms."""
    arms = [(None, 0)] + [(d, g) for d in drafters for g in args.gammas]
    warm = DecodeConfig(max_new_tokens=8, gamma=2, ignore_eos=True)
    for draft in (None, *drafters):  # one short untimed run of every arm kind
        decode(target, [prompt], warm, drafters[draft]() if draft else None)
    runs: dict[tuple, list[DecodeResult]] = {arm: [] for arm in arms}
    for _ in range(args.repeats):
        for draft, gamma in arms:
            config = DecodeConfig(max_new_tokens=args.tokens, gamma=max(gamma, 1), ignore_eos=True)
            runs[(draft, gamma)].append(
                decode(target, [prompt], config, drafters[draft]() if draft else None)
            )
    baseline = stats(runs[(None, 0)], 0)
    rows = []
    for draft, gamma in arms[1:]:
        sd = stats(runs[(draft, gamma)], gamma)
        rows.append(
            {"draft": draft, "gamma": gamma, **sd, "speedup": sd["tokens_per_s"] / baseline["tokens_per_s"]}
        )
    return {"prompt_tokens": len(prompt), "drafts": list(drafters), "baseline": baseline, "sd": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", type=Path, required=True, help="a bench zoo that has draft-moe")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--own-tokens", type=int, default=384, help="own-text prompt: tokens of its own")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--all-drafts", action="store_true", help="every draft on every prompt")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started = time.perf_counter()

    target = load_model(args.zoo / "moe", dtype=args.dtype)
    models = {name: load_model(args.zoo / name, dtype=args.dtype) for name in STEP_MODELS if name != "moe"}
    drafters: dict[str, Callable] = {
        "draft-xs": lambda: ModelDrafter(models["draft-xs"]),
        "draft-moe": lambda: ModelDrafter(models["draft-moe"]),
        "ngram": lambda: NgramDrafter(target),
    }
    prompt_ids = prompts(load_tokenizer(args.zoo / "moe"), target, args.own_tokens)
    report: dict = {
        "setup": vars(args)
        | {"zoo": str(args.zoo), "out": str(args.out), "threads": torch.get_num_threads()},
        "step_ms": {
            n: step_time(b, 1, prompt_ids["reasoning"], 10) * 1e3
            for n, b in {"moe": target, **models}.items()
        },
        "prompts": {},
    }
    for name, prompt in prompt_ids.items():
        chosen = DRAFTS if args.all_drafts else PROMPT_DRAFTS[name]
        report["prompts"][name] = measure_prompt(target, prompt, {d: drafters[d] for d in chosen}, args)
        print(
            f"{name}: {len(prompt)} prompt tokens, done at {time.perf_counter() - started:.0f} s", flush=True
        )
    report["wall_s"] = time.perf_counter() - started
    print(format_table(report, args.gammas))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


def format_table(report: dict, gammas: list[int]) -> str:
    """Speedup (acceptance) per prompt and draft across gamma, then step times and n-gram cost."""
    lines = ["| prompt | draft | " + " | ".join(f"γ={g}" for g in gammas) + " |"]
    lines.append("|---|---|" + "---|" * len(gammas))
    cost = []
    for name, entry in report["prompts"].items():
        by = {(r["draft"], r["gamma"]): r for r in entry["sd"]}
        for draft in entry["drafts"]:
            cells = [f"{by[(draft, g)]['speedup']:.2f}× ({by[(draft, g)]['acceptance']:.2f})" for g in gammas]
            lines.append(f"| {name} | {draft} | " + " | ".join(cells) + " |")
        for g in gammas:
            row = by[("ngram", g)]
            cost.append(
                f"{name} γ={g}: n-gram {row['draft_s_per_token'] * 1e6:.0f} µs per drafted token, "
                f"verify {row['verify_s_per_forward'] * 1e3:.1f} ms per forward "
                f"({row['draft_token_over_verify']:.3%})"
            )
    plain = ", ".join(
        f"{n} {e['baseline']['verify_s_per_forward'] * 1e3:.1f} ms" for n, e in report["prompts"].items()
    )
    steps = ", ".join(f"{n} {ms:.1f} ms" for n, ms in report["step_ms"].items())
    return "\n".join([*lines, "", f"T(1,1): {steps}", f"plain decode, seconds per forward: {plain}", *cost])


if __name__ == "__main__":
    main()
