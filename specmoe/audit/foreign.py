"""Audit speedup claims in result sets produced by other tools, against the timing-free SD bound.

A verify round drafts at most γ tokens and emits 1 + accepted of them while costing at least one
plain decode step, so no end-to-end speedup can exceed 1 + α·γ, where α is the measured acceptance
rate accepted ÷ drafted (see `specmoe.theory.speedup_bound_no_timing`). A claim above that bound
means the SD rate and the baseline rate were not measured the same way.

Verdicts:
    consistent    the claim is at or below the bound (which does not make it right, only possible)
    impossible    the claim exceeds the bound by more than TOLERANCE
    unverifiable  something the check needs is missing or unreadable; the reason names it
    invalid       a value no measurement can produce (a rate <= 0 or not finite, γ = 0 on an SD row,
                  an absurdly large number): the row is not judged, the reason names the value

Inputs: a results CSV in the schema of the MoE SD study (`audit_csv`), or a folder of llama.cpp
logs (`audit_logs`); `audit_path` picks one by what the path is.

Units of the study CSV, decided from its values and its paper: `draft_acceptance_rate` is a fraction
(0.05769 is llama-speculative's `accept = 5.769%` divided by 100; per-configuration means × 100
reproduce the paper's "α (%)" column, e.g. 2.6 and 0.2), `tokens_per_sec` is tokens per second, and
`speedup_vs_baseline` a ratio. SD rows leave `speedup_vs_baseline` empty; their claim is then
derived the way the paper defines speedup: tokens_per_sec ÷ the mean tokens_per_sec of the baseline
rows (draft `none`) of the same target on the same machine.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import fmean
from typing import Literal

from specmoe.audit.llamacpp_logs import (
    BenchLog,
    BenchResult,
    ModelId,
    ParsedLog,
    PlainDecodeLog,
    SpeculativeLog,
    parse_log,
)
from specmoe.audit.study_csv import read_rows
from specmoe.errors import SpecmoeError
from specmoe.theory import mean_emitted_per_round, speedup_bound_no_timing

Verdict = Literal["consistent", "impossible", "unverifiable", "invalid"]
VERDICTS: tuple[Verdict, ...] = ("consistent", "impossible", "unverifiable", "invalid")

# A claim is impossible only above bound × (1 + TOLERANCE). 1% covers the 3-decimal rounding of
# printed rates and the run-to-run spread of a baseline (≈ 0.1–0.3% in the study CSV), so a verdict
# never hinges on noise.
TOLERANCE = 0.01

_CSV_COLUMNS = (
    "job_id",
    "target_model",
    "draft_model",
    "draft_len",
    "tokens_per_sec",
    "draft_acceptance_rate",
    "speedup_vs_baseline",
)
_NO_DRAFT = {"", "none", "-"}
# Beyond these a value is a typo or a corrupted cell, not a measurement: no decoder on any hardware
# reaches 10 million tokens/s per run, and no SD speedup reaches 1000× (the bound 1 + αγ is <= 1 + γ).
_MAX_TOKENS_PER_S = 1e7
_MAX_SPEEDUP = 1e3


@dataclass(frozen=True)
class AuditRow:
    """The verdict on one claim. Speedups and bounds are ratios (×); acceptance is a fraction.

    The last five fields are filled for rows read from logs only (tool is None for CSV rows):
    end_to_end_tokens_per_s is the `decoded … t/s` rate, speedup the SD rate ÷ the baseline rate of
    the same target found in the folder, baseline_tokens_per_s the rate that ratio used.
    """

    id: str
    verdict: Verdict
    reason: str
    claimed_speedup: float | None
    bound: float | None
    tool: str | None = None
    end_to_end_tokens_per_s: float | None = None
    acceptance: float | None = None
    speedup: float | None = None
    baseline_tokens_per_s: float | None = None


def judge(claimed: float, bound: float) -> Verdict:
    """ "impossible" when `claimed` exceeds `bound` by more than TOLERANCE, else "consistent"."""
    return "impossible" if claimed > bound * (1.0 + TOLERANCE) else "consistent"


def _pct(fraction: float) -> str:
    return f"{100.0 * fraction:.2f}%"


def _bound_reason(claimed: float, alpha: float, gamma: int, bound: float, verdict: Verdict) -> str:
    if verdict == "impossible":
        return (
            f"claims {claimed:.2f}× at α = {_pct(alpha)}, γ = {gamma}; "
            f"any end-to-end decode is bounded by 1 + αγ = {bound:.2f}×"
        )
    return f"{claimed:.2f}× at α = {_pct(alpha)}, γ = {gamma} is within the bound 1 + αγ = {bound:.2f}×"


# --- CSV ------------------------------------------------------------------------------------


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _is_baseline(row: dict[str, str]) -> bool:
    return row["draft_model"].strip().lower() in _NO_DRAFT


def _invalid_reason(row: dict[str, str]) -> str | None:
    """Why the row's values cannot come from a measurement, or None when they can.

    Only values that are present are checked; a missing one makes a row unverifiable, not invalid.
    """
    limits = {"tokens_per_sec": _MAX_TOKENS_PER_S, "speedup_vs_baseline": _MAX_SPEEDUP}
    for column, limit in limits.items():
        text = row[column].strip()
        if not text:
            continue
        value = _float(text)
        if value is None or not math.isfinite(value) or value <= 0:
            return f"invalid input: {column} {text!r} is not a finite number > 0"
        if value > limit:
            return f"invalid input: {column} {text} is implausibly large (> {limit:g})"
    alpha = row["draft_acceptance_rate"].strip()
    if alpha:
        value = _float(alpha)
        if value is None or not math.isfinite(value) or value < 0:
            return f"invalid input: draft_acceptance_rate {alpha!r} is not a finite number >= 0"
    gamma = row["draft_len"].strip()
    if not _is_baseline(row) and gamma:
        try:
            whole = int(gamma)
        except ValueError:
            whole = 0
        if whole < 1:
            draft = row["draft_model"]
            return f"invalid input: draft_len {gamma!r} on a row with draft {draft!r}; SD drafts >= 1 token"
    return None


def _baseline_means(rows: list[dict[str, str]]) -> dict[tuple[str, str], float]:
    """Mean baseline tokens/s per (machine, target): the paper's denominator for speedup."""
    rates: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        rate = _float(row["tokens_per_sec"])
        if _is_baseline(row) and rate is not None and _invalid_reason(row) is None:
            rates[(row.get("machine", ""), row["target_model"])].append(rate)
    return {key: fmean(values) for key, values in rates.items()}


