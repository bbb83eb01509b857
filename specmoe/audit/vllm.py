"""Audit speedup claims in vLLM's serving-benchmark results: `vllm bench serve --save-result` JSON
(also the older `benchmarks/benchmark_serving.py`), one object per run, or several concatenated by
`--append-result`. SGLang's `bench_speculative.py` output is read by `specmoe.audit.sglang`.

The bound is the one of `specmoe.audit.foreign`, in the form these tools report: a verify step
emits on average A tokens per sequence (the *acceptance length*, accepted drafts plus the one token
of the target's own) and costs at least one plain decode step at the same batch, so an SD run's
decode rate is at most A times the plain run's. A = 1 + accepted / drafts from vLLM's counters
(`spec_decode_accepted_tokens`, `spec_decode_num_drafts`), else its `spec_decode_acceptance_length`.
Time before the first token (prefill, queueing) is the same work in both arms and only pulls the
ratio towards 1, so the bound holds for whole-run throughput too.

Which arm a result is, never guessed: `vllm bench serve` writes the `spec_decode_*` fields only when
its /metrics scrapes before and after the run both worked and the server drafted something, and
`benchmark_serving.py` never writes them, so a result without them may be either arm. It is an SD
run when it has them; otherwise its arm is what the user marked: the key ARM_KEY in the file
(`vllm bench serve --metadata arm=baseline`, or added by hand), or `--baseline FILE`; an unmarked
one is reported as unknown. Each SD result is paired with the one baseline of the same `model_id`,
`max_concurrency` and `request_rate`; two such baselines are an error naming both, since picking one
would be a guess. Two claims are checked: output token throughput (`output_throughput`, tokens/s
over the run) and per-request decode speed (the ratio of `mean_tpot_ms`); the verdict is
"impossible" when either exceeds the bound.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmoe.audit.foreign import AuditRow, judge
from specmoe.errors import SpecmoeError

VLLM_TOOL = "vllm-bench-serve"
# The key marking a result's arm: `vllm bench serve --metadata arm=baseline` writes it at the top
# level of the result, as a string; "baseline" or "sd".
ARM_KEY = "arm"
ARMS = ("baseline", "sd")


def finite_number(record: dict[str, Any], key: str) -> float | None:
    """A finite number field; None when absent, null, not a number or not finite."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


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
    mark: str | None = None  # the ARM_KEY value the file carries, as written; None when absent

    @property
    def has_counts(self) -> bool:
        """Whether vLLM wrote spec-decode counts: the server ran SD and drafted."""
        return bool(self.num_drafts or self.draft_tokens or self.acceptance_length)

    @property
    def arm(self) -> str:
        """ "sd", "baseline" or "unknown" (see the module docstring); a mark that contradicts the
        counts, or names no arm, is the arm "invalid"."""
        if self.mark is not None and self.mark not in ARMS:
            return "invalid"
        if self.has_counts:
            return "invalid" if self.mark == "baseline" else "sd"
        return self.mark or "unknown"

    @property
    def pairing(self) -> tuple[str, int | None, str]:
        return (self.model, self.concurrency, self.request_rate)


def is_vllm_result(record: Any) -> bool:
    """Whether parsed JSON is a vLLM serving-benchmark result (a dict with its throughput fields)."""
    return isinstance(record, dict) and "output_throughput" in record and "completed" in record


def read_vllm_result(name: str, record: dict[str, Any]) -> VllmResult:
    concurrency = record.get("max_concurrency")
    mark = record.get(ARM_KEY)
    return VllmResult(
        name=name,
        model=str(record.get("model_id") or record.get("model") or "?"),
        concurrency=concurrency if isinstance(concurrency, int) else None,
        request_rate=str(record.get("request_rate", "inf")),
        output_throughput=finite_number(record, "output_throughput"),
        mean_tpot_ms=finite_number(record, "mean_tpot_ms"),
        num_drafts=finite_number(record, "spec_decode_num_drafts"),
        draft_tokens=finite_number(record, "spec_decode_draft_tokens"),
        accepted_tokens=finite_number(record, "spec_decode_accepted_tokens"),
        acceptance_length=finite_number(record, "spec_decode_acceptance_length"),
        mark=None if mark is None else str(mark).strip().lower(),
    )


