"""Audit speedup claims in SGLang's `scripts/playground/bench_speculative.py` output (JSONL).

Each line is one (batch_size, steps, topk, num_draft_tokens) point of one server launch; `speed` is
its per-request decode rate, `acc_length / step_time`. `steps = 0` is the launch without
speculation, the baseline of the points of the same `batch_size`. An EAGLE tree is `steps` deep,
so at most `steps` drafts and one token of the target's own are accepted per step: `acc_length`
above steps + 1, or below 1, is invalid. The bound is `acc_length` (a claim above it needs a verify
step faster than a plain step; see `specmoe.audit.vllm`).

What pairs a point with its baseline, never guessed: a line names neither the model nor the
server's settings, and the tool appends every run to its `--output` (`output.jsonl` by default),
so one file may hold sweeps of several models. Within a file, points pair by `batch_size` only when
the file reads as one sweep: the same (batch_size, steps, topk, num_draft_tokens) twice means runs
were appended, and the file is refused with the fix (one file per sweep, or `--baseline FILE`).
A `--baseline` file gives the steps = 0 lines of every point instead, one per batch size.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmoe.audit.foreign import TOLERANCE, AuditRow, judge
from specmoe.audit.vllm import finite_number
from specmoe.canonical import json_value
from specmoe.errors import SpecmoeError

SGLANG_TOOL = "sglang-bench-speculative"
_SGLANG_KEYS = ("batch_size", "steps", "acc_length", "speed")


@dataclass(frozen=True)
class SglangPoint:
    """One line of `bench_speculative.py`'s output (`speed` in tokens/s per request)."""

    file: str  # the file's name
    line: int  # 1-based
    batch_size: int
    steps: int
    topk: Any  # as written; only names the point
    num_draft_tokens: Any
    acc_length: float | None
    speed: float | None

    @property
    def id(self) -> str:
        return (
            f"{self.file}:{self.line}:bs{self.batch_size}-s{self.steps}-k{self.topk}-n{self.num_draft_tokens}"
        )

    @property
    def setting(self) -> tuple[int, int, str, str]:
        return (self.batch_size, self.steps, str(self.topk), str(self.num_draft_tokens))


def is_sglang_line(record: Any) -> bool:
    return isinstance(record, dict) and all(k in record for k in _SGLANG_KEYS)


