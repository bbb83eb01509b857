"""`specmoe audit`: a foreign result set (a study's CSV, llama.cpp logs, vLLM or SGLang benchmark
results) checked for speedup claims the measured acceptance cannot allow (`specmoe.audit`)."""

from __future__ import annotations

import json
import logging

from specmoe.cli.options import path_arg
from specmoe.errors import SpecmoeError

log = logging.getLogger(__name__)


def add_audit(commands) -> None:
    p = commands.add_parser(
        "audit",
        help="check a foreign result set (study CSV, llama.cpp logs, vLLM or SGLang benchmark "
        "results) for impossible speedup claims",
    )
    p.add_argument(
        "path",
        type=path_arg,
        help="a CSV shaped like the study's runs.csv; a vLLM `--save-result` JSON; an SGLang "
        "bench_speculative JSONL; a llama.cpp log; or a folder of them",
    )
    p.add_argument(
        "--baseline",
        type=path_arg,
        default=None,
        help="the same tool's result without a draft, for SD runs the files cannot pair themselves "
        "(logs that do not print the model name, vLLM results without spec_decode counts or an arm "
        "mark, SGLang files of appended runs)",
    )
    p.add_argument(
        "--max-mb",
        type=float,
        default=None,
        help="read files up to this many megabytes (default 256); larger ones are refused",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--fail-on",
        action="append",
        default=[],
        choices=["impossible", "unverifiable", "invalid"],
        help="exit with status 1 when any row has this verdict (for CI); repeatable",
    )
    p.set_defaults(run=run_audit)


def run_audit(args) -> int:
    from specmoe.audit.foreign import format_rows, rows_to_json
    from specmoe.audit.inputs import DEFAULT_MAX_MB, audit_input

    max_mb = DEFAULT_MAX_MB if args.max_mb is None else args.max_mb
    if not max_mb > 0:
        raise SpecmoeError(f"--max-mb must be > 0, got {args.max_mb:g}; give a size in megabytes")
    rows = audit_input(args.path, args.baseline, max_mb)
    print(json.dumps(rows_to_json(rows), ensure_ascii=False) if args.json else format_rows(rows))
    failing = [r for r in rows if r.verdict in args.fail_on]
    if failing:
        verdicts = ", ".join(sorted({r.verdict for r in failing}))
        log.error("audit: %d of %d rows are %s (--fail-on)", len(failing), len(rows), verdicts)
        return 1
    return 0
