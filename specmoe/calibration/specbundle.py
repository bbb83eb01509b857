"""Calibration rows from SpecForge's SpecBundle dashboard data, by the rules fixed beforehand.

The rules are docs/results/calibration/specbundle-rules.md: MoE targets only, batch 8 with 3 steps,
top-k 1 and 4 draft tokens, the SpecBundle head, every dataset; speedup = throughput with EAGLE-3
over throughput without it; SGLang's accept length as τ at γ = 3. The GPU count is not stated, so
it comes from the target's weights: `primary` puts a target on one H200 when its weights take at
most 80% of the 141 GB, else on a node of eight; `sensitivity` takes the smallest of 1, 2, 4, 8
H200 that holds them in 90%.

The data is `docs/spec_bundle/public/raw_data/data.json` of github.com/sgl-project/SpecForge (added
in commit d9952d16); `specmoe calibrate specbundle DATA` reads it. A row whose speedup exceeds its
τ is `excluded` by the table's standing rule (a lossless round costs at least one step, so the two
runs cannot be comparable); `--score-above-tau` scores it, as the page's rules first said.
`gamma_check` and `tree_check` are the page's second and third checks.
"""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from specmoe.calibration.catalog import Catalog
from specmoe.calibration.fit import fit_engine
from specmoe.calibration.pricing import price
from specmoe.calibration.rows import Role
from specmoe.perf.breakeven import AcceptanceKind, acceptance
from specmoe.perf.constants import load_constants
from specmoe.perf.engines import EngineProfile, load_engines

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
    "Qwen3-30B-A3B-Instruct-2507": Target(
        "qwen3-30b-a3b", "lmsys/SGLang-EAGLE3-Qwen3-30B-A3B-Instruct-2507-SpecForge"
    ),
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
COLUMNS = [
    *("id", "source", "where", "hardware", "devices", "engine", "target", "target_dtype", "method"),
    *("draft", "draft_dtype", "batch", "gamma", "verify_tokens", "tree_width", "acceptance_kind"),
    *("acceptance", "anchor", "context", "speedup", "role", "note"),
]


def weight_bytes(target: Target, catalog: Catalog) -> float:
    arch = catalog.config(target.config, target.dtype or None)
    return (arch.params_dense + arch.num_experts * arch.params_per_expert) * arch.bytes_per_param


def devices(weights: float, rule: str) -> int:
    if rule == "primary":
        return 1 if weights <= 0.8 * H200_BYTES else 8
    return next((n for n in (1, 2, 4, 8) if weights <= 0.9 * n * H200_BYTES), 8)


def _slug(name: str) -> str:
    return name.lower().replace("-instruct", "").replace("-2507", "")


def _metrics(block: dict, config: tuple) -> dict[str, dict]:
    """{draft name: its metrics} of one dataset's run at `config` (batch, steps, top-k, draft tokens)."""
    (result,) = [
        r
        for r in block["results"]
        if (r["batch_size"], r["steps"], r["topk"], r["num_draft_tokens"]) == config
    ]
    return {m["Name"]: m for m in result["metrics"]}


BASELINE = "Wihtout EAGLE3"  # the file's spelling


def _measured(block: dict, draft: str, config: tuple) -> tuple[float, float]:
    """(speedup, τ) of `draft` at `config`."""
    metrics = _metrics(block, config)
    sd = metrics[draft]
    return sd["output_throughput"] / metrics[BASELINE]["output_throughput"], sd["accept_length"]


def rows(data: dict, rule: str, catalog: Catalog, standing: bool = True) -> list[dict]:
    """The dashboard's rows under `rule` ("primary" or "sensitivity"), as CSV dicts; `standing`
    excludes a row that claims more than its τ allows."""
    out = []
    for name, target in TARGETS.items():
        weights = weight_bytes(target, catalog)
        count = devices(weights, rule)
        for dataset, block in data[name].items():
            metrics = _metrics(block, CONFIG)
            base = metrics[BASELINE]["output_throughput"]
            sd = metrics[target.draft]
            speedup = sd["output_throughput"] / base
            # the table's standing rule: a lossless SD round costs at least one step, so a speedup
            # above τ means the two runs are not comparable
            above = speedup > sd["accept_length"]
            out.append(
                {
                    "id": f"{PREFIX}{_slug(name)}-{dataset}-b8",
                    "source": SOURCE,
                    "where": f"dashboard data, {name} / {dataset}, batch 8, steps 3, top-k 1, 4 draft tokens",
                    "hardware": HARDWARE[count],
                    "devices": count,
                    "engine": "sglang",
                    "target": target.config,
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
                    "speedup": f"{speedup:.3f}",
                    "role": "excluded" if above and standing else "reported",
                    "note": (
                        "confidence medium; "
                        + ("claims more than its own τ allows; " if above else "")
                        + f"H200 per the dashboard, count not stated: {count} by the "
                        f"{rule} rule of specbundle-rules.md ({weights / 1e9:.0f} GB of weights); "
                        f"{target.draft}; output throughput {sd['output_throughput']:.1f} vs "
                        f"{base:.1f} tok/s; {DATA_AT}"
                    ),
                }
            )
    return out


CHAINS = {3: (8, 3, 1, 4), 5: (8, 5, 1, 6), 7: (8, 7, 1, 8)}  # γ -> the chain configuration


