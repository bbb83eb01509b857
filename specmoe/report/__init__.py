"""`specmoe bench report`: a static HTML report of a results store (docs/report.md).

The modules, one concept each:

- `write`: a store in, a folder with report.html, figures and CSV tables out; `html`: the page.
- `results`: the store reduced to one record per measured configuration; `intervals`: intervals as
  shown, with level and n; `sizes`: a target's parameter counts.
- `slices`: which configurations a figure shows, how they are named and in which order.
- `tables`: baseline throughput, every SD result, drafts compared on one target.
- `figures`: what every figure shares; `study_figures`: the empirical study's views;
  `moesd_figures`: MoESD's views across batch sizes; `gamma_batch`: the γ × batch grid.
- `arm_times`, `timing_figures`, `timing_tables`: where each arm's time goes (draft, verify,
  overhead per output token; prefill and time to first token).
- `explain_figures`: where an SD run's time goes and where its drafts fail.
- `modelled`: the performance model beside measured runs.
- `served`, `serving_figures`: server runs: latencies per arm, throughput and speedup by load.
- `runinfo`: the prose sections: failed audits, where the runs were measured.

Beside the page, what a terminal shows: `summary_table`, `summary_rich` and `summary_json` (the
result table every harness command ends with, as text, rich and JSON), `story`, `story_seeds` and
`demo_story` (the demo's account of a run), `predicted` (the performance model's call on a suite's
configurations, before they run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmoe.report.write import write_report

__all__ = ["write_report"]


def __getattr__(name: str) -> Any:
    # Imported on first use: the terminal table and the demo's account need no matplotlib.
    if name == "write_report":
        from specmoe.report.write import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
