"""specmoe's loop over llama.cpp vs llama.cpp's own `llama-speculative`, on this machine.
Not a test: prints figures and writes JSON.

    SPECMOE_LLAMA_SPECULATIVE=/tmp/llama-build/bin/llama-speculative \
    python -m benchmarks.decoding.llamacpp_speed --zoo ~/.cache/specmoe/zoo/bench-seed0 \
        --out docs/results/cpu/llamacpp_speed.json      # and llamacpp_speed.md beside it

Same GGUF pair (the bench zoo's `moe` with `draft-xs`, and with itself as a draft, exported by
`specmoe.zoo.gguf` as Q8_0), same prompt, gamma, thread count and token budget, greedy, EOS
ignored, for both:
- ours: `specmoe.decoding.decode` with the llamacpp backend for target and draft;
- theirs: `llama-speculative` (examples/speculative of the llama.cpp sources inside the
  llama-cpp-python sdist; docs/llamacpp.md says how to build it). Its path comes from the
  environment variable SPECMOE_LLAMA_SPECULATIVE; without it the comparison is skipped with a message.

Both count emitted tokens end to end: ours `emitted` over the decode loop's wall clock; theirs the
`decoded N tokens in T seconds` line, whose N counts every token the loop accepted or sampled and
whose clock runs from the first sampled token to the end of the loop. That clock excludes the
target's forward over the last prompt token (llama-speculative does it while "encoding"), which
ours counts as decode, so the end-to-end figure (prefill + decode for both) is reported too.
llama-speculative stops once it has emitted more than -n tokens, so it emits a few more than ours.
The bench zoo's random draft-xs agrees with the target on almost no token (acceptance ~0: every round
pays gamma draft steps and a gamma + 1 verify for one token); the self-draft accepts everything.
Together they bound what a real draft does. The two outputs are compared byte for byte: greedy
decoding of the same files should print the same text.

The two tools run alternately (ours, theirs, ours, ...), so drift in what else the machine does
falls on both; figures are medians over the repeats. Each repeat's pair of runs is also a paired
unit: the ratio of mean tokens/s over the repeats comes with its t-interval (`specmoe.stats`), which
says whether a gap is larger than what the machine's run-to-run spread lets one tell.

Also reported for ours: the host overhead share (time in the Python loop outside the draft's and
the target's llama.cpp calls) of decode wall time, and its mean per round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from specmoe.api import load_model, load_tokenizer
from specmoe.audit.llamacpp_logs import SpeculativeLog, parse_log
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.stats import ratio_of_means
from specmoe.zoo.gguf import zoo_gguf

PROMPT = "Explain step by step how a hash map resolves collisions, and compare open addressing with chaining."
BINARY_ENV = "SPECMOE_LLAMA_SPECULATIVE"


def ours_once(target, draft, prompt_ids, config: DecodeConfig) -> dict:
    """One timed run of specmoe's loop: counts, clocks and the host overhead of its rounds."""
    run = decode(target, [prompt_ids], config, ModelDrafter(draft))
    emitted = sum(sum(r.emitted) for r in run.rounds)
    overhead = sum(r.overhead_s for r in run.rounds)
    return {
        "emitted": emitted,
        "rounds": len(run.rounds),
        "acceptance_rate": sum(sum(r.accepted) for r in run.rounds) / sum(sum(r.drafted) for r in run.rounds),
        "decode_s": run.decode_s,
        "prefill_s": run.prefill_s,
        "decode_tokens_per_s": emitted / run.decode_s,
        "end_to_end_tokens_per_s": emitted / (run.decode_s + run.prefill_s),
        "host_overhead_share": overhead / run.decode_s,
        "host_overhead_per_round_ms": 1e3 * overhead / len(run.rounds),
        "draft_share": sum(r.draft_s for r in run.rounds) / run.decode_s,
        "verify_share": sum(r.verify_s for r in run.rounds) / run.decode_s,
        "token_ids": list(run.outputs[0].token_ids),
    }