def load_sglang_points(path: str | Path) -> list[SglangPoint]:
    """Every line of a bench_speculative JSONL file; a line that is not one is a one-line error."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise SpecmoeError(f"cannot read {path} ({err}); pass the JSONL bench_speculative wrote") from None
    points = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json_value(line)
        except json.JSONDecodeError as err:
            raise SpecmoeError(
                f"{path}:{lineno}: invalid JSON ({err.msg}); expected bench_speculative lines"
            ) from None
        if not is_sglang_line(record) or not all(isinstance(record[k], int) for k in ("batch_size", "steps")):
            raise SpecmoeError(
                f"{path}:{lineno}: not a bench_speculative record; each line needs integer batch_size "
                f"and steps, acc_length and speed"
            )
        points.append(
            SglangPoint(
                file=path.name,
                line=lineno,
                batch_size=record["batch_size"],
                steps=record["steps"],
                topk=record.get("topk", "?"),
                num_draft_tokens=record.get("num_draft_tokens", "?"),
                acc_length=finite_number(record, "acc_length"),
                speed=finite_number(record, "speed"),
            )
        )
    if not points:
        raise SpecmoeError(f"{path}: no records; expected the JSONL bench_speculative.py writes")
    return points


def _repeated(points: list[SglangPoint], key) -> list[SglangPoint] | None:
    """The first group of points sharing `key`, in file order; None when every key is unique."""
    groups: dict[Any, list[SglangPoint]] = defaultdict(list)
    for point in points:
        groups[key(point)].append(point)
    return next((group for group in groups.values() if len(group) > 1), None)


def check_one_sweep(points: list[SglangPoint]) -> None:
    """A one-line error when a file holds the same point twice: runs appended to one --output."""
    twice = _repeated(points, lambda p: p.setting)
    if twice is None:
        return
    first = twice[0]
    lines = " and ".join(str(p.line) for p in twice[:2])
    raise SpecmoeError(
        f"{first.file}: lines {lines} both measure batch size {first.batch_size}, steps {first.steps}, "
        f"topk {first.topk}, {first.num_draft_tokens} draft tokens: bench_speculative.py appends every "
        "run to its --output and no line names the model, so which baseline belongs to which point "
        "is unknown; split the file into one file per run, or pass the baseline with --baseline FILE"
    )


def _check_baselines(pool: list[SglangPoint]) -> None:
    twice = _repeated(pool, lambda p: p.batch_size)
    if twice is not None:
        lines = " and ".join(str(p.line) for p in twice[:2])
        raise SpecmoeError(
            f"--baseline {twice[0].file}: lines {lines} are both steps = 0 at batch size "
            f"{twice[0].batch_size}; keep one steps = 0 line per batch size"
        )


def _audit_sglang_point(point: SglangPoint, baseline: SglangPoint | None) -> AuditRow:
    fields = {"tool": SGLANG_TOOL, "end_to_end_tokens_per_s": point.speed}
    if point.speed is None or point.speed <= 0:
        return AuditRow(
            point.id, "invalid", "invalid input: speed is not a finite number > 0", None, None, **fields
        )
    if point.batch_size < 1 or point.steps < 0:
        reason = f"invalid input: batch_size {point.batch_size} and steps {point.steps}: need >= 1 and >= 0"
        return AuditRow(point.id, "invalid", reason, None, None, **fields)
    if point.steps == 0:
        reason = (
            f"baseline: no speculation, {point.speed:.2f} tok/s per request at batch size {point.batch_size}"
        )
        return AuditRow(
            point.id, "consistent", reason, None, None, **fields, baseline_tokens_per_s=point.speed
        )
    bound = point.acc_length
    if bound is None or not 1.0 <= bound <= point.steps + 1 + TOLERANCE:
        reason = (
            f"invalid input: acc_length {point.acc_length} is outside [1, steps + 1 = {point.steps + 1}] "
            "(a step accepts at most one draft per tree level and one token of the target's own)"
        )
        return AuditRow(point.id, "invalid", reason, None, None, **fields)
    if baseline is None or baseline.speed is None or baseline.speed <= 0:
        reason = (
            f"no steps = 0 record for batch size {point.batch_size}; its speed must stay within "
            f"{bound:.2f}× (acc_length) the plain decode speed; pass one with --baseline"
        )
        return AuditRow(point.id, "unverifiable", reason, None, bound, **fields)
    speedup = point.speed / baseline.speed
    verdict = judge(speedup, bound)
    relation = "any SD decode is bounded by" if verdict == "impossible" else "within the bound"
    reason = (
        f"{point.speed:.2f} tok/s = {speedup:.2f}× the steps = 0 speed ({baseline.speed:.2f}, "
        f"{baseline.file}:{baseline.line}) at batch size {point.batch_size}; {relation} acc_length = "
        f"{bound:.2f}× (a verify step costs at least a plain step)"
    )
    return AuditRow(
        point.id,
        verdict,
        reason,
        speedup,
        bound,
        **fields,
        speedup=speedup,
        baseline_tokens_per_s=baseline.speed,
    )


def audit_sglang_points(
    points: list[SglangPoint], baselines: list[SglangPoint] | None = None
) -> list[AuditRow]:
    """One row per point; each SD point against the steps = 0 point of its batch size, from
    `baselines` (a `--baseline` file's points) when given, else from its own file, which must then
    read as one sweep (see the module docstring)."""
    if baselines is None:
        check_one_sweep(points)
        pool = [p for p in points if p.steps == 0]
    else:
        pool = [p for p in baselines if p.steps == 0]
        if not pool:
            raise SpecmoeError("--baseline: the file has no steps = 0 record (a run without speculation)")
        _check_baselines(pool)
    by_batch = {p.batch_size: p for p in pool}
    return [_audit_sglang_point(p, by_batch.get(p.batch_size)) for p in points]
