"""What `specmoe audit PATH [--baseline FILE]` reads: each input to the audit reader that fits it.

- a `.csv` file: a results CSV in the study's schema (`audit_foreign.audit_csv`);
- a `.json` file holding a vLLM serving result (`audit_serving`), a `.jsonl` file of SGLang
  `bench_speculative` records (`audit_serving`), any other file: one llama.cpp log;
- a folder: every file in it by what it holds: vLLM results and SGLang records to their readers, the
  rest as llama.cpp logs (`audit_foreign.audit_log_files`).

`--baseline FILE` names the run without speculative decoding when the files cannot say which one
it is (llama.cpp logs whose model name is not printed, one vLLM result on its own): a baseline of
the same tool, used for every SD run of that tool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from specmoe.bench.audit_foreign import AuditRow, audit_csv, audit_log_files
from specmoe.bench.audit_serving import (
    audit_sglang_points,
    audit_vllm_results,
    is_sglang_line,
    is_vllm_result,
    load_sglang_points,
    load_vllm_result,
)
from specmoe.errors import SpecmoeError

Kind = Literal["vllm", "sglang", "llamacpp"]


def file_kind(path: Path) -> Kind:
    """Which reader a file belongs to, from its content (llama.cpp when it is neither JSON kind)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise SpecmoeError(f"cannot read {path} ({err.strerror}); check the path") from None
    first = next((line for line in text.splitlines() if line.strip()), "")
    for candidate in (text, first):
        try:
            record = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if is_vllm_result(record):
            return "vllm"
        if is_sglang_line(record):
            return "sglang"
    return "llamacpp"


def audit_input(path: str | Path, baseline: str | Path | None = None) -> list[AuditRow]:
    """AuditRows for a file or folder (see the module docstring); a SpecmoeError in one line for a
    path that is none of them or a baseline of another tool."""
    path = Path(path)
    if not path.exists():
        raise SpecmoeError(
            f"{path} does not exist; pass a results .csv, a vLLM or SGLang result file, a llama.cpp log, "
            "or a folder of them"
        )
    if path.is_file() and path.suffix.lower() == ".csv":
        if baseline is not None:
            raise SpecmoeError("--baseline does not apply to a study CSV, whose baseline rows are in it")
        return audit_csv(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    else:
        files = [path]
    groups: dict[Kind, list[Path]] = {"llamacpp": [], "vllm": [], "sglang": []}
    for file in files:
        groups[file_kind(file)].append(file)
    baseline_kind = _baseline_kind(baseline, groups)
    rows: list[AuditRow] = []
    if groups["llamacpp"]:
        given = baseline if baseline_kind == "llamacpp" else None
        rows += audit_log_files(groups["llamacpp"], given)
    if groups["vllm"]:
        given_result = (
            load_vllm_result(baseline) if baseline is not None and baseline_kind == "vllm" else None
        )
        rows += audit_vllm_results([load_vllm_result(p) for p in groups["vllm"]], given_result)
    for file in groups["sglang"]:
        given_points = (
            load_sglang_points(baseline) if baseline is not None and baseline_kind == "sglang" else None
        )
        rows += audit_sglang_points(load_sglang_points(file), given_points)
    return rows


def _baseline_kind(baseline: str | Path | None, groups: dict[Kind, list[Path]]) -> Kind | None:
    if baseline is None:
        return None
    baseline = Path(baseline)
    if not baseline.is_file():
        raise SpecmoeError(f"--baseline {baseline}: no such file; pass the result of the run without a draft")
    kind = file_kind(baseline)
    if not groups[kind]:
        present = ", ".join(k for k, files in groups.items() if files) or "nothing"
        raise SpecmoeError(
            f"--baseline {baseline} is a {kind} result but the audited path holds {present}; "
            "pass a baseline from the same tool"
        )
    return kind
