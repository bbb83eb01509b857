"""Which scored rows were strict predictions, and which were in the table when the model was built.

A row is a strict prediction when the model and its priors were frozen before its source was read
(docs/results/calibration/anchor-verdict-rules.md, "The split every table now carries"); every other
scored row is a design-time row. Held-out numbers on design-time rows are development numbers: the
model's form was chosen knowing them.
"""

from __future__ import annotations

from specmoe.calibration.rows import Measurement

_LAYER_COST = "layer-cost-rules.md, before any row was read"
# source -> where the freeze before it was read is recorded
STRICT_SOURCES = {
    "D-cut, arXiv 2607.14647": "model and priors frozen at commit 4b9096f before its rows were read",
    "SpecForge documentation, SpecBundle performance dashboard": "specbundle-rules.md, before any row priced",
    "Attention Drift EAGLE-3 model cards (arXiv 2605.09992)": _LAYER_COST,
    "GLM-4.7-Flash-Eagle3 model card (thoughtworks)": _LAYER_COST,
    "ROCm blog 2026-06-23, Kimi-K2.5-W4A8 with EAGLE3 on MI325X": _LAYER_COST,
    "ROCm blog 2026-07-03, Eagle3 and AMD Quark on MI350X/MI355X": _LAYER_COST,
}
SPLITS = ("strict predictions", "design-time rows")


def split_of(row: Measurement) -> str:
    return SPLITS[0] if row.source in STRICT_SOURCES else SPLITS[1]
