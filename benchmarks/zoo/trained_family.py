"""The trained zoo family on this machine: training time and held-out loss per model, greedy
acceptance per prompt kind, and a determinism check. Not a test: prints tables and writes JSON.

    python -m benchmarks.zoo.trained_family --out docs/results/cpu/trained_family.json

Builds the `trained` preset (seed 0) twice into fresh directories and compares every model's
model.safetensors sha256 between the two builds. Training runs on one thread whatever the machine
has, so its times are one core's; each model's wall and CPU seconds come from the manifest (CPU
seconds are what an idle core would take when the machine is shared). Held-out loss is per model,
over all held-out windows and per source group (package corpus, generated text, standard library).

Acceptance: each draft against `moe`, greedy, gamma 4, 64 new tokens per prompt, float32, each
built-in prompt kind's prompts as one batch through `specmoe.decoding.decode`, rates as defined in
`specmoe.metrics` (accepted / drafted proposals; `specmoe.zoo.agreement`). The prompts are held out
from training. Checks: draft-xs's rate over all prompts within [0.3, 0.8], draft-s's above it, and
identical hashes; the exit status is 1 if one fails. About 9 minutes on one idle core.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
import transformers

from specmoe.zoo import build_zoo, load_manifest
from specmoe.zoo.agreement import greedy_acceptance, overall_rate
from specmoe.zoo.presets import get_preset
from specmoe.zoo.tokenizer import corpus_files, train_tokenizer
from specmoe.zoo.train import reproducible
from specmoe.zoo.train_data import training_data
from specmoe.zoo.train_loop import held_out_loss

PRESET = "trained"
TARGET = "moe"
DRAFTS = ("draft-xs", "draft-s", "draft-moe")
ACCEPTANCE_RANGE = (0.3, 0.8)  # draft-xs over all prompts


def timed_build(out: Path, seed: int) -> tuple[dict, float]:
    started = time.perf_counter()
    build_zoo(PRESET, out, seed=seed, progress=lambda line: print(f"  {line}", flush=True))
    return load_manifest(out), time.perf_counter() - started


def held_out_by_group(zoo: Path) -> dict[str, dict[str, float]]:
    """Held-out loss (nats per token) per model and source group, from the built checkpoints."""
    plan = get_preset(PRESET).training
    data = training_data(plan, train_tokenizer(corpus_files()))
    groups: dict[str, list[torch.Tensor]] = {}
    start = 0
    for source in data.sources:
        end = start + source.held_out_windows
        groups.setdefault(source.name.split(":")[0], []).append(data.held_out[start:end])
        start = end
    windows = {group: torch.cat(parts) for group, parts in groups.items()}
    losses = {}
    with reproducible():
        for name in get_preset(PRESET).model_names:
            model = transformers.AutoModelForCausalLM.from_pretrained(zoo / name, dtype=torch.float32).eval()
            losses[name] = {group: round(held_out_loss(model, w), 4) for group, w in windows.items()}
    return losses


def acceptance(zoo: Path, gamma: int, tokens: int) -> dict[str, dict]:
    report = {}
    for draft in DRAFTS:
        rows = greedy_acceptance(zoo / TARGET, zoo / draft, gamma=gamma, max_new_tokens=tokens)
        report[draft] = {"all": overall_rate(rows), "kinds": {row.kind: asdict(row) for row in rows}}
        kinds = "  ".join(f"{row.kind} {row.acceptance_rate:.3f}" for row in rows)
        print(f"  {draft} vs {TARGET}: all {report[draft]['all']:.3f}  {kinds}", flush=True)
    return report


def checks(report: dict) -> dict[str, bool]:
    xs, s = report["acceptance"]["draft-xs"]["all"], report["acceptance"]["draft-s"]["all"]
    low, high = ACCEPTANCE_RANGE
    result = {f"draft-xs acceptance in [{low}, {high}]": low <= xs <= high, "draft-s above draft-xs": s > xs}
    if "identical" in report["determinism"]:
        result["two builds give identical weights"] = report["determinism"]["identical"]
    return result


def format_tables(report: dict) -> str:
    lines = ["| model | train s (wall) | train s (CPU) | tokens | held-out loss |", "|---|---|---|---|---|"]
    for name, entry in report["models"].items():
        lines.append(
            f"| {name} | {entry['train_s']:.1f} | {entry['train_cpu_s']:.1f} | {entry['train_tokens']:,} "
            f"| {entry['held_out_loss']:.3f} |"
        )
    training = report["training"]
    lines.append(
        f"\nwhole build {report['build_s']:.0f} s wall; training {training['total_s']:.0f} s wall, "
        f"{training['total_cpu_s']:.0f} s CPU (teacher forwards {training['teacher_forward_s']:.0f} s)\n"
    )
    kinds = list(next(iter(report["acceptance"].values()))["kinds"])
    lines.append("| draft | all | " + " | ".join(kinds) + " |")
    lines.append("|---|---|" + "---|" * len(kinds))
    for draft, entry in report["acceptance"].items():
        rates = " | ".join(f"{entry['kinds'][k]['acceptance_rate']:.3f}" for k in kinds)
        lines.append(f"| {draft} | {entry['all']:.3f} | {rates} |")
    lines.append("")
    lines.extend(f"{'ok  ' if ok else 'FAIL'} {name}" for name, ok in report["checks"].items())
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--single-build", action="store_true", help="skip the second build (no hash check)")
    parser.add_argument("--work", type=Path, default=None, help="where the builds go (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    transformers.utils.logging.disable_progress_bar()
    work = args.work or Path(tempfile.mkdtemp(prefix="specmoe-trained-"))
    setup = vars(args) | {"work": str(work), "out": str(args.out)}
    report: dict = {
        "setup": setup | {"preset": PRESET, "target": TARGET, "dtype": "float32", "decoding": "greedy"},
        "environment": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "machine": platform.machine(),
            "load_average_at_start": Path("/proc/loadavg").read_text().split()[:3]
            if Path("/proc/loadavg").is_file()
            else None,
        },
    }
    print(f"building {PRESET} (seed {args.seed}) into {work / 'a'}", flush=True)
    manifest, report["build_s"] = timed_build(work / "a", args.seed)
    report["training"] = {k: v for k, v in manifest["training"].items() if k != "plan"}
    report["plan"] = manifest["training"]["plan"]
    report["models"] = {
        name: {k: entry[k] for k in ("train_s", "train_cpu_s", "train_tokens", "held_out_loss", "teacher")}
        | {"safetensors_sha256": entry["safetensors_sha256"]}
        for name, entry in manifest["models"].items()
    }
    report["held_out_loss_by_source"] = held_out_by_group(work / "a")
    hashes = {name: entry["safetensors_sha256"] for name, entry in manifest["models"].items()}
    report["determinism"] = {"first": hashes}
    if not args.single_build:
        print(f"building again into {work / 'b'}", flush=True)
        second, report["second_build_s"] = timed_build(work / "b", args.seed)
        again = {name: entry["safetensors_sha256"] for name, entry in second["models"].items()}
        report["determinism"] |= {"second": again, "identical": again == hashes}
    print("greedy acceptance", flush=True)
    report["acceptance"] = acceptance(work / "a", args.gamma, args.tokens)
    report["checks"] = checks(report)
    print(format_tables(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
