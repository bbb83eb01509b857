"""Audit speedup claims in serving-benchmark results: vLLM's `benchmark_serving.py --save-result`
JSON (also `vllm bench serve`) and SGLang's `bench_speculative.py` JSONL.

The bound is the one of `specmoe.bench.audit_foreign`, in the form these tools report: a verify step
emits on average A tokens per sequence (the *acceptance length*, accepted drafts plus the one token
of the target's own) and costs at least one plain decode step at the same batch, so an SD run's
decode rate is at most A times the plain run's. A = 1 + accepted / drafts from vLLM's counters
(`spec_decode_accepted_tokens`, `spec_decode_num_drafts`), else its `spec_decode_acceptance_length`;
SGLang prints it as `acc_length`. Time before the first token (prefill, queueing) is the same work in
both arms and only pulls the ratio towards 1, so the bound holds for whole-run throughput too.

vLLM: a result file without `spec_decode_*` fields (or with no drafts) is a baseline. Each SD result
is paired with the fastest baseline of the same `model_id`, `max_concurrency` and `request_rate`
(the fastest gives the smallest speedup, so an "impossible" verdict holds against every one), or
with the file given as `--baseline`. Two claims are checked: output token throughput
(`output_throughput`, tokens/s over the run) and per-request decode speed (the ratio of
`mean_tpot_ms`); the verdict is "impossible" when either exceeds the bound.

SGLang: each JSONL line is one (batch_size, steps, topk, num_draft_tokens) point; `speed` is its
per-request decode rate, `acc_length / step_time`. `steps = 0` is the run without speculation, the
baseline of every point of the same `model_path` and `batch_size` (or of every point, from the
`--baseline` file). An EAGLE tree is `steps` deep, so at most `steps` drafts and one token of the
target's own are accepted per step: `acc_length` above steps + 1, or below 1, is invalid.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmoe.bench.audit_foreign import TOLERANCE, AuditRow, judge
from specmoe.errors import SpecmoeError

VLLM_TOOL = "vllm-bench-serve"
SGLANG_TOOL = "sglang-bench-speculative"


def _number(record: dict[str, Any], key: str) -> float | None:
    """A finite number field; None when absent, null, not a number or not finite."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecmoeError(f"cannot read {path} as JSON ({err}); pass the file the tool wrote") from None


# --- vLLM -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmResult:
    """The fields of one `--save-result` file the audit reads (rates in tokens/s, times in ms)."""

    name: str  # the file's name
    model: str  # model_id
    concurrency: int | None  # max_concurrency; None: unlimited
    request_rate: str  # as the tool wrote it: a number or "inf"
    output_throughput: float | None
    mean_tpot_ms: float | None
    num_drafts: float | None
    draft_tokens: float | None
    accepted_tokens: float | None
    acceptance_length: float | None

    @property
    def is_sd(self) -> bool:
        return bool(self.num_drafts or self.draft_tokens or self.acceptance_length)

    @property
    def pairing(self) -> tuple[str, int | None, str]:
        return (self.model, self.concurrency, self.request_rate)


def is_vllm_result(record: Any) -> bool:
    """Whether parsed JSON is a vLLM serving-benchmark result (a dict with its throughput fields)."""
    return isinstance(record, dict) and "output_throughput" in record and "completed" in record


def read_vllm_result(path: Path, record: dict[str, Any]) -> VllmResult:
    concurrency = record.get("max_concurrency")
    return VllmResult(
        name=path.name,
        model=str(record.get("model_id") or record.get("model") or "?"),
        concurrency=concurrency if isinstance(concurrency, int) else None,
        request_rate=str(record.get("request_rate", "inf")),
        output_throughput=_number(record, "output_throughput"),
        mean_tpot_ms=_number(record, "mean_tpot_ms"),
        num_drafts=_number(record, "spec_decode_num_drafts"),
        draft_tokens=_number(record, "spec_decode_draft_tokens"),
        accepted_tokens=_number(record, "spec_decode_accepted_tokens"),
        acceptance_length=_number(record, "spec_decode_acceptance_length"),
    )


