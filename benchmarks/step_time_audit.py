"""The plain decode step the shipped profiles imply, against the one a published row measured.

Rows of docs/results/calibration/published.csv whose note gives both output throughputs ("X vs Y
tok/s" or "X against Y tok/s", totals over the batch) measured a plain step of batch ÷ Y seconds.
That time includes prefill, scheduling and idle time, so it bounds the decode step from above: a
profile whose plain step exceeds it contradicts the measurement. The calibration fits speedups only;
this audit checks the absolute time the same constants imply.

    python benchmarks/step_time_audit.py            # a markdown table to stdout
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specmoe.perf.calibrate import load_measurements, setup_for  # noqa: E402
from specmoe.perf.runtimes import load_engines  # noqa: E402

DATA = ROOT / "docs" / "results" / "calibration" / "published.csv"
EXAMPLES = ROOT / "docs" / "perf-examples"


def main() -> None:
    engines = load_engines()
    lines = [
        "| row | engine | B | measured plain step [ms] (upper bound) | profile's plain step [ms] | ratio |",
        "|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {}
    for row in load_measurements(DATA):
        measured = row.plain_step_s
        if not row.scored or measured is None:
            continue
        setup = setup_for(row, engines[row.engine], EXAMPLES)
        modelled = float(setup.plain_step_s(row.batch))
        ratio = modelled / measured
        ratios.setdefault(row.engine, []).append(ratio)
        times = f"{measured * 1e3:.2f} | {modelled * 1e3:.2f}"
        lines.append(f"| {row.id} | {row.engine} | {row.batch} | {times} | {ratio:.2f} |")
    print("\n".join(lines))
    print()
    for name, values in sorted(ratios.items()):
        above = sum(v > 1 for v in values)
        print(
            f"- {name}: {len(values)} rows, median ratio {statistics.median(values):.2f} "
            f"(range {min(values):.2f}–{max(values):.2f}), {above} above the measured bound"
        )


if __name__ == "__main__":
    main()