def _audit_baseline_row(row: dict[str, str]) -> AuditRow:
    claimed = _float(row["speedup_vs_baseline"])
    if claimed is None:
        return AuditRow(
            row["job_id"],
            "unverifiable",
            "baseline run with no speedup recorded; nothing to check",
            None,
            None,
        )
    verdict = judge(claimed, 1.0)
    reason = f"baseline run (no draft) records {claimed:.2f}×" + (
        "; without a draft nothing can beat 1×" if verdict == "impossible" else ", as a baseline should"
    )
    return AuditRow(row["job_id"], verdict, reason, claimed, 1.0)


def _claimed_speedup(row: dict[str, str], means: dict[tuple[str, str], float]) -> tuple[float | None, str]:
    """The row's speedup claim and, when derived, how: recorded value first, else t/s ÷ baseline."""
    recorded = _float(row["speedup_vs_baseline"])
    if recorded is not None:
        return recorded, ""
    rate = _float(row["tokens_per_sec"])
    baseline = means.get((row.get("machine", ""), row["target_model"]))
    if rate is None or baseline is None:
        return None, ""
    return rate / baseline, f" ({rate:.2f} t/s ÷ baseline mean {baseline:.2f} t/s)"


def _audit_sd_row(row: dict[str, str], means: dict[tuple[str, str], float]) -> AuditRow:
    job = row["job_id"]
    claimed, derivation = _claimed_speedup(row, means)
    if claimed is None:
        where = f"target {row['target_model']!r}" + (f" on {row['machine']!r}" if row.get("machine") else "")
        return AuditRow(
            job, "unverifiable", f"no speedup recorded and no baseline row for {where}", None, None
        )
    if not row["draft_len"].strip():
        return AuditRow(job, "unverifiable", "no draft_len (γ) recorded", claimed, None)
    gamma = int(row["draft_len"])  # `_invalid_reason` passed: a whole number >= 1
    alpha = _float(row["draft_acceptance_rate"])
    if alpha is None:
        return AuditRow(job, "unverifiable", "no acceptance rate recorded", claimed, None)
    if not 0.0 <= alpha <= 1.0:
        reason = (
            f"acceptance {row['draft_acceptance_rate']} is outside [0, 1]; the column is read as a fraction"
        )
        return AuditRow(job, "unverifiable", reason, claimed, None)
    if alpha == 1.0 and row["draft_model"] != row["target_model"]:
        # Every drafted token accepted over a whole run is implausible for a draft that is not its
        # target; the study's suite F carries exactly 1.0 in every row, a value no other suite comes near.
        reason = (
            "acceptance recorded as exactly 1.0 (every drafted token accepted), which reads as a placeholder"
        )
        return AuditRow(job, "unverifiable", reason, claimed, None)
    bound = speedup_bound_no_timing(alpha, gamma)
    verdict = judge(claimed, bound)
    return AuditRow(
        job, verdict, _bound_reason(claimed, alpha, gamma, bound, verdict) + derivation, claimed, bound
    )


