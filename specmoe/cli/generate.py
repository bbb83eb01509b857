"""`specmoe generate`: decode prompts with a target, speculatively when a draft is given, and print
the texts and the decode's counts and times."""

from __future__ import annotations

import json

from specmoe.cli.options import (
    add_model_options,
    finite_float,
    non_negative_int,
    path_arg,
    torch_seed,
    utf8_text,
)

DEFAULT_PROMPT = "The history of the printing press"


def add_generate(commands) -> None:
    p = commands.add_parser("generate", help="decode prompts, speculatively when --draft is given")
    p.add_argument("--target", required=True, help="target model directory (or zoo name with --zoo)")
    p.add_argument(
        "--draft",
        help="draft model directory or zoo name (an EAGLE-3 head's too: found by its config.json), "
        "mtp (the target's own MTP module), or ngram[:MIN-MAX] (prompt lookup); without it, plain decoding",
    )
    p.add_argument("--zoo", type=path_arg, default=None, help="zoo directory to resolve model names in")
    p.add_argument("--gamma", type=int, default=4, help="tokens drafted per round (>= 1)")
    p.add_argument("--temperature", type=finite_float, default=0.0, help="0 is greedy")
    p.add_argument(
        "--top-k", type=non_negative_int, default=0, help="sample from the k likeliest tokens; 0: all"
    )
    p.add_argument("--top-p", type=finite_float, default=1.0, help="nucleus sampling mass; 1: off")
    p.add_argument("--seed", type=torch_seed, default=0, help="sampling seed (same seed, same tokens)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate per prompt")
    p.add_argument("--ignore-eos", action="store_true", help="always decode max-new-tokens tokens")
    p.add_argument("--prompt", type=utf8_text, action="append", help="prompt text; repeat for a batch")
    p.add_argument(
        "--check",
        action="store_true",
        help="also decode without the draft and report where the outputs differ",
    )
    p.add_argument(
        "--chat",
        action="store_true",
        help="send each prompt as a user message of the model's chat template (instruct models)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--compile",
        action="store_true",
        help="static KV cache + torch.compile'd forwards for the target and the draft model "
        "(transformers models; CUDA graphs on CUDA; each shape is compiled once and its time is "
        "reported apart from decode time)",
    )
    add_model_options(p)
    p.set_defaults(run=run_generate)


def run_generate(args) -> int:
    from specmoe.api import generate_text
    from specmoe.drafts import draft_of
    from specmoe.zoo.manifest import resolve_model_file

    report = generate_text(
        target=args.target,
        draft=draft_of(args.draft),
        prompts=args.prompt or [DEFAULT_PROMPT],
        resolve=lambda spec: resolve_model_file(spec, args.zoo),
        gamma=args.gamma,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        ignore_eos=args.ignore_eos,
        check=args.check,
        chat=args.chat,
        dtype=args.dtype,
        device=args.device,
        experts_implementation=args.experts_implementation,
        allow_pickle=args.allow_pickle,
        trust_remote_code=args.trust_remote_code,
        **({"compile": True} if args.compile else {}),
    )
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(format_report(report))
    return 0


def format_report(report: dict) -> str:
    lines = []
    for index, output in enumerate(report["outputs"]):
        lines.append(f"[{index}] {output['text']}")
    stats = report["stats"]
    rate = stats["acceptance_rate"]
    lines.append(
        f"{stats['emitted']} tokens in {stats['decode_s']:.3f} s decode "
        f"({stats['decode_tokens_per_s']:.1f} tok/s), prefill {stats['prefill_s']:.3f} s, "
        f"{stats['target_forwards']} target forwards"
        + (
            f", acceptance {rate:.1%}, mean accepted length {stats['mean_accepted_length']:.2f}"
            if rate is not None
            else ""
        )
    )
    if stats.get("compile_s"):
        lines.append(f"compiling took {stats['compile_s']:.1f} s, not counted in decode time")
    if stats.get("state_s"):
        share = stats["state_s"] / stats["decode_s"] if stats["decode_s"] > 0 else 0.0
        lines.append(
            f"rolling back linear-attention state took {stats['state_s']:.3f} s ({share:.0%} of decode)"
        )
    for item in report.get("divergences", []):
        lines.append(
            f"sequence {item['sequence']} differs from plain decoding at generated token {item['position']}; "
            f"target top-2 logit margin there {item['margin']:.3g}"
        )
    if "divergences" in report and not report["divergences"]:
        lines.append("identical to plain decoding")
    return "\n".join(lines)
