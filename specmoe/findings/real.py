"""Claims (c) and (d) on real weights: the `real-cpu` suite's export (docs/results/cpu/real/).

The bench zoo and the trained family are models the project made; SmolLM2-135M-Instruct is a
pretrained model anyone can fetch (`specmoe zoo fetch smollm2`), with a draft distilled from it. Its
suite gives what acceptance and speedup look like when the target writes real text: the values
here are set into the (c) and (d) sections of the findings template as `real.*`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from specmoe.findings.cells import Cell, cells, select
from specmoe.findings.claims import PROMPTS, gamma_series, pct
from specmoe.findings.results import read_export

REAL_EXPORT = "real-cpu.csv"
BACKENDS = {"smollm2": "transformers (float32)", "smollm2-gguf": "llama.cpp (Q4_1)"}
MODEL_DRAFTS = ("draft", "draft-gguf")


def _draft_name(draft: str) -> str:
    return "distilled draft" if draft in MODEL_DRAFTS else draft


def _row_key(cell: Cell) -> str:
    return f"{BACKENDS.get(cell.target, cell.target)}, {_draft_name(cell.draft)}"


def _acceptance_speedup_table(items: Sequence[Cell], gamma: int) -> str:
    """Rows: backend and draft; columns: prompt kinds; each cell: acceptance, then speedup [CI]."""
    lines = ["| backend, draft | " + " | ".join(PROMPTS) + " |", "|---" * (len(PROMPTS) + 1) + "|"]
    for target, draft in sorted({(c.target, c.draft) for c in items}):
        row = []
        for prompt in PROMPTS:
            found = select(items, target=target, draft=draft, gamma=gamma, prompt=prompt)
            row.append(f"{pct(found[0].acceptance)} · {found[0].interval()}" if found else "–")
        name = _row_key(select(items, target=target, draft=draft)[0])
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def _gamma_table(items: Sequence[Cell]) -> str:
    """Rows: backend, draft and prompt kind; columns: γ; each cell: speedup [CI]."""
    gammas = sorted({c.gamma for c in items})
    lines = ["| backend, draft, kind | " + " | ".join(f"γ={g}" for g in gammas) + " |"]
    lines.append("|---" * (len(gammas) + 1) + "|")
    for (_, _, prompt), series in sorted(gamma_series(items).items()):
        by_gamma = {c.gamma: c for c in series}
        shown = [by_gamma[g].interval() if g in by_gamma else "–" for g in gammas]
        lines.append(f"| {_row_key(series[0])}, {prompt} | " + " | ".join(shown) + " |")
    return "\n".join(lines)


def _steps(series: Sequence[Cell]) -> tuple[bool, bool]:
    """(some step up γ is faster beyond the intervals, some step is slower beyond them)."""
    pairs = list(itertools.pairwise(series))
    return any(b.beats(a) for a, b in pairs), any(a.beats(b) for a, b in pairs)


def real_values(real_dir: Path) -> dict[str, str]:
    """The `real.*` values of the findings template, from the exported `real-cpu` suite."""
    path = real_dir / REAL_EXPORT
    items = cells(read_export(path)) if path.is_file() else []
    drafted = select(items, draft=MODEL_DRAFTS, gamma=4)
    series = list(gamma_series(items).values())
    steps = [_steps(s) for s in series]
    return {
        "real.cells": str(len(items)),
        "real.draft_accept_min": pct(min(c.acceptance for c in drafted)) if drafted else "–",
        "real.draft_accept_max": pct(max(c.acceptance for c in drafted)) if drafted else "–",
        "real.c_table": _acceptance_speedup_table(items, gamma=4) if items else "(not measured)",
        "real.d_table": _gamma_table(items) if items else "(not measured)",
        "real.d_series": str(len(series)),
        "real.d_helps": str(sum(up for up, _ in steps)),
        "real.d_hurts": str(sum(down for _, down in steps)),
    }