def audit_csv(path: str | Path) -> list[AuditRow]:
    """One AuditRow per row of a results CSV in the study's schema (see the module docstring)."""
    rows = read_rows(Path(path), _CSV_COLUMNS)
    means = _baseline_means(rows)
    return [_audit_csv_row(r, means) for r in rows]


def _audit_csv_row(row: dict[str, str], means: dict[tuple[str, str], float]) -> AuditRow:
    invalid = _invalid_reason(row)
    if invalid is not None:
        return AuditRow(row["job_id"], "invalid", invalid, None, None)
    return _audit_baseline_row(row) if _is_baseline(row) else _audit_sd_row(row, means)


# --- llama.cpp logs -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Baseline:
    model: ModelId
    tokens_per_s: float
    label: str  # where the rate comes from, for the reason text


def _plain_rate(log: PlainDecodeLog) -> tuple[float | None, str]:
    """The faster of the log's two plain-decode rates (see `_pick_baseline` for why faster)."""
    candidates = []
    if log.perf is not None and log.perf.eval_tokens_per_s:
        candidates.append((log.perf.eval_tokens_per_s, "eval perf line"))
    if log.decoded is not None and log.decoded.tokens_per_s > 0:
        candidates.append((log.decoded.tokens_per_s, "decoded line"))
    return max(candidates) if candidates else (None, "")


def _baselines(parsed: list[tuple[str, ParsedLog]]) -> list[_Baseline]:
    found: list[_Baseline] = []
    for name, log in parsed:
        if isinstance(log, BenchLog):
            found += [
                _Baseline(r.model, r.tokens_per_s, f"llama-bench {r.test} in {name}")
                for r in log.results
                if r.is_decode and r.tokens_per_s > 0
            ]
        elif isinstance(log, PlainDecodeLog):
            rate, source = _plain_rate(log)
            if rate is not None:
                found.append(_Baseline(log.model, rate, f"plain decode ({source}) in {name}"))
    return found


def _pick_baseline(target: ModelId, baselines: list[_Baseline]) -> _Baseline | None:
    """The fastest baseline of the same target. The fastest gives the smallest SD speedup, so an
    'impossible' verdict holds against every baseline in the folder."""
    matching = [b for b in baselines if b.model.same_model(target)]
    return max(matching, key=lambda b: b.tokens_per_s) if matching else None


def _sd_bound(log: SpeculativeLog, alpha: float) -> tuple[float, str]:
    """1 + αγ, or the log's exact tokens per round n_predict / (n_predict − n_accept) when tighter.

    Both bound the speedup (see `specmoe.theory.mean_emitted_per_round`); the exact count is the
    sharper one when rounds draft fewer than γ tokens.
    """
    bound, how = speedup_bound_no_timing(alpha, log.n_draft), "1 + αγ"
    if log.n_predict is not None and log.n_accept is not None and 0 <= log.n_accept < log.n_predict:
        per_round = mean_emitted_per_round(log.n_predict, log.n_accept)
        if per_round < bound:
            rounds = log.n_predict - log.n_accept
            bound, how = per_round, f"{log.n_predict} tokens / {rounds} rounds"
    return bound, how


