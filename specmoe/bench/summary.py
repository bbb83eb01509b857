"""The table printed after a suite run: one line per SD configuration, beside its baseline."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from specmoe.bench.store import RunRow
from specmoe.metrics import speedup_interval, target_efficiency_measured


@dataclass(frozen=True)
class Comparison:
    """One SD configuration against its baseline, over paired repeats."""

    config: dict
    repeats: int
    baseline_tokens_per_s: float
    sd_tokens_per_s: float
    speedup: float
    speedup_low: float
    speedup_high: float
    acceptance_rate: float  # nan when a server reports no draft counts
    target_efficiency: float  # nan for server runs, which report no verify times
    audit_failures: int


def compare(rows: list[RunRow]) -> list[Comparison]:
    baselines = {(r.config_key, r.repeat): r for r in rows if r.arm == "baseline"}
    by_config: dict[str, list[RunRow]] = defaultdict(list)
    for row in rows:
        if row.arm == "sd":
            by_config[row.config_key].append(row)
    comparisons = []
    for sd_rows in by_config.values():
        pairs = [
            (r, baselines[(r.baseline_key, r.repeat)])
            for r in sd_rows
            if (r.baseline_key, r.repeat) in baselines
        ]
        if not pairs:
            continue
        sd_tps = [s.tokens_per_s for s, _ in pairs]
        base_tps = [b.tokens_per_s for _, b in pairs]
        speedup, low, high = speedup_interval(sd_tps, base_tps)
        drafted = known_sum(s.counts["drafted"] for s, _ in pairs)
        accepted = known_sum(s.counts["accepted"] for s, _ in pairs)
        timings = (
            known_sum(b.times["verify_s"] for _, b in pairs),
            known_sum(b.counts["target_forwards"] for _, b in pairs),
            known_sum(s.times["verify_s"] for s, _ in pairs),
            known_sum(s.counts["target_forwards"] for s, _ in pairs),
        )
        # Server runs report neither verify times nor forwards: their efficiency is unknown (nan).
        efficiency = target_efficiency_measured(*timings) if all(timings) else math.nan
        if drafted is None or accepted is None:
            acceptance = math.nan
        else:
            acceptance = accepted / drafted if drafted else 0.0
        comparisons.append(
            Comparison(
                config=pairs[0][0].config,
                repeats=len(pairs),
                baseline_tokens_per_s=sum(base_tps) / len(base_tps),
                sd_tokens_per_s=sum(sd_tps) / len(sd_tps),
                speedup=speedup,
                speedup_low=low,
                speedup_high=high,
                acceptance_rate=acceptance,
                target_efficiency=efficiency,
                audit_failures=sum(1 for s, b in pairs for r in (s, b) if r.audit_verdict != "pass"),
            )
        )
    return comparisons


def known_sum(values: Iterable[float | int | None]) -> float | int | None:
    """The sum, or None when any value is unknown (a count or time a server does not report)."""
    items = list(values)
    return None if any(v is None for v in items) else sum(items)  # type: ignore[arg-type]


def _prompt(config: dict) -> str:
    return f"len{config['prompt_length']}" if config.get("prompt_length") else str(config.get("prompt_set"))


def _size(config: dict) -> str:
    """Batch size, or "c<N>" for the concurrency of a server run."""
    concurrency = config.get("concurrency")
    return f"c{concurrency}" if concurrency is not None else str(config["batch_size"])


def _unknown(value: float, spec: str) -> str:
    return "–" if math.isnan(value) else format(value, spec)


def format_summary(rows: list[RunRow]) -> str:
    header = (
        f"{'target':<10} {'draft':<12} {'g':>2} {'prompt':<10} {'B':>3} "
        f"{'base tok/s':>10} {'SD tok/s':>9} "
        f"{'speedup [95% CI]':>22} {'accept':>7} {'T(1)/T(g+1)':>11} audit"
    )
    lines = [header, "-" * len(header)]
    for c in compare(rows):
        cfg = c.config
        lines.append(
            f"{cfg['target']:<10} {cfg['draft']:<12} {cfg['gamma']:>2} "
            f"{_prompt(cfg):<10} {_size(cfg):>3} "
            f"{c.baseline_tokens_per_s:>10.1f} {c.sd_tokens_per_s:>9.1f} "
            f"{c.speedup:>7.2f}x [{c.speedup_low:.2f}, {c.speedup_high:.2f}]   "
            f"{_unknown(c.acceptance_rate, '.1%'):>6} {_unknown(c.target_efficiency, '.2f'):>11} "
            f"{'ok' if not c.audit_failures else f'{c.audit_failures} FAIL'}"
        )
    failed = [r for r in rows if r.audit_verdict != "pass"]
    lines.append("")
    lines.append(f"audit: {len(rows) - len(failed)} of {len(rows)} runs pass every invariant")
    lines.extend(f"  FAIL {r.run_id[:12]} {r.group} {r.arm}: {r.audit_reason}" for r in failed[:20])
    return "\n".join(lines)
