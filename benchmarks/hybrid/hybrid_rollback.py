"""What rolling back linear-attention state costs a hybrid SD round, on the hybrid-trained zoo.

For each (draft, γ, B): plain decoding and SD alternate over `--repeats` paired units (one prompt
batch each, the same prompts in both arms), and every SD round's time splits into draft, verify,
state rollback and bookkeeping (`decoding.records.RoundRecord`). The state part splits further into
copying states and recomputing them for rows that rejected drafts: in transformers, replaying the
linear layers (`backends.hf_recurrent`); through llama.cpp (`--gguf TYPE`, the zoo's GGUF export,
one thread), stepping back to llama.cpp's per-position snapshots where they cover the rollback or
decoding the kept tokens again through the whole model (`backends.llamacpp_state`; `--rollback`
picks, and each cell records which ran and how many row rollbacks each way served). `--drafts mtp`
drafts with the target's own MTP layer through llama.cpp (a GGUF target that has one).

    python -m benchmarks.hybrid.hybrid_rollback --out docs/results/cpu/hybrid/rollback.json
    python -m benchmarks.hybrid.hybrid_rollback --gguf q8_0 --out docs/results/cpu/hybrid/llamacpp-q8_0.json
    python -m benchmarks.hybrid.hybrid_rollback --gguf q8_0 --rollback snapshots --out ...

Not part of the package: it measures it. The shares are of this CPU and of transformers' PyTorch
fallback of the gated delta rule (no flash-linear-attention kernels on a CPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from specmoe.api import load_model, load_tokenizer
from specmoe.bench.env import environment
from specmoe.decoding.decode import DecodeConfig, decode
from specmoe.decoding.drafters import ModelDrafter
from specmoe.metrics import acceptance_rate, decode_tokens_per_s, totals
from specmoe.prompts import load_prompt_set
from specmoe.stats import ratio_of_means
from specmoe.zoo import build_zoo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--zoo", type=Path, help="a built hybrid-trained zoo (default: build or reuse the cache)"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--drafts", nargs="+", default=["draft-xs", "draft-s"])
    parser.add_argument("--gammas", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--gguf", help="run the zoo's GGUF export of this type through llama.cpp")
    parser.add_argument(
        "--rollback",
        default="checkpoints",
        choices=["auto", "snapshots", "checkpoints"],
        help="llama.cpp's recurrent rollback (the backend's recurrent_rollback); default: checkpoints",
    )
    parser.add_argument("--plot-only", action="store_true", help="redraw the figure from --out's JSON")
    args = parser.parse_args()
    if args.plot_only:
        plot(json.loads(args.out.read_text(encoding="utf-8")), args.out.with_suffix(".png"))
        return
    torch.set_num_threads(1)  # one core measures; the other is left to the machine
    zoo = args.zoo or build_zoo("hybrid-trained")
    tokenizer = load_tokenizer(zoo / "moe")
    prompts = [tokenizer.encode(p) for p in load_prompt_set("factual") + load_prompt_set("code")]
    target = _load(zoo, "moe", args)
    cells = []
    for draft_name in args.drafts:
        draft = None if draft_name == "mtp" else _load(zoo, draft_name, args)
        for gamma in args.gammas:
            for batch in args.batches:
                cells.append(measure(target, draft, draft_name, prompts, gamma, batch, args))
                print(row_text(cells[-1]), flush=True)
    record = {
        "environment": {k: v for k, v in environment().items() if k != "git_sha"},
        "engine": f"llama.cpp {args.gguf}" if args.gguf else f"transformers {args.dtype}",
        "rollback": args.rollback if args.gguf else None,
        "dtype": args.dtype,
        "tokens": args.tokens,
        "repeats": args.repeats,
        "cells": cells,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    plot(record, args.out.with_suffix(".png"))


def _load(zoo: Path, name: str, args):
    if args.gguf:
        from specmoe.zoo.gguf import zoo_gguf

        return load_model(zoo_gguf(zoo, name, args.gguf), n_threads=1, recurrent_rollback=args.rollback)
    return load_model(zoo / name, dtype=args.dtype)


def plot(record: dict, path: Path) -> None:
    """Each cell's SD decode time split into draft, verify, state rollback and bookkeeping."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = record["cells"]
    parts = {"draft": "#fdb863", "verify": "#5e3c99", "state": "#e66101", "overhead": "#b2abd2"}
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.32 * len(cells)))
    left = [0.0] * len(cells)
    for part, color in parts.items():
        widths = [100 * c["shares"][part] for c in cells]
        ax.barh(range(len(cells)), widths, left=left, color=color, label=part)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    labels = [
        f"{c['draft']} γ={c['gamma']} B={c['batch']} "
        f"({c['acceptance']:.0%} acc., {c['speedup']['value']:.2f}×)"
        for c in cells
    ]
    ax.set_yticks(range(len(cells)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of SD decode time (%)")
    ax.legend(ncols=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, fontsize=8)
    engine = record.get("engine", f"transformers {record['dtype']}")
    ax.set_title(
        f"hybrid-trained zoo, moe target, {engine}: where an SD round's time goes", fontsize=9, pad=22
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def measure(target, draft, draft_name: str, prompts, gamma: int, batch: int, args) -> dict:
    config = DecodeConfig(max_new_tokens=args.tokens, gamma=gamma, ignore_eos=True)
    if draft is None:  # the target's own MTP layer, through llama.cpp
        from specmoe.decoding.llamacpp_mtp import llamacpp_mtp_drafter

        drafter = llamacpp_mtp_drafter(target)
    else:
        drafter = ModelDrafter(draft)
    decode(target, prompts[:batch], config, drafter)  # warm-up, untimed
    served = _served(target, draft)
    plain_tps, sd_tps, parts, copies, readvances, counts = [], [], [], [], [], []
    for unit in range(args.repeats):
        chosen = [prompts[(unit * batch + i) % len(prompts)] for i in range(batch)]
        base = decode(target, chosen, config)
        plain_tps.append(decode_tokens_per_s(totals(base).emitted, base.decode_s))
        before = _rollback_split(target, draft)
        sd = decode(target, chosen, config, drafter)
        after = _rollback_split(target, draft)
        sd_tps.append(decode_tokens_per_s(totals(sd).emitted, sd.decode_s))
        parts.append(
            {
                "draft": sum(r.draft_s for r in sd.rounds),
                "verify": sum(r.verify_s for r in sd.rounds),
                "state": sum(r.state_s for r in sd.rounds),
                "overhead": sum(r.overhead_s for r in sd.rounds),
                "rounds": len(sd.rounds),
                "plain_step": base.decode_s / len(base.rounds),
            }
        )
        copies.append(after[0] - before[0])
        readvances.append(after[1] - before[1])
        counts.append(totals(sd))
    total = {key: sum(p[key] for p in parts) for key in ("draft", "verify", "state", "overhead")}
    decode_s = sum(total.values())
    speedup = ratio_of_means(sd_tps, plain_tps)
    rounds = sum(p["rounds"] for p in parts)
    plain_step = statistics.median(p["plain_step"] for p in parts)
    return {
        "draft": draft_name,
        "gamma": gamma,
        "batch": batch,
        "units": args.repeats,
        "acceptance": acceptance_rate(sum(c.accepted for c in counts), sum(c.drafted for c in counts)),
        "speedup": {"value": speedup.value, "low": speedup.low, "high": speedup.high, "level": speedup.level},
        "shares": {key: seconds / decode_s for key, seconds in total.items()},
        "state_ms_per_round": 1000 * total["state"] / rounds,
        "state_in_plain_steps": total["state"] / rounds / plain_step,
        "state_copy_share": sum(copies) / max(sum(copies) + sum(readvances), 1e-12),
        "rollback": {
            "target": getattr(target, "recurrent_rollback", None),
            "draft": getattr(draft, "recurrent_rollback", None),
            # row rollbacks since the warm-up: (by snapshot, by checkpoint), target then draft
            "served": [
                [b - a for a, b in zip(x, y, strict=True)]
                for x, y in zip(served, _served(target, draft), strict=True)
            ],
        },
    }


def _served(target, draft) -> list[list[int]]:
    """Row rollbacks so far [by snapshot, by checkpoint] of each llama.cpp hybrid (target, draft)."""
    states = [getattr(model, "_states", None) for model in (target, draft)]
    return [[0, 0] if s is None else [s.by_snapshot, s.by_checkpoint] for s in states]


def _rollback_split(target, draft) -> tuple[float, float]:
    """(copy seconds, recompute seconds) spent so far by both models' linear-attention states:
    transformers' re-advance of the linear layers, or llama.cpp's re-decode of the kept tokens."""
    copy = recompute = 0.0
    for model in (target, draft):
        if getattr(model, "_linear", None) is not None:
            copy += model._linear.seconds - model._linear.readvance_s
            recompute += model._linear.readvance_s
        elif getattr(model, "_states", None) is not None:
            copy += model._states.seconds - model._states.redecode_s
            recompute += model._states.redecode_s
    return copy, recompute


def row_text(cell: dict) -> str:
    s, shares = cell["speedup"], cell["shares"]
    level = f"{s['level']:.0%}" if s["level"] else "range"
    return (
        f"{cell['draft']:>8} γ={cell['gamma']:<2} B={cell['batch']:<2} acceptance {cell['acceptance']:.0%}  "
        f"speedup {s['value']:.2f}× [{s['low']:.2f}, {s['high']:.2f}] ({level}, n={cell['units']})  "
        f"draft {shares['draft']:.0%} verify {shares['verify']:.0%} state {shares['state']:.0%} "
        f"overhead {shares['overhead']:.0%}  state {cell['state_ms_per_round']:.2f} ms/round = "
        f"{cell['state_in_plain_steps']:.2f} plain steps, {cell['state_copy_share']:.0%} of it copying"
        + (f"  rollback {cell['rollback']}" if "rollback" in cell else "")
    )


if __name__ == "__main__":
    main()
