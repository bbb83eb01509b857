"""Read what llama.cpp tools print, by meaning rather than by line position.

Formats recognised (llama.cpp examples/speculative, examples/speculative-simple, tools/llama-bench,
examples/simple, src/llama-context.cpp and common/sampling.cpp of recent releases):

    llama-speculative / llama-speculative-simple, summary printed after generation:
        encoded   18 tokens in    0.084 seconds, speed:  214.286 t/s
        decoded  257 tokens in    3.687 seconds, speed:   69.705 t/s
        n_draft   = 16
        n_predict = 257
        n_drafted = 496
        n_accept  = 1
        accept    = 0.202%
        draft:   <perf block of the draft context>
        target:  <perf block of the target context>
    perf block lines (prefix `llama_perf_context_print:` or `common_perf_print:`):
        prompt eval time =  2719.76 ms /  4234 tokens (  0.64 ms per token,  1556.75 tokens per second)
               eval time =   512.07 ms /    28 runs   ( 18.29 ms per token,    54.68 tokens per second)
    llama-bench: a markdown table with `test` and `t/s` columns (tests `pp512`, `tg128`,
        `pp512+tg128`, `tg128 @ d512`; older releases print `pp 512`), or `-o json|jsonl|csv`
        records with `n_prompt`, `n_gen`, `avg_ts`.
    plain decoding (llama-simple, llama-cli, llama-completion): `decoded N tokens in T s, speed: X t/s`
        and/or the perf block of its one context.

What each printed rate means:
    decoded … t/s     end-to-end decode: the wall clock of the whole generation loop (drafting,
                      verifying, sampling, KV bookkeeping) divided by the emitted tokens. The only
                      rate comparable with a plain decode rate. (llama-simple's clock also covers
                      its prompt, so its line understates a pure decode rate.)
    encoded … t/s     the prompt phase only; not a decode rate at all.
    perf `eval time`  one context's single-token forward passes only. llama_context files every
                      multi-token batch under `prompt eval`, so in an SD log the target's verify
                      passes land in `prompt eval` and its `eval` line counts only rounds that
                      drafted nothing; the draft's `eval` line is its drafting steps. Neither
                      includes the other model's time or sampling.
    llama-bench tg    target decode with synthetic tokens, no sampling and no tokenizer, averaged
                      over repetitions: a per-phase rate from another tool.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass

from specmoe.canonical import json_value

# --- records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelId:
    """Identity of a model as logs reveal it; used to pair an SD log with its baseline.

    path: GGUF file name from the loader line (or llama-bench's model_filename), directory dropped.
    desc: "arch type ftype", the string llama-bench prints in its `model` column and that
        print_info lines spell out, e.g. "qwen35moe 35B.A3B Q4_K - Medium".
    """

    path: str | None = None
    desc: str | None = None

    def same_model(self, other: ModelId) -> bool:
        """File names decide when both are known (two fine-tunes can share a desc); else descs."""
        if self.path and other.path:
            return self.path == other.path
        if self.desc and other.desc:
            return _normalise(self.desc) == _normalise(other.desc)
        return False

    @property
    def label(self) -> str:
        return self.path or self.desc or "unnamed model"


@dataclass(frozen=True)
class RateLine:
    """An `encoded`/`decoded N tokens in T seconds, speed: X t/s` line."""

    tokens: int
    seconds: float
    tokens_per_s: float


@dataclass(frozen=True)
class ContextPerf:
    """One perf block of one llama_context; times in milliseconds."""

    prompt_eval_ms: float | None
    prompt_eval_tokens: int | None
    eval_ms: float | None
    eval_runs: int | None

    @property
    def eval_tokens_per_s(self) -> float | None:
        """Single-token passes per second of this context alone (excludes sampling, other model)."""
        if not self.eval_runs or not self.eval_ms or not math.isfinite(self.eval_ms):
            return None
        return self.eval_runs / (self.eval_ms / 1000.0)


@dataclass(frozen=True)
class SpeculativeLog:
    """Summary of one llama-speculative or llama-speculative-simple run (they print the same)."""

    target: ModelId
    encoded: RateLine | None
    decoded: RateLine | None
    n_draft: int | None  # γ: the most tokens drafted per round
    n_predict: int | None  # tokens emitted by the run
    n_drafted: int | None
    n_accept: int | None
    accept_percent: float | None  # as printed, in percent
    draft_perf: ContextPerf | None
    target_perf: ContextPerf | None
    tool: str = "llama-speculative"

    @property
    def acceptance(self) -> float | None:
        """Accepted ÷ drafted as a fraction: from the counts, else from the printed percentage."""
        if self.n_accept is not None and self.n_drafted:
            return self.n_accept / self.n_drafted
        if self.accept_percent is not None and math.isfinite(self.accept_percent):
            return self.accept_percent / 100.0
        return None


@dataclass(frozen=True)
class PlainDecodeLog:
    """A run without a draft (llama-simple, llama-cli, llama-completion)."""

    model: ModelId
    decoded: RateLine | None
    perf: ContextPerf | None
    tool: str = "plain-decode"


@dataclass(frozen=True)
class BenchResult:
    """One llama-bench result: mean tokens per second of one test."""

    model: ModelId
    n_prompt: int
    n_gen: int
    n_depth: int
    tokens_per_s: float
    stddev_tokens_per_s: float | None

    @property
    def is_decode(self) -> bool:
        """A pure text-generation test (tgN), the only kind comparable with a decode rate."""
        return self.n_prompt == 0 and self.n_gen > 0

    @property
    def test(self) -> str:
        if self.is_decode:
            name = f"tg{self.n_gen}"
        elif self.n_gen == 0:
            name = f"pp{self.n_prompt}"
        else:
            name = f"pp{self.n_prompt}+tg{self.n_gen}"
        return f"{name} @ d{self.n_depth}" if self.n_depth else name


@dataclass(frozen=True)
class BenchLog:
    results: tuple[BenchResult, ...]
    tool: str = "llama-bench"


@dataclass(frozen=True)
class UnrecognisedLog:
    why: str = "unrecognised format"


ParsedLog = SpeculativeLog | PlainDecodeLog | BenchLog | UnrecognisedLog

# --- patterns -------------------------------------------------------------------------------

_NUM = r"(-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan(?:\(ind\))?|[-+]?inf)"
_RATE_LINE = re.compile(
    rf"\b(encoded|decoded)\s+(\d+)\s+tokens\s+in\s+{_NUM}\s*(?:seconds|s)\s*,\s*speed:\s*{_NUM}\s*t/s",
    re.IGNORECASE,
)
_PROMPT_EVAL = re.compile(rf"prompt eval time\s*=\s*{_NUM}\s*ms\s*/\s*(\d+)\s*tokens")
_EVAL = re.compile(rf"(?<!prompt )\beval time\s*=\s*{_NUM}\s*ms\s*/\s*(\d+)\s*runs")
_SECTION = re.compile(r"(?:^|\s)(draft|target):\s*$")
_LOADER = re.compile(r"loaded meta data with .*? from (.+?) \(version")
_META_PREFIX = r"(?:print_info|llm_load_print_meta):\s*"
_ARCH = re.compile(_META_PREFIX + r"arch\s*=\s*(\S+)")
_MODEL_TYPE = re.compile(_META_PREFIX + r"model type\s*=\s*(.+?)\s*$")
_FILE_TYPE = re.compile(_META_PREFIX + r"(?:file type|model ftype)\s*=\s*(.+?)\s*$")
_ACCEPT = re.compile(rf"(?:^|\s)accept\s*=\s*{_NUM}\s*%\s*$")
_BENCH_TEST = re.compile(r"^(?:pp\s*(\d+))?\s*\+?\s*(?:tg\s*(\d+))?\s*(?:@\s*d\s*(\d+))?$")
_BENCH_RATE = re.compile(rf"^{_NUM}(?:\s*(?:±|\+/-)\s*{_NUM})?$")


def _file_name(path: str) -> str:
    """The last component of a POSIX or Windows path (logs come from either)."""
    return re.split(r"[\\/]", path.strip())[-1]


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def _number(text: str) -> float:
    """A printed number; C's nan/-nan(ind)/inf spellings become float nan/inf."""
    cleaned = text.lower().replace("(ind)", "")
    return float(cleaned.lstrip("+")) if "nan" not in cleaned else math.nan


def _last_count(lines: list[str], key: str) -> int | None:
    """The integer of the last line that ends in `key = N` (summary lines, not parameter dumps)."""
    pattern = re.compile(rf"(?:^|\s){re.escape(key)}\s*=\s*(-?\d+)\s*$")
    found = [int(m.group(1)) for line in lines if (m := pattern.search(line))]
    return found[-1] if found else None


def _rate_lines(lines: list[str]) -> dict[str, RateLine]:
    """Last `encoded` and `decoded` line of the log, keyed by that word."""
    rates: dict[str, RateLine] = {}
    for line in lines:
        if m := _RATE_LINE.search(line):
            rates[m.group(1).lower()] = RateLine(int(m.group(2)), _number(m.group(3)), _number(m.group(4)))
    return rates


def _perf(lines: list[str]) -> ContextPerf | None:
    """The first perf block in `lines` (prompt eval and eval lines), or None if it has neither."""
    prompt = next((m for line in lines if (m := _PROMPT_EVAL.search(line))), None)
    evals = next((m for line in lines if (m := _EVAL.search(line))), None)
    if prompt is None and evals is None:
        return None
    return ContextPerf(
        prompt_eval_ms=_number(prompt.group(1)) if prompt else None,
        prompt_eval_tokens=int(prompt.group(2)) if prompt else None,
        eval_ms=_number(evals.group(1)) if evals else None,
        eval_runs=int(evals.group(2)) if evals else None,
    )


def _sections(lines: list[str]) -> dict[str, list[str]]:
    """Lines after the last `draft:` / `target:` header, up to the next header.

    The last header wins because generated text, printed earlier, may itself end in "target:".
    """
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        if m := _SECTION.search(line):
            current = found[m.group(1)] = []
        elif current is not None:
            current.append(line)
    return found


def _first_model(lines: list[str]) -> ModelId:
    """Identity of the first model the log loads: the target, which both SD examples load first."""
    starts = [i for i, line in enumerate(lines) if _LOADER.search(line)]
    if not starts:
        return ModelId()
    end = starts[1] if len(starts) > 1 else len(lines)
    block = lines[starts[0] : end]
    path = _file_name(_LOADER.search(lines[starts[0]]).group(1))
    parts = [
        next((m.group(1) for line in block if (m := rx.search(line))), None)
        for rx in (_ARCH, _MODEL_TYPE, _FILE_TYPE)
    ]
    desc = " ".join(parts) if all(parts) else None
    return ModelId(path=path, desc=desc)


# --- per-format parsers ---------------------------------------------------------------------


def _speculative(lines: list[str]) -> SpeculativeLog:
    rates = _rate_lines(lines)
    sections = _sections(lines)
    accept = [_number(m.group(1)) for line in lines if (m := _ACCEPT.search(line))]
    text = "\n".join(lines)
    return SpeculativeLog(
        target=_first_model(lines),
        encoded=rates.get("encoded"),
        decoded=rates.get("decoded"),
        n_draft=_last_count(lines, "n_draft"),
        n_predict=_last_count(lines, "n_predict"),
        n_drafted=_last_count(lines, "n_drafted"),
        n_accept=_last_count(lines, "n_accept"),
        accept_percent=accept[-1] if accept else None,
        draft_perf=_perf(sections.get("draft", [])),
        target_perf=_perf(sections.get("target", [])),
        tool="llama-speculative-simple" if "speculative-simple" in text else "llama-speculative",
    )


def _bench_from_record(record: dict) -> BenchResult | None:
    """One llama-bench JSON/CSV record, or None if it lacks the fields a rate needs."""
    try:
        return BenchResult(
            model=ModelId(
                path=_file_name(str(record["model_filename"])) if record.get("model_filename") else None,
                desc=str(record["model_type"]) if record.get("model_type") else None,
            ),
            n_prompt=int(record["n_prompt"]),
            n_gen=int(record["n_gen"]),
            n_depth=int(record.get("n_depth") or 0),
            tokens_per_s=float(record["avg_ts"]),
            stddev_tokens_per_s=float(record["stddev_ts"])
            if record.get("stddev_ts") not in (None, "")
            else None,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _bench_json(text: str) -> BenchLog | None:
    stripped = text.strip()
    if not stripped.startswith(("[", "{")):
        return None
    try:
        data = json_value(stripped)
        records = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        try:  # JSONL: one object per line
            records = [json_value(line) for line in stripped.splitlines() if line.strip()]
        except json.JSONDecodeError:
            return None
    results = [r for rec in records if isinstance(rec, dict) and (r := _bench_from_record(rec))]
    return BenchLog(tuple(results)) if results and len(results) == len(records) else None


def _bench_csv(text: str) -> BenchLog | None:
    header = next((line for line in text.splitlines() if line.strip()), "")
    if "avg_ts" not in header or "n_gen" not in header:
        return None
    records = list(csv.DictReader(io.StringIO(text.strip())))
    results = [r for rec in records if (r := _bench_from_record(rec))]
    return BenchLog(tuple(results)) if results and len(results) == len(records) else None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _bench_markdown_row(cells: list[str], columns: dict[str, int]) -> BenchResult | None:
    test = _BENCH_TEST.match(cells[columns["test"]])
    rate = _BENCH_RATE.match(cells[columns["t/s"]])
    if not test or not rate or not (test.group(1) or test.group(2)):
        return None
    return BenchResult(
        model=ModelId(desc=cells[columns["model"]] if "model" in columns else None),
        n_prompt=int(test.group(1) or 0),
        n_gen=int(test.group(2) or 0),
        n_depth=int(test.group(3) or 0),
        tokens_per_s=_number(rate.group(1)),
        stddev_tokens_per_s=_number(rate.group(2)) if rate.group(2) else None,
    )


def _bench_markdown(lines: list[str]) -> BenchLog | None:
    results: list[BenchResult] = []
    columns: dict[str, int] | None = None
    for line in lines:
        if not line.strip().startswith("|"):
            columns = None  # a table ends at the first line outside it
            continue
        cells = _cells(line)
        if "test" in cells and "t/s" in cells:
            columns = {name: i for i, name in enumerate(cells)}
        elif columns is not None and len(cells) == len(columns) and not set("".join(cells)) <= set("-: "):
            row = _bench_markdown_row(cells, columns)
            if row is None:
                return None  # a row we cannot read: do not report half a table
            results.append(row)
    return BenchLog(tuple(results)) if results else None


def parse_log(text: str) -> ParsedLog:
    """Recognise which llama.cpp tool printed `text` and read its numbers.

    An SD summary (n_drafted / n_accept lines) wins over everything else; then llama-bench in
    json, csv or markdown; then plain decoding (a `decoded … t/s` line or a perf `eval time` line).
    Anything else is `UnrecognisedLog`: no numbers are guessed from unknown text.
    """
    lines = text.splitlines()
    if _last_count(lines, "n_drafted") is not None or _last_count(lines, "n_accept") is not None:
        return _speculative(lines)
    bench = _bench_json(text) or _bench_csv(text) or _bench_markdown(lines)
    if bench is not None:
        return bench
    decoded = _rate_lines(lines).get("decoded")
    perf = _perf(lines)
    if decoded is not None or (perf is not None and perf.eval_runs):
        return PlainDecodeLog(model=_first_model(lines), decoded=decoded, perf=perf)
    return UnrecognisedLog()
