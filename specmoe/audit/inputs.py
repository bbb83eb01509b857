"""What `specmoe audit PATH [--baseline FILE]` reads: each input to the audit reader that fits it.

- a `.csv` file: a results CSV in the study's schema (`foreign.audit_csv`);
- a file holding vLLM serving results (`vllm`; one, or several appended), a file of SGLang
  `bench_speculative` records (`sglang`), any other file: one llama.cpp log;
- a folder: every file in it by what it holds: vLLM results and SGLang records to their readers, the
  rest as llama.cpp logs (`foreign.audit_log_files`).

`--baseline FILE` names the run without speculative decoding when the files cannot say which one
it is (llama.cpp logs whose model name is not printed, vLLM results without spec-decode counts, an
SGLang file of appended runs): a baseline of the same tool, for every SD run of that tool; vLLM
results pair with the baseline of their own setting in it.

Only regular files are read, each up to a size cap (`--max-mb`, DEFAULT_MAX_MB): a device such as
/dev/zero would be read without end and a FIFO would block forever. In a folder, a file that cannot
be read or parsed is one "unverifiable" row with its error, and the other files are still audited.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from specmoe.audit.foreign import AuditRow, audit_csv, audit_log_files
from specmoe.audit.sglang import audit_sglang_points, is_sglang_line, load_sglang_points
from specmoe.audit.vllm import (
    audit_vllm_results,
    is_vllm_result,
    load_vllm_results,
)
from specmoe.errors import SpecmoeError

Kind = Literal["vllm", "sglang", "llamacpp"]
# Result files are kilobytes to a few megabytes (a vLLM result with per-request arrays of a long
# run); 256 MB leaves room for far larger ones and stops a wrong path long before memory runs out.
DEFAULT_MAX_MB = 256.0


def check_file(path: Path, max_mb: float = DEFAULT_MAX_MB, what: str = "") -> None:
    """A one-line SpecmoeError unless `path` is a regular file of at most `max_mb` megabytes.
    what: how the path was given ("--baseline "), for the message."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise SpecmoeError(f"{what}{path}: no such file; check the path") from None
    except OSError as err:
        raise SpecmoeError(f"cannot read {what}{path} ({err.strerror}); check the path") from None
    if stat.S_ISDIR(info.st_mode):
        raise SpecmoeError(f"{what}{path} is a directory; pass a file")
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device or socket"
        raise SpecmoeError(f"{what}{path} is not a regular file ({kind}); pass a results file or a folder")
    if info.st_size > max_mb * 1e6:
        raise SpecmoeError(
            f"{what}{path} is {info.st_size / 1e6:.0f} MB, over the {max_mb:g} MB the audit reads; "
            "raise it with --max-mb if the file is right"
        )


def file_kind(path: Path) -> Kind:
    """Which reader a file belongs to, from its content (llama.cpp when it is neither JSON kind)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise SpecmoeError(f"cannot read {path} ({err.strerror}); check the path") from None
    try:
        record = _first_value(text)
    except RecursionError:  # the parser recurses per level: a hostile file nests thousands
        raise SpecmoeError(f"{path}: JSON nested too deeply to read; pass the file the tool wrote") from None
    if is_vllm_result(record):
        return "vllm"
    if is_sglang_line(record):
        return "sglang"
    return "llamacpp"


def _first_value(text: str) -> Any:
    """The JSON value a text opens with (the first of several: `--append-result` writes objects one
    after another, JSONL one a line); None when it opens with no JSON."""
    try:
        return json.JSONDecoder().raw_decode(text.lstrip())[0]
    except ValueError:
        return None


def audit_input(
    path: str | Path, baseline: str | Path | None = None, max_mb: float = DEFAULT_MAX_MB
) -> list[AuditRow]:
    """AuditRows for a file or folder (see the module docstring); a SpecmoeError in one line for a
    path that is none of them or a baseline of another tool."""
    path = Path(path)
    if not os.path.lexists(path):
        raise SpecmoeError(
            f"{path} does not exist; pass a results .csv, a vLLM or SGLang result file, a llama.cpp log, "
            "or a folder of them"
        )
    if baseline is not None:
        check_file(Path(baseline), max_mb, "--baseline ")
    if path.is_dir():
        return _audit_folder(path, baseline, max_mb)
    check_file(path, max_mb)
    if path.suffix.lower() == ".csv":
        if baseline is not None:
            raise SpecmoeError("--baseline does not apply to a study CSV, whose baseline rows are in it")
        return audit_csv(path)
    return _audit_files({file_kind(path): [path]}, baseline, alone=True)


def _audit_folder(folder: Path, baseline: str | Path | None, max_mb: float) -> list[AuditRow]:
    """Every regular file directly in the folder; one that fails to read is a row with its error."""
    groups: dict[Kind, list[Path]] = {"llamacpp": [], "vllm": [], "sglang": []}
    broken: list[AuditRow] = []
    for file in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        try:
            check_file(file, max_mb)
            groups[file_kind(file)].append(file)
        except SpecmoeError as err:
            broken.append(_broken(file, err))
    return broken + _audit_files(groups, baseline, alone=False)


def _broken(file: Path, err: Exception) -> AuditRow:
    return AuditRow(file.name, "unverifiable", f"cannot audit this file: {err}", None, None)


def _audit_files(found: dict[Kind, list[Path]], baseline: str | Path | None, alone: bool) -> list[AuditRow]:
    """alone: one file named on the command line, whose error is the command's one line; in a
    folder, a file's error is its row."""
    groups: dict[Kind, list[Path]] = {"llamacpp": [], "vllm": [], "sglang": [], **found}
    baseline_kind = _baseline_kind(baseline, groups)
    rows: list[AuditRow] = []
    if groups["llamacpp"]:
        given = baseline if baseline_kind == "llamacpp" else None
        rows += audit_log_files(groups["llamacpp"], given)
    if groups["vllm"]:
        given = baseline if baseline is not None and baseline_kind == "vllm" else None
        given_results = load_vllm_results(given) if given is not None else None
        results = []
        for file in groups["vllm"]:
            try:
                loaded = load_vllm_results(file)
            except SpecmoeError as err:
                if alone:
                    raise
                rows.append(_broken(file, err))
                continue
            if given is not None and _same_file(file, given):  # the --baseline file is in the folder
                loaded = [replace(r, mark="baseline") for r in loaded]
            results += loaded
        rows += audit_vllm_results(results, given_results, str(given) if given else None) if results else []
    for file in groups["sglang"]:
        given_points = (
            load_sglang_points(baseline) if baseline is not None and baseline_kind == "sglang" else None
        )
        try:
            rows += audit_sglang_points(load_sglang_points(file), given_points)
        except SpecmoeError as err:
            if alone:
                raise
            rows.append(_broken(file, err))
    return rows


def _same_file(a: Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _baseline_kind(baseline: str | Path | None, groups: dict[Kind, list[Path]]) -> Kind | None:
    if baseline is None:
        return None
    baseline = Path(baseline)  # checked by audit_input: a regular file within the size cap
    kind = file_kind(baseline)
    if not groups[kind]:
        present = ", ".join(k for k, files in groups.items() if files) or "nothing"
        raise SpecmoeError(
            f"--baseline {baseline} is a {kind} result but the audited path holds {present}; "
            "pass a baseline from the same tool"
        )
    return kind