def _audit_speculative(
    name: str, log: SpeculativeLog, baselines: list[_Baseline], forced: _Baseline | None = None
) -> AuditRow:
    alpha = log.acceptance
    rate = log.decoded.tokens_per_s if log.decoded else None
    fields = {"tool": log.tool, "end_to_end_tokens_per_s": rate, "acceptance": alpha}
    if alpha is None or not 0.0 <= alpha <= 1.0:
        return AuditRow(
            name, "unverifiable", "no readable acceptance (n_accept / n_drafted)", None, None, **fields
        )
    if not log.n_draft or log.n_draft < 1:
        return AuditRow(name, "unverifiable", "no n_draft line: draft length unknown", None, None, **fields)
    bound, how = _sd_bound(log, alpha)
    if rate is None or rate <= 0:
        reason = "no 'decoded … t/s' line: the log has no end-to-end rate to check"
        return AuditRow(name, "unverifiable", reason, None, bound, **fields)
    baseline = forced or _pick_baseline(log.target, baselines)
    if baseline is None:
        reason = (
            f"no baseline for target {log.target.label} in the folder; its SD rate {rate:.2f} t/s must stay "
            f"within {bound:.2f}× the target's plain decode rate ({how})"
        )
        return AuditRow(name, "unverifiable", reason, None, bound, **fields)
    speedup = rate / baseline.tokens_per_s
    verdict = judge(speedup, bound)
    relation = "any end-to-end decode is bounded by" if verdict == "impossible" else "within the bound"
    reason = (
        f"decodes at {rate:.2f} t/s = {speedup:.2f}× the {baseline.label} ({baseline.tokens_per_s:.2f} t/s) "
        f"at α = {_pct(alpha)}, γ = {log.n_draft}; {relation} {how} = {bound:.2f}×"
    )
    return AuditRow(
        name,
        verdict,
        reason,
        speedup,
        bound,
        **fields,
        speedup=speedup,
        baseline_tokens_per_s=baseline.tokens_per_s,
    )


def _audit_bench(name: str, log: BenchLog) -> list[AuditRow]:
    """One row per result, numbered so two models running the same test stay distinct."""
    return [_audit_bench_result(f"{name}:{i}:{r.test}", r) for i, r in enumerate(log.results, start=1)]


def _audit_bench_result(row_id: str, result: BenchResult) -> AuditRow:
    if not result.is_decode:
        reason = f"llama-bench {result.test} is not a pure decode test; not used as a baseline"
        return AuditRow(row_id, "consistent", reason, None, None, tool="llama-bench")
    reason = (
        f"baseline: llama-bench {result.test} of {result.model.label}, {result.tokens_per_s:.2f} t/s "
        "(no draft; synthetic tokens, no sampling)"
    )
    return AuditRow(
        row_id,
        "consistent",
        reason,
        None,
        None,
        tool="llama-bench",
        baseline_tokens_per_s=result.tokens_per_s,
    )


def _audit_plain(name: str, log: PlainDecodeLog) -> AuditRow:
    rate, source = _plain_rate(log)
    end_to_end = log.decoded.tokens_per_s if log.decoded else None
    if rate is None:
        reason = "plain decode log without a readable decode rate"
        return AuditRow(
            name, "unverifiable", reason, None, None, tool=log.tool, end_to_end_tokens_per_s=end_to_end
        )
    reason = f"baseline: plain decode of {log.model.label}, {rate:.2f} t/s from its {source} (no draft)"
    return AuditRow(
        name,
        "consistent",
        reason,
        None,
        None,
        tool=log.tool,
        end_to_end_tokens_per_s=end_to_end,
        baseline_tokens_per_s=rate,
    )


