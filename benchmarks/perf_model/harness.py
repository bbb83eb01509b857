"""Harness figures on the bench zoo, on this machine. Not a test: prints figures and writes JSON.

    python -m benchmarks.perf_model.harness --zoo ~/.cache/specmoe/zoo/bench-seed0 \
        --out docs/results/cpu/harness.json

1. Oracle draft on the bench MoE, B = 1, gamma = 4, greedy: measured speedup at acceptance 1 and 0
   against the analytic speedup from the same run's measured costs,
   S = E[tokens per round] * T(1,1) / (gamma * T_draft + T(1, gamma + 1)).
2. Harness overhead per run: building the row (metrics, audit, traces) and the store's transaction,
   as a share of the run's decode time.
Medians over repeats; each ratio uses numbers from the same process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from specmoe.bench.runner import ModelPool, Runner, make_row
from specmoe.drafts import draft_spelling
from specmoe.results.store import Store
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite
from specmoe.theory import sd_speedup

SUITE = """
schema = 1
name = "oracle-bound"
[zoo]
preset = "bench"
seed = 0
[defaults]
repeats = {repeats}
warmup = 1
max_new_tokens = {tokens}
dtype = "{dtype}"
prompt_set = "reasoning"
[models.moe]
zoo = "moe"
[models.draft-xs]
zoo = "draft-xs"
[[groups]]
name = "oracle"
target = ["moe"]
draft = ["oracle:0.0", "oracle:1.0"]
oracle_cost = "draft-xs"
gamma = [4]
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--zoo", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--dtype", default="float32", help="float32: bf16 near-ties make the oracle's reference stale"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        suite_file = Path(tmp) / "suite.toml"
        suite_file.write_text(SUITE.format(repeats=args.repeats, tokens=args.tokens, dtype=args.dtype))
        suite = load_suite(suite_file)
        runner = Runner(ModelPool(suite, args.zoo))
        rows, overhead = {}, []
        with Store(Path(tmp) / "r.db") as store:
            baselines = {}
            for spec in expand(suite):
                result = runner.measure(spec)
                start = time.perf_counter()
                baseline = baselines.get((spec.baseline_key, spec.repeat))
                row = make_row(spec, result, baseline, datetime.now(UTC).isoformat())
                store.add(row)
                overhead.append((time.perf_counter() - start) / result.decode_s)
                if spec.arm == "baseline":
                    baselines[(spec.config_key, spec.repeat)] = row
                rows.setdefault(draft_spelling(spec.draft) or "baseline", []).append(row)
    report = {"harness_overhead_share_median": statistics.median(overhead), "oracle": {}}
    base = rows["baseline"]
    t1 = statistics.median(r.times.decode_s / r.counts.target_forwards for r in base)
    base_tps = statistics.median(r.tokens_per_s for r in base)
    for draft in ("oracle:0.0", "oracle:1.0"):
        sd = rows[draft]
        forwards = [r.counts.target_forwards for r in sd]
        t_verify = statistics.median(r.times.verify_s / f for r, f in zip(sd, forwards, strict=True))
        t_draft = statistics.median(r.times.draft_s / (4 * f) for r, f in zip(sd, forwards, strict=True))
        alpha = float(draft.split(":")[1])
        analytic = float(sd_speedup(alpha, 4, t1, t_verify, t_draft))
        measured = statistics.median(r.tokens_per_s for r in sd) / base_tps
        report["oracle"][draft] = {
            "measured_speedup": measured,
            "analytic_speedup": analytic,
            "measured_over_analytic": measured / analytic,
            "acceptance": statistics.median(r.acceptance_rate for r in sd),
            "T11_ms": t1 * 1e3,
            "T15_ms": t_verify * 1e3,
            "T_draft_ms": t_draft * 1e3,
        }
        print(f"{draft}: measured {measured:.3f}x, analytic {analytic:.3f}x ({measured / analytic:.1%})")
    print(f"harness overhead per run: {report['harness_overhead_share_median']:.3%} of decode time")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