def load_vllm_result(path: str | Path) -> VllmResult:
    path = Path(path)
    record = _read_json(path)
    if not is_vllm_result(record):
        raise SpecmoeError(
            f"{path}: not a vLLM serving result (no output_throughput and completed); pass the JSON "
            "`benchmark_serving.py --save-result` (or `vllm bench serve --save-result`) wrote"
        )
    return read_vllm_result(path, record)


def _vllm_bound(result: VllmResult) -> tuple[float | None, str]:
    """Mean tokens per verify step and how it was found; None when the file has neither source."""
    if result.num_drafts and result.accepted_tokens is not None:
        bound = 1.0 + result.accepted_tokens / result.num_drafts
        return bound, f"1 + {result.accepted_tokens:g} accepted / {result.num_drafts:g} drafts"
    if result.acceptance_length is not None:
        return result.acceptance_length, "spec_decode_acceptance_length"
    return None, ""


def _vllm_invalid(result: VllmResult) -> str | None:
    if result.output_throughput is None or result.output_throughput <= 0:
        return "invalid input: output_throughput is not a finite number > 0"
    accepted, drafted = result.accepted_tokens, result.draft_tokens
    if accepted is not None and drafted is not None and accepted > drafted:
        return f"invalid input: {accepted:g} accepted tokens of {drafted:g} drafted"
    if result.acceptance_length is not None and result.acceptance_length < 1.0:
        return f"invalid input: spec_decode_acceptance_length {result.acceptance_length:g} is below 1"
    return None


def _acceptance(result: VllmResult) -> float | None:
    if result.draft_tokens and result.accepted_tokens is not None:
        return result.accepted_tokens / result.draft_tokens
    return None


def _audit_vllm_sd(result: VllmResult, baseline: VllmResult | None) -> AuditRow:
    fields = {
        "tool": VLLM_TOOL,
        "end_to_end_tokens_per_s": result.output_throughput,
        "acceptance": _acceptance(result),
    }
    invalid = _vllm_invalid(result)
    if invalid is not None:
        return AuditRow(result.name, "invalid", invalid, None, None, **fields)
    bound, how = _vllm_bound(result)
    if bound is None:
        reason = "SD result without spec_decode_num_drafts/accepted_tokens or acceptance_length"
        return AuditRow(result.name, "unverifiable", reason, None, None, **fields)
    if baseline is None or baseline.output_throughput is None:
        model, concurrency, rate = result.pairing
        reason = (
            f"no baseline result for {model} at max_concurrency {concurrency}, request_rate {rate}; "
            f"its throughput must stay within {bound:.2f}× the plain server's ({how}); "
            "pass one with --baseline"
        )
        return AuditRow(result.name, "unverifiable", reason, None, bound, **fields)
    assert result.output_throughput is not None  # checked by _vllm_invalid
    throughput = result.output_throughput / baseline.output_throughput
    tpot = None
    if result.mean_tpot_ms and baseline.mean_tpot_ms:
        tpot = baseline.mean_tpot_ms / result.mean_tpot_ms
    claimed = max(throughput, tpot or 0.0)
    verdict = judge(claimed, bound)
    per_request = f", per-request decode {tpot:.2f}× (mean TPOT)" if tpot is not None else ""
    relation = "any SD decode is bounded by" if verdict == "impossible" else "within the bound"
    reason = (
        f"output throughput {throughput:.2f}× {baseline.name} ({result.output_throughput:.1f} vs "
        f"{baseline.output_throughput:.1f} tok/s){per_request}; {relation} {how} = {bound:.2f}×"
    )
    return AuditRow(
        result.name,
        verdict,
        reason,
        claimed,
        bound,
        **fields,
        speedup=throughput,
        baseline_tokens_per_s=baseline.output_throughput,
    )


def _audit_vllm_baseline(result: VllmResult) -> AuditRow:
    if result.output_throughput is None or result.output_throughput <= 0:
        reason = "invalid input: output_throughput is not a finite number > 0"
        return AuditRow(result.name, "invalid", reason, None, None, tool=VLLM_TOOL)
    reason = (
        f"baseline: {result.model} without speculative decoding, {result.output_throughput:.1f} tok/s "
        f"at max_concurrency {result.concurrency}, request_rate {result.request_rate}"
    )
    return AuditRow(
        result.name,
        "consistent",
        reason,
        None,
        None,
        tool=VLLM_TOOL,
        end_to_end_tokens_per_s=result.output_throughput,
        baseline_tokens_per_s=result.output_throughput,
    )


