"""Where the benchmarks read the repository's shipped inputs and write their results by default."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PERF_EXAMPLES = ROOT / "docs" / "perf-examples"
OLMOE_CONFIG = PERF_EXAMPLES / "olmoe-1b-7b.json"
SMOLLM2_CONFIG = PERF_EXAMPLES / "smollm2-135m.json"
CPU_RESULTS = ROOT / "docs" / "results" / "cpu"
CPU_FINDINGS = CPU_RESULTS / "findings"
CPU_HARDWARE = CPU_FINDINGS / "hw.json"  # this CPU's `specmoe hw`, measured with the findings