def speculative_command(binary: str, target: Path, draft: Path, gamma: int, new_tokens: int, threads: int):
    return [
        binary,
        *("-m", str(target), "-md", str(draft), "-p", PROMPT, "-n", str(new_tokens)),
        *("--spec-draft-n-max", str(gamma), "--spec-draft-n-min", "0"),
        *("--temp", "0", "--ignore-eos", "-s", "0", "-np", "1"),
        *("-t", str(threads), "-tb", str(threads), "-td", str(threads), "-tbd", str(threads)),
    ]


def theirs_once(command: list[str]) -> dict:
    """One run of llama-speculative (it runs its own warm-up decode before its clock starts)."""
    done = subprocess.run(command, capture_output=True, timeout=1800)
    # stdout: the prompt and the generated pieces as raw bytes (random models print partial
    # UTF-8); stderr: the summary read here.
    stderr = done.stderr.decode("utf-8", "replace")
    log = parse_log(stderr)
    if done.returncode != 0 or not isinstance(log, SpeculativeLog) or log.decoded is None:
        raise SystemExit(f"llama-speculative failed (exit {done.returncode}); stderr tail:\n{stderr[-1500:]}")
    return {
        "emitted": log.decoded.tokens,
        "n_drafted": log.n_drafted,
        "n_accept": log.n_accept,
        "decode_s": log.decoded.seconds,
        "encode_s": log.encoded.seconds,
        "decode_tokens_per_s": log.decoded.tokens / log.decoded.seconds,
        "end_to_end_tokens_per_s": log.decoded.tokens / (log.decoded.seconds + log.encoded.seconds),
        "printed": done.stdout,
    }


def shown(command: list[str]) -> str:
    """The command as the results show it: the tool by name, paths under the home folder as ~."""
    home = str(Path.home())
    return " ".join([Path(command[0]).name, *(a.replace(home, "~") for a in command[1:])])


def medians(runs: list[dict]) -> dict:
    """Counts from the first run (greedy: every run emits the same), medians of everything timed."""
    first = runs[0]
    return {
        key: statistics.median(run[key] for run in runs) if isinstance(value, float) else value
        for key, value in first.items()
        if key not in ("token_ids", "printed")
    }


def compare(target, draft, paths, prompt_ids, gamma: int, args, binary: str | None, tokenizer) -> dict:
    """One (draft, gamma) point: both tools, alternately, `args.repeats` times each."""
    config = DecodeConfig(max_new_tokens=args.new_tokens, gamma=gamma, ignore_eos=True)
    command = speculative_command(binary or "", *paths, gamma, args.new_tokens, args.threads)
    ours_once(target, draft, prompt_ids, config)  # warm-up: first decodes after a load are slower
    mine, theirs = [], []
    for _ in range(args.repeats):
        mine.append(ours_once(target, draft, prompt_ids, config))
        if binary is not None:
            theirs.append(theirs_once(command))
    row: dict = {"draft": paths[1].name, "gamma": gamma, "ours": medians(mine)}
    if theirs:
        row["llama_speculative"] = {"command": shown(command), **medians(theirs)}
        # greedy decoding of the same files: their (longer) output continues ours
        row["same_text"] = tokenizer.decode_bytes(mine[0]["token_ids"]) in theirs[0]["printed"]
        for clock in ("decode_tokens_per_s", "end_to_end_tokens_per_s"):
            row[f"ratio_{clock}"] = row["ours"][clock] / row["llama_speculative"][clock]
            # each repeat ran both tools back to back: a paired unit, so drift cancels in the interval
            ours_rates, their_rates = [r[clock] for r in mine], [r[clock] for r in theirs]
            estimate = ratio_of_means(ours_rates, their_rates)
            row[f"paired_{clock}"] = {
                "ratio_of_means": estimate.value,
                "low": estimate.low,
                "high": estimate.high,
                "level": estimate.level,
                "units": estimate.n,
                "ours": ours_rates,
                "llama_speculative": their_rates,
            }
    return row