def audit_logs(folder: str | Path, baseline: str | Path | None = None) -> list[AuditRow]:
    """Audit every file directly in `folder` as a llama.cpp log; rows follow file-name order.

    SD logs (llama-speculative, llama-speculative-simple) are checked against the bound using the
    fastest baseline of the same target found in the folder (a llama-bench tg result or a plain
    decode log), or the one in `baseline` when given; baseline logs get one row each; files in no
    known format are "unverifiable" with reason "unrecognised format".
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise SpecmoeError(f"{folder} is not a folder; pass a folder of llama.cpp log files")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    return audit_log_files(files, baseline)


def _read_log(path: Path) -> ParsedLog:
    try:
        return parse_log(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as err:
        raise SpecmoeError(f"cannot read {path} ({err.strerror}); check the path") from None


def given_baseline(path: str | Path) -> _Baseline:
    """The plain-decode rate in a baseline file named on the command line (`--baseline`): the
    fastest decode rate a llama-bench output or a plain decode log holds. It pairs SD logs whose
    target the logs do not name in a way the folder's baselines match."""
    path = Path(path)
    if not path.is_file():
        raise SpecmoeError(
            f"--baseline {path}: no such file; pass a llama-bench output or a plain decode log"
        )
    found = _baselines([(path.name, _read_log(path))])
    if not found:
        raise SpecmoeError(
            f"--baseline {path}: no plain decode rate in it; pass a llama-bench output with a tg test "
            "or a plain decode log (llama-simple, llama-cli)"
        )
    return max(found, key=lambda b: b.tokens_per_s)


def audit_log_files(files: list[Path], baseline: str | Path | None = None) -> list[AuditRow]:
    """`audit_logs` on a list of files (a folder's, or one SD log with `--baseline`)."""
    forced = given_baseline(baseline) if baseline is not None else None
    parsed = [(p.name, _read_log(p)) for p in files]
    baselines = _baselines(parsed)
    rows: list[AuditRow] = []
    for name, log in parsed:
        if isinstance(log, SpeculativeLog):
            rows.append(_audit_speculative(name, log, baselines, forced))
        elif isinstance(log, BenchLog):
            rows += _audit_bench(name, log)
        elif isinstance(log, PlainDecodeLog):
            rows.append(_audit_plain(name, log))
        else:
            rows.append(AuditRow(name, "unverifiable", log.why, None, None, tool="unknown"))
    return rows


def audit_path(path: str | Path) -> list[AuditRow]:
    """`audit_csv` for a .csv file, `audit_logs` for a folder; anything else is a SpecmoeError."""
    path = Path(path)
    if path.is_dir():
        return audit_logs(path)
    if path.is_file() and path.suffix.lower() == ".csv":
        return audit_csv(path)
    if not path.exists():
        raise SpecmoeError(f"{path} does not exist; pass a results .csv file or a folder of llama.cpp logs")
    raise SpecmoeError(f"cannot audit {path}: pass a results .csv file or a folder of llama.cpp logs")


# --- output ---------------------------------------------------------------------------------

_LOG_FIELDS = ("tool", "end_to_end_tokens_per_s", "acceptance", "speedup", "baseline_tokens_per_s")


def summarise(rows: list[AuditRow]) -> dict[str, int]:
    """Rows per verdict, every verdict present (0 when none)."""
    counts = Counter(row.verdict for row in rows)
    return {verdict: counts.get(verdict, 0) for verdict in VERDICTS}


def rows_to_json(rows: list[AuditRow]) -> dict:
    """{"rows": [...]}: the five common fields for every row, the log fields for rows from logs."""
    out = []
    for row in rows:
        record = asdict(row)
        if row.tool is None:
            record = {k: v for k, v in record.items() if k not in _LOG_FIELDS}
        out.append(record)
    return {"rows": out}


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}×"


def format_rows(rows: list[AuditRow]) -> str:
    """A plain-text table (id, verdict, claimed, bound, reason) and a one-line count per verdict."""
    header = ("id", "verdict", "claimed", "bound", "reason")
    body = [(r.id, r.verdict, _cell(r.claimed_speedup), _cell(r.bound), r.reason) for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line[:4], widths, strict=True)) + "  " + line[4]
        for line in [header, *body]
    ]
    counts = summarise(rows)
    lines.append(f"{len(rows)} rows: " + ", ".join(f"{counts[v]} {v}" for v in VERDICTS))
    return "\n".join(lines)