def _fastest(results: list[VllmResult]) -> VllmResult | None:
    usable = [r for r in results if r.output_throughput and r.output_throughput > 0]
    return max(usable, key=lambda r: r.output_throughput or 0.0) if usable else None


def audit_vllm_results(results: list[VllmResult], baseline: VllmResult | None = None) -> list[AuditRow]:
    """One row per result, in the given order; SD results paired as the module docstring says."""
    if baseline is not None and baseline.is_sd:
        raise SpecmoeError(
            f"--baseline {baseline.name}: this result ran speculative decoding (spec_decode_* fields); "
            "pass the result of the server without it"
        )
    plain = [r for r in results if not r.is_sd]
    rows = []
    for result in results:
        if not result.is_sd:
            rows.append(_audit_vllm_baseline(result))
            continue
        pair = baseline or _fastest([b for b in plain if b.pairing == result.pairing])
        rows.append(_audit_vllm_sd(result, pair))
    return rows


# --- SGLang ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SglangPoint:
    """One line of `bench_speculative.py`'s output (`speed` in tokens/s per request, step_time in s)."""

    id: str  # "<file>:<line>:bs<B>-s<steps>-k<topk>-n<draft tokens>"
    model: str  # model_path; "" when the line has none
    batch_size: int
    steps: int
    acc_length: float | None
    speed: float | None


_SGLANG_KEYS = ("batch_size", "steps", "acc_length", "speed")


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
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise SpecmoeError(
                f"{path}:{lineno}: invalid JSON ({err.msg}); expected bench_speculative lines"
            ) from None
        if not is_sglang_line(record) or not all(isinstance(record[k], int) for k in ("batch_size", "steps")):
            raise SpecmoeError(
                f"{path}:{lineno}: not a bench_speculative record; each line needs integer batch_size "
                f"and steps, acc_length and speed"
            )
        b, s = record["batch_size"], record["steps"]
        k, n = record.get("topk", "?"), record.get("num_draft_tokens", "?")
        points.append(
            SglangPoint(
                id=f"{path.name}:{lineno}:bs{b}-s{s}-k{k}-n{n}",
                model=str(record.get("model_path") or ""),
                batch_size=b,
                steps=s,
                acc_length=_number(record, "acc_length"),
                speed=_number(record, "speed"),
            )
        )
    if not points:
        raise SpecmoeError(f"{path}: no records; expected the JSONL bench_speculative.py writes")
    return points


def _audit_sglang_point(point: SglangPoint, baseline: SglangPoint | None) -> AuditRow:
    fields = {"tool": SGLANG_TOOL, "end_to_end_tokens_per_s": point.speed}
    if point.speed is None or point.speed <= 0:
        return AuditRow(
            point.id, "invalid", "invalid input: speed is not a finite number > 0", None, None, **fields
        )
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
        f"{point.speed:.2f} tok/s = {speedup:.2f}× the steps = 0 speed ({baseline.speed:.2f}) at batch size "
        f"{point.batch_size}; {relation} acc_length = {bound:.2f}× (a verify step costs at least a "
        "plain step)"
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
    """One row per point; each SD point against the steps = 0 point of its model and batch size,
    from `baselines` (a `--baseline` file's points) when given, else from `points`."""
    pool = [p for p in (baselines if baselines is not None else points) if p.steps == 0]
    if baselines is not None and not pool:
        raise SpecmoeError("--baseline: the file has no steps = 0 record (a run without speculation)")

    def pick(point: SglangPoint) -> SglangPoint | None:
        same = [
            b
            for b in pool
            if b.batch_size == point.batch_size and (baselines is not None or b.model == point.model)
        ]
        usable = [b for b in same if b.speed]
        return max(usable, key=lambda b: b.speed or 0.0) if usable else None

    return [_audit_sglang_point(p, pick(p)) for p in points]