def _paired(estimate: dict | None) -> str:
    if estimate is None:
        return "–"
    e = estimate
    if e["level"] is None:
        return f"{e['ratio_of_means']:.3f} (range {e['low']:.3f}–{e['high']:.3f}, n={e['units']})"
    return f"{e['ratio_of_means']:.3f} [{e['low']:.3f}, {e['high']:.3f}] {e['level']:.0%} n={e['units']}"


def markdown(report: dict) -> str:
    """The table docs/llamacpp.md shows: both tools' decode and end-to-end tokens/s and their ratios."""
    lines = [
        "<!-- Written by benchmarks/decoding/llamacpp_speed.py; do not edit. -->",
        f"Target {report['target']}, {report['threads']} thread(s), {report['new_tokens']} new tokens, "
        f"a {report['prompt_tokens']}-token prompt, greedy; medians of {report['repeats']} alternating runs.",
        "",
        "| draft | γ | acceptance | specmoe tok/s | llama-speculative tok/s | ratio (decode) "
        "| ratio (end to end) | end to end, paired ratio of means | same text | host overhead share "
        "| per round |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["results"]:
        ours, theirs = row["ours"], row.get("llama_speculative")
        their_rate = f"{theirs['decode_tokens_per_s']:.2f}" if theirs else "–"
        ratios = (
            f"{row['ratio_decode_tokens_per_s']:.3f} | {row['ratio_end_to_end_tokens_per_s']:.3f} | "
            f"{_paired(row.get('paired_end_to_end_tokens_per_s'))} | {'yes' if row['same_text'] else 'no'}"
            if theirs
            else "– | – | – | –"
        )
        lines.append(
            f"| {Path(row['draft']).stem} | {row['gamma']} | {ours['acceptance_rate']:.2f} | "
            f"{ours['decode_tokens_per_s']:.2f} | {their_rate} | {ratios} | "
            f"{ours['host_overhead_share']:.1%} | {ours['host_overhead_per_round_ms']:.2f} ms |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--zoo", type=Path, required=True, help="the bench zoo (specmoe zoo build --preset bench)"
    )
    parser.add_argument("--type", default="q8_0", help="GGUF weight type of every model")
    parser.add_argument("--target", default="moe")
    parser.add_argument("--pairs", default="draft-xs:1,4,16;moe:4", help="DRAFT:GAMMA,...;DRAFT:GAMMA,...")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    target_path = zoo_gguf(args.zoo, args.target, args.type)
    tokenizer = load_tokenizer(target_path)
    prompt_ids = tokenizer.encode(PROMPT, add_special_tokens=False)
    target = load_model(target_path, n_threads=args.threads)
    binary = os.environ.get(BINARY_ENV)
    if not binary or not Path(binary).is_file():
        print(
            f"{BINARY_ENV} is {'unset' if not binary else f'not a file ({binary})'}: measuring specmoe only; "
            "build llama-speculative as docs/llamacpp.md shows and point the variable at it",
            file=sys.stderr,
        )
        binary = None
    report: dict = {
        "target": target_path.name,
        "threads": args.threads,
        "new_tokens": args.new_tokens,
        "prompt_tokens": len(prompt_ids),
        "repeats": args.repeats,
        "results": [],
    }
    for pair in args.pairs.split(";"):
        name, gammas = pair.split(":")
        draft_path = zoo_gguf(args.zoo, name, args.type)
        draft = load_model(draft_path, n_threads=args.threads)
        for gamma in (int(g) for g in gammas.split(",")):
            row = compare(
                target, draft, (target_path, draft_path), prompt_ids, gamma, args, binary, tokenizer
            )
            report["results"].append(row)
            print(json.dumps(row, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(markdown(report))


if __name__ == "__main__":
    main()
