"""The answer from configs alone, checked on this CPU: every measured SD cell of the findings (bench
zoo, trained family) and of the real-weights suite (SmolLM2-135M) predicted as `specmoe advise
--config` would, then set beside its measured speedup.

For each cell the prediction takes only what a user would bring:
    the models' configs (the zoo presets' config.json, SmolLM2's), their weight formats,
    the hardware file measured here (docs/results/cpu/findings/hw.json),
    the engine profile (llamacpp-cpu for llama.cpp runs, hf-eager-cpu for transformers ones),
    the acceptance: the cell's measured rate as a per-position α, or an oracle's dialed probability,
and composes the expected round (`specmoe.perf.compose.expected_speedup`) with the profile's host
costs. Nothing from the cell's own timings, schedule or fits enters. The CPU profiles' constants were
read off this machine's fits of these same models, so this checks the path from configs, not an
out-of-sample forecast.

    python -m benchmarks.perf_model.cpu_from_configs --out docs/results/cpu/configs
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from benchmarks.paths import CPU_FINDINGS, CPU_HARDWARE, CPU_RESULTS, SMOLLM2_CONFIG
from specmoe.drafts import NgramDraft, OracleDraft, draft_of
from specmoe.findings.model_check import read_rows
from specmoe.perf.compose import expected_speedup
from specmoe.perf.engines import engine_profile
from specmoe.perf.firstprinciples import first_principles_constants
from specmoe.perf.hardware import load_hardware
from specmoe.perf.model import MoEShape
from specmoe.perf.predict import ModelTimes
from specmoe.perf.structure import parse_architecture
from specmoe.results.compare import compare
from specmoe.theory import per_token_alpha

RUNS = [
    CPU_FINDINGS / name
    for name in (
        "study.csv",
        "moesd.csv",
        "family.csv",
        "study-llamacpp-q8_0.csv",
        "study-llamacpp-q4_k_m.csv",
        "moesd-llamacpp-q8_0.csv",
    )
] + [CPU_RESULTS / "real" / "real-cpu.csv"]
HARDWARE = CPU_HARDWARE
SMOLLM2 = SMOLLM2_CONFIG
SMOLLM2_DRAFT_LAYERS = 5
SMOLLM2_GGUF = {"smollm2-gguf": "q4_1", "draft-gguf": "q8_0"}


def zoo_config(preset: str, name: str, top_k: int | None = None) -> dict:
    from specmoe.zoo.hf_config import hf_config
    from specmoe.zoo.presets import get_preset

    zoo = get_preset(preset)
    config = hf_config(zoo.model(name), zoo).to_dict()
    if top_k:
        config["num_experts_per_tok"] = int(top_k)
    return config


def model_config(model: dict, name: str, top_k: int | None = None) -> dict:
    if name.startswith("smollm2"):
        return json.loads(SMOLLM2.read_text())
    if name.startswith("draft") and not model.get("zoo_preset"):  # SmolLM2's distilled draft
        return {**json.loads(SMOLLM2.read_text()), "num_hidden_layers": SMOLLM2_DRAFT_LAYERS}
    return zoo_config(model["zoo_preset"], name, top_k)


def weight_format(model: dict, name: str, dtype: str) -> str:
    return model.get("gguf") or SMOLLM2_GGUF.get(name) or dtype


def times(config: dict, fmt: str, hardware, engine, context: float, label: str) -> ModelTimes:
    arch = parse_architecture(config, label, fmt)
    constants = first_principles_constants(arch, hardware, label, engine)
    return ModelTimes(label, constants, MoEShape(arch.num_experts, arch.top_k), context, False)


def predict_cell(config: dict, acceptance: float, hardware) -> dict | None:
    target_model = config.get("target_model") or {}
    llamacpp = target_model.get("backend") == "llamacpp"
    engine = engine_profile("llamacpp-cpu" if llamacpp else "hf-eager-cpu", "cpu")
    context = float(config.get("prompt_length") or 64) + float(config.get("max_new_tokens") or 32) / 2
    target_name = str(config["target"])
    target = times(
        model_config(target_model, target_name, config.get("moe_top_k")),
        weight_format(target_model, target_name, config["dtype"]),
        hardware,
        engine,
        context,
        target_name,
    )
    spec = draft_of(str(config["draft"]))
    gamma, batch = int(config["gamma"]), int(config["batch_size"])
    draft = None
    if isinstance(spec, OracleDraft):
        alpha = spec.acceptance
        cost = config.get("oracle_cost")
    else:
        if isinstance(acceptance, float) and math.isnan(acceptance):
            return None
        alpha = per_token_alpha(acceptance, gamma)
        cost = None if isinstance(spec, NgramDraft) else str(config["draft"])
    if cost:
        model = config.get("draft_model") or {}
        draft = times(
            model_config(
                {**model, "zoo_preset": model.get("zoo_preset") or target_model.get("zoo_preset")}, cost
            ),
            weight_format(model, cost, config["dtype"]),
            hardware,
            engine,
            context,
            cost,
        )
    host = engine.round_s + engine.round_seq_s * batch
    draft_host = engine.ngram_s if isinstance(spec, NgramDraft) else 0.0
    predicted = expected_speedup(target, draft, alpha, gamma, batch, host, engine.step_s, draft_host)
    return {"engine": engine.name, "alpha": alpha, "predicted": predicted}


def cells(paths: list[Path]) -> list[dict]:
    hardware = load_hardware(HARDWARE)
    out = []
    for path in paths:
        for comparison in compare(read_rows(path)):
            config = comparison.config
            found = predict_cell(config, comparison.acceptance_rate, hardware)
            if found is None:
                continue
            measured = comparison.speedup.value
            out.append(
                {
                    "runs": path.name,
                    "target": config["target"],
                    "format": weight_format(
                        config.get("target_model") or {}, str(config["target"]), config["dtype"]
                    ),
                    "draft": str(config["draft"]),
                    "batch": int(config["batch_size"]),
                    "gamma": int(config["gamma"]),
                    "top_k": config.get("moe_top_k"),
                    "measured": measured,
                    "error": found["predicted"] / measured - 1,
                    **found,
                }
            )
    return out


def summary(rows: list[dict]) -> dict:
    errors = [abs(r["error"]) for r in rows]
    return {
        "cells": len(rows),
        "median_abs_error": statistics.median(errors),
        "worst_abs_error": max(errors),
        "within_20pct": sum(e <= 0.20 for e in errors),
        "go_no_go_agree": sum((r["predicted"] >= 1) == (r["measured"] >= 1) for r in rows),
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "# SD speedups on this CPU predicted from configs alone",
        "",
        "`python -m benchmarks.perf_model.cpu_from_configs --out docs/results/cpu/configs`: configs, "
        "the hardware file",
        "measured here and the engine profiles `llamacpp-cpu` / `hf-eager-cpu`, with each cell's acceptance.",
        "",
        "| engine | cells | median abs. error | worst | within 20% | go/no-go agree |",
        "|---|---|---|---|---|---|",
    ]
    for engine in [*sorted({r["engine"] for r in rows}), "all"]:
        mine = [r for r in rows if engine in ("all", r["engine"])]
        s = summary(mine)
        lines.append(
            f"| {engine} | {s['cells']} | {s['median_abs_error']:.1%} | {s['worst_abs_error']:.1%} | "
            f"{s['within_20pct']} | {s['go_no_go_agree']} of {s['cells']} |"
        )
    lines += ["", "| runs | target | format | draft | B | γ | top-k | measured | predicted | error |"]
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["runs"], r["target"], r["draft"], r["batch"], r["gamma"])):
        lines.append(
            f"| {r['runs']} | {r['target']} | {r['format']} | {r['draft']} | {r['batch']} | {r['gamma']} | "
            f"{r['top_k'] or ''} | {r['measured']:.2f} | {r['predicted']:.2f} | {r['error']:+.0%} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, action="append", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = cells(args.runs or RUNS)
    text = markdown(rows)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "configs.md").write_text(text, encoding="utf-8")
        payload = {"summary": summary(rows), "cells": rows}
        (args.out / "configs.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