def json_objects(text: str) -> list[Any]:
    """Every JSON value in a text of values written one after another: one `--save-result` object,
    or `--append-result`'s objects, each on its own line (or pretty-printed; any whitespace between
    them). ValueError names where the text stops being JSON."""
    decoder = json.JSONDecoder()
    values, at = [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return values
        value, at = decoder.raw_decode(text, at)
        values.append(value)


def load_vllm_results(path: str | Path) -> list[VllmResult]:
    """Each run in a result file: one, or several from `--append-result` (named "file.json#2", ...)."""
    path = Path(path)
    try:
        records = json_objects(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise SpecmoeError(f"cannot read {path} as JSON ({err}); pass the file the tool wrote") from None
    except RecursionError:
        raise SpecmoeError(f"{path}: JSON nested too deeply to read; pass the file the tool wrote") from None
    if not records:
        raise SpecmoeError(f"{path} is empty; pass the JSON `vllm bench serve --save-result` wrote")
    results = []
    for index, record in enumerate(records, start=1):
        name = path.name if len(records) == 1 else f"{path.name}#{index}"
        if not is_vllm_result(record):
            raise SpecmoeError(
                f"{name}: not a vLLM serving result (no output_throughput and completed); pass the JSON "
                "`vllm bench serve --save-result` (or --append-result) wrote"
            )
        results.append(read_vllm_result(name, record))
    return results


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
    counts = {
        "spec_decode_num_drafts": result.num_drafts,
        "spec_decode_draft_tokens": result.draft_tokens,
        "spec_decode_accepted_tokens": result.accepted_tokens,
    }
    negative = [f"{key} {value:g}" for key, value in counts.items() if value is not None and value < 0]
    if negative:  # counters only grow: a negative one is no count, and its bound would be no bound
        verb = "is" if len(negative) == 1 else "are"
        return f"invalid input: {', '.join(negative)} {verb} negative; counts of drafts and tokens are >= 0"
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
        reason = (
            f"no baseline result of {_setting(result)}; its throughput must stay within {bound:.2f}× "
            f"the plain server's ({how}); pass one of the same setting with --baseline, or mark one "
            f'with "{ARM_KEY}": "baseline"'
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


def _unknown_arm(result: VllmResult) -> AuditRow:
    reason = (
        f"arm unknown: no spec_decode_* counts (benchmark_serving.py never writes them; vllm bench "
        f"serve only when its /metrics scrape worked and the server drafted), so {result.name} may be "
        f"a baseline or an SD run; mark it: `vllm bench serve --metadata {ARM_KEY}=baseline` (or "
        f'{ARM_KEY}=sd), the key "{ARM_KEY}" in the file, or --baseline FILE'
    )
    return AuditRow(
        result.name, "unverifiable", reason, None, None, tool=VLLM_TOOL,
        end_to_end_tokens_per_s=result.output_throughput,
    )  # fmt: skip


def _invalid_arm(result: VllmResult) -> AuditRow:
    if result.mark not in ARMS:
        reason = f'invalid input: "{ARM_KEY}": "{result.mark}" is none of {", ".join(ARMS)}'
    else:
        reason = f'invalid input: marked "{ARM_KEY}": "baseline" but it has spec_decode_* counts'
    return AuditRow(result.name, "invalid", reason, None, None, tool=VLLM_TOOL)


def _setting(result: VllmResult) -> str:
    model, concurrency, rate = result.pairing
    return f"{model} at max_concurrency {concurrency}, request_rate {rate}"


def pick_baseline(result: VllmResult, pool: list[VllmResult], given: str | None) -> VllmResult | None:
    """The one baseline of `result`'s setting in `pool`; None when there is none. Two or more are a
    one-line error: which one to compare with is the user's call. given: the --baseline file."""
    same = [b for b in pool if b.pairing == result.pairing]
    if len(same) <= 1:
        return same[0] if same else None
    names = ", ".join(b.name for b in same)
    where = f"--baseline {given} holds" if given else "the audited files hold"
    raise SpecmoeError(
        f"{result.name}: {where} {len(same)} baselines of {_setting(result)} ({names}); the audit "
        "does not pick one: keep one per setting, or pass the one to compare with --baseline FILE"
    )


def audit_vllm_results(
    results: list[VllmResult], baselines: list[VllmResult] | None = None, given: str | None = None
) -> list[AuditRow]:
    """One row per result, in the given order; SD results paired as the module docstring says.
    baselines: the runs of a --baseline file (`given`), which then pair every SD result."""
    for baseline in baselines or []:
        if baseline.has_counts:
            raise SpecmoeError(
                f"--baseline {baseline.name}: this result ran speculative decoding (spec_decode_* "
                "fields); pass the result of the server without it"
            )
    pool = baselines if baselines is not None else [r for r in results if r.arm == "baseline"]
    rows = []
    for result in results:
        arm = result.arm
        if arm == "baseline":
            rows.append(_audit_vllm_baseline(result))
        elif arm == "unknown":
            rows.append(_unknown_arm(result))
        elif arm == "invalid":
            rows.append(_invalid_arm(result))
        else:
            rows.append(_audit_vllm_sd(result, pick_baseline(result, pool, given)))
    return rows
