"""Calibration rows from SpecForge's SpecBundle dashboard data, by the rules fixed beforehand.

The rules are docs/results/calibration/specbundle-rules.md: MoE targets only, batch 8 with 3 steps,
top-k 1 and 4 draft tokens, the SpecBundle head, every dataset; speedup = throughput with EAGLE-3
over throughput without it; SGLang's accept length as τ at γ = 3. The GPU count is not stated, so
it comes from the target's weights: `primary` puts a target on one H200 when its weights take at
most 80% of the 141 GB, else on a node of eight; `sensitivity` takes the smallest of 1, 2, 4, 8
H200 that holds them in 90%.

    python benchmarks/specbundle_rows.py DATA_JSON                  # rows under the primary rule
    python benchmarks/specbundle_rows.py DATA_JSON --rule sensitivity
    python benchmarks/specbundle_rows.py DATA_JSON --merge docs/results/calibration/published.csv

DATA_JSON is `docs/spec_bundle/public/raw_data/data.json` of github.com/sgl-project/SpecForge
(added in commit d9952d16). `--merge` rewrites the CSV with every `specbundle-` row replaced.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.perf.firstprinciples import load_config  # noqa: E402

EXAMPLES = ROOT / "docs" / "perf-examples"
H200_BYTES = 141e9  # HBM3e per H200 (datasheet)
CONFIG = (8, 3, 1, 4)  # batch, steps, top-k, draft tokens
CONTEXT = 1024
PREFIX = "specbundle-"
SOURCE = "SpecForge documentation, SpecBundle performance dashboard"
DATA_AT = "github.com/sgl-project/SpecForge docs/spec_bundle/public/raw_data/data.json (added d9952d16)"
HARDWARE = {1: "h200-sxm", 2: "2x-h200", 4: "4x-h200", 8: "8x-h200"}


@dataclass(frozen=True)
class Target:
    config: str  # stem in docs/perf-examples
    draft: str  # the SpecBundle head's name in the data
    dtype: str = ""  # a format the checkpoint's name states over its config's ("" = the config's)


TARGETS = {
    "Qwen3-30B-A3B-Instruct-2507": Target("qwen3-30b-a3b", "lmsys/SGLang-EAGLE3-Qwen3-30B-A3B-Instruct-2507-SpecForge"),
    "Qwen3-235B-A22B-Instruct-2507": Target(
        "qwen3-235b-a22b", "lmsys/SGLang-EAGLE3-Qwen3-235B-A22B-Instruct-2507-SpecForge"
    ),
    "Qwen3-Next-80B-A3B-Instruct-FP8": Target(
        "qwen3-next-80b-a3b", "lmsys/SGLang-EAGLE3-Qwen3-Next-80B-A3B-Instruct-FP8-SpecForge", "fp8"
    ),
    "Qwen3-Coder-30B-A3B-Instruct": Target(
        "qwen3-coder-30b-a3b", "lmsys/SGLang-EAGLE3-Qwen3-Coder-30B-A3B-Instruct-SpecForge"
    ),
    "Qwen3-Coder-480B-A35B-Instruct": Target(
        "qwen3-coder-480b-a35b", "lmsys/SGLang-EAGLE3-Qwen3-Coder-480B-A35B-Instruct-SpecForge-EigenAI"
    ),
    "Kimi-K2-Instruct": Target("kimi-k2", "AQ-MedAI/Kimi-K2-Instruct-eagle3"),
    "Ling-flash-2.0": Target("ling-flash-2.0", "AQ-MedAI/Ling-Flash-2.0-eagle3"),
    "Llama-4-Scout-17B-16E-Instruct": Target(
        "llama-4-scout-17b-16e", "lmsys/SGLang-EAGLE3-Llama-4-Scout-17B-16E-Instruct-SpecForge"
    ),
}
COLUMNS = (
    "id,source,where,hardware,devices,engine,target,target_dtype,method,draft,draft_dtype,batch,gamma,"
    "verify_tokens,tree_width,acceptance_kind,acceptance,anchor,context,speedup,role,note"
).split(",")


def weight_bytes(target: Target) -> float:
    arch = load_config(EXAMPLES / f"{target.config}.json", target.dtype or None)
    return (arch.params_dense + arch.num_experts * arch.params_per_expert) * arch.bytes_per_param


def devices(weights: float, rule: str) -> int:
    if rule == "primary":
        return 1 if weights <= 0.8 * H200_BYTES else 8
    return next((n for n in (1, 2, 4, 8) if weights <= 0.9 * n * H200_BYTES), 8)


def _slug(name: str) -> str:
    return name.lower().replace("-instruct", "").replace("-2507", "")


def rows(data: dict, rule: str) -> list[dict]:
    out = []
    for name, target in TARGETS.items():
        stem = target.config
        weights = weight_bytes(target)
        count = devices(weights, rule)
        for dataset, block in data[name].items():
            (result,) = [
                r
                for r in block["results"]
                if (r["batch_size"], r["steps"], r["topk"], r["num_draft_tokens"]) == CONFIG
            ]
            metrics = {m["Name"]: m for m in result["metrics"]}
            base = metrics["Wihtout EAGLE3"]["output_throughput"]  # the file's spelling
            sd = metrics[target.draft]
            out.append(
                {
                    "id": f"{PREFIX}{_slug(name)}-{dataset}-b8",
                    "source": SOURCE,
                    "where": f"dashboard data, {name} / {dataset}, batch 8, steps 3, top-k 1, 4 draft tokens",
                    "hardware": HARDWARE[count],
                    "devices": count,
                    "engine": "sglang",
                    "target": stem,
                    "target_dtype": target.dtype,
                    "method": "eagle3",
                    "draft": "",
                    "draft_dtype": "",
                    "batch": 8,
                    "gamma": 3,
                    "verify_tokens": "",
                    "tree_width": 1,
                    "acceptance_kind": "tau",
                    "acceptance": f"{sd['accept_length']:.3f}",
                    "anchor": "",
                    "context": CONTEXT,
                    "speedup": f"{sd['output_throughput'] / base:.3f}",
                    "role": "reported",
                    "note": (
                        f"confidence medium; H200 per the dashboard, count not stated: {count} by the "
                        f"{rule} rule of specbundle-rules.md ({weights / 1e9:.0f} GB of weights); "
                        f"{target.draft}; output throughput {sd['output_throughput']:.1f} vs "
                        f"{base:.1f} tok/s; {DATA_AT}"
                    ),
                }
            )
    return out


def merge(path: Path, new: list[dict]) -> None:
    with open(path, newline="", encoding="utf-8") as f:
        old = [r for r in csv.DictReader(f) if not r["id"].startswith(PREFIX)]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(old + new)
    path.write_text(buf.getvalue(), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--rule", choices=("primary", "sensitivity"), default="primary")
    parser.add_argument("--merge", type=Path, default=None, help="replace the specbundle rows of this CSV")
    args = parser.parse_args(argv)
    new = rows(json.loads(args.data.read_text(encoding="utf-8")), args.rule)
    if args.merge:
        merge(args.merge, new)
    else:
        writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
        writer.writerows(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