def _held_out(catalog: Catalog) -> EngineProfile:
    """SGLang's constants fitted from the priors without this source."""
    train = [r for r in catalog.scored if r.engine == "sglang" and r.source != SOURCE]
    return fit_engine(load_engines()["sglang"], load_constants()["sglang"], train, catalog)


def gamma_check(data: dict, catalog: Catalog) -> list[str]:
    """The γ among 3, 5, 7 the held-out model picks at the 3-step row's α, beside the measured best
    (specbundle-rules.md, "A second check"); cells where any chain claims more than its τ are skipped."""
    by_id, profile = catalog.by_id, _held_out(catalog)
    lines = [
        "| target / dataset | α (τ at γ = 3) | measured 3 / 5 / 7 | predicted 3 / 5 / 7 | picks | best |",
        "|---|---|---|---|---|---|",
    ]
    regrets: dict[str, list[float]] = {"model": [], "always 3": [], "always 7": []}
    skipped = 0
    for name, target in TARGETS.items():
        for dataset, block in data[name].items():
            measured = {g: _measured(block, target.draft, c) for g, c in CHAINS.items()}
            if any(speedup > tau for speedup, tau in measured.values()):
                skipped += 1
                continue
            row = by_id.get(f"{PREFIX}{_slug(name)}-{dataset}-b8")
            if row is None or row.role is not Role.REPORTED:
                skipped += 1
                continue
            alpha = acceptance(measured[3][1], AcceptanceKind.TAU, 3, row.id).alpha
            at_alpha = replace(row, acceptance_kind=AcceptanceKind.ALPHA, acceptance=alpha)
            predicted = {g: price(replace(at_alpha, gamma=g), profile, catalog).predicted for g in CHAINS}
            best = max(CHAINS, key=lambda g: measured[g][0])
            pick = max(CHAINS, key=lambda g: predicted[g])
            for rule, g in (("model", pick), ("always 3", 3), ("always 7", 7)):
                regrets[rule].append(measured[g][0] / measured[best][0])
            lines.append(
                f"| {name} / {dataset} | {alpha:.2f} | "
                + " / ".join(f"{measured[g][0]:.2f}" for g in CHAINS)
                + " | "
                + " / ".join(f"{predicted[g]:.2f}" for g in CHAINS)
                + f" | {pick} | {best} |"
            )
    lines += [
        "",
        f"{len(regrets['model'])} cells ({skipped} skipped: a chain above its τ, or no scored row).",
        "",
    ]
    lines += ["| rule | picks the measured best | median regret | worst regret |", "|---|---|---|---|"]
    for rule, values in regrets.items():
        right = sum(v == 1.0 for v in values)
        lines.append(
            f"| {rule} | {right} of {len(values)} | {statistics.median(values):.3f} | {min(values):.3f} |"
        )
    return lines


TREES = ((8, 5, 3, 6), (8, 7, 4, 8))  # batch, steps, top-k, draft tokens


def tree_check(data: dict, catalog: Catalog) -> list[str]:
    """The tree configurations priced at their own τ (specbundle-rules.md, "A third check")."""
    by_id, held_out = catalog.by_id, _held_out(catalog)
    shipped = load_engines()["sglang"]
    profiles = {
        "model, held out": held_out,
        "model, shipped": shipped,
        "roofline": EngineProfile(name="sglang", description="roofline", device=shipped.device),
    }
    errors: dict[tuple[str, str], list[float]] = {}
    for name, target in TARGETS.items():
        for dataset, block in data[name].items():
            chain = by_id.get(f"{PREFIX}{_slug(name)}-{dataset}-b8")
            if chain is None or chain.role is not Role.REPORTED:
                continue
            cases = [("3/1/4 chain (scored rows)", chain)]
            for config in TREES:
                speedup, tau = _measured(block, target.draft, config)
                _, steps, topk, tokens = config
                tree = replace(
                    chain,
                    id=f"{chain.id}-tree{steps}{topk}{tokens}",
                    gamma=steps,
                    verify_tokens=tokens,
                    tree_width=topk,
                    acceptance=tau,
                    speedup=speedup,
                )
                cases.append((f"{steps}/{topk}/{tokens} tree", tree))
            for label, row in cases:
                for rule, profile in profiles.items():
                    priced = price(row, profile, catalog)
                    errors.setdefault((label, rule), []).append(priced.error_factor(row.speedup))
    lines = ["| configuration | rule | rows | median error | worst error |", "|---|---|---|---|---|"]
    for (label, rule), values in errors.items():
        lines.append(
            f"| {label} | {rule} | {len(values)} | {statistics.median(values):.2f} | {max(values):.2f} |"
        )
    return lines


def merge(path: Path, new: list[dict]) -> None:
    """Rewrite the CSV at `path` with every dashboard row replaced by `new`."""
    with open(path, newline="", encoding="utf-8") as f:
        old = [r for r in csv.DictReader(f) if not r["id"].startswith(PREFIX)]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(old + new)
    path.write_text(buf.getvalue(), encoding="utf-8")


def as_csv(new: list[dict]) -> str:
    """The rows as CSV lines without a header (to append to a table by hand)."""
    buf = io.StringIO()
    csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n").writerows(new)
    return buf.getvalue()
