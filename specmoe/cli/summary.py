"""`specmoe bench summary`, and the result table every harness command ends with (`bench run`,
`bench quick`, `demo`): JSON when asked, rich tables on a terminal, plain text otherwise."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from specmoe.cli.options import path_arg
from specmoe.console import is_terminal
from specmoe.errors import SpecmoeError

if TYPE_CHECKING:
    from specmoe.results.store import RunRow

CONFIG, CATEGORY = "config", "category"  # as specmoe.report.summary_table names them
BY_HELP = (
    "one row per value of these columns, every other column pooled but target and draft (rows split by "
    "them too); repeatable. config (the default): "
    "one row per configuration; category: the prompts' category; or a configuration column: target, "
    "draft, gamma, prompt, batch, concurrency, request_rate, requests, top_k, temperature, dtype, device, "
    "max_new_tokens, compile, chat, group, suite"
)


def print_summary(
    rows: Sequence[RunRow], by: Sequence[str] = (CONFIG,), as_json: bool = False, keep_noisy: bool = False
) -> None:
    """The result table on stdout: JSON when asked, rich tables on a terminal, plain text otherwise
    (`bench summary`, and the end of `bench run` and `demo`); `keep_noisy` as `summary_table.build`."""
    from specmoe.report.summary_json import to_json
    from specmoe.report.summary_rich import print_rich
    from specmoe.report.summary_table import build, format_text

    table = build(rows, by, keep_noisy)
    if as_json:
        print(json.dumps(to_json(table), ensure_ascii=False, indent=1))
    elif is_terminal(sys.stdout):
        from rich.console import Console

        print_rich(table, Console())
    else:
        print(format_text(table))


def add_summary(bench) -> None:
    """`specmoe bench summary` on the `bench` subparsers."""
    p = bench.add_parser("summary", help="print the result table of a results store")
    p.add_argument("--db", type=path_arg, required=True, help="results store to summarise")
    p.add_argument(
        "--by",
        action="append",
        default=[],
        metavar="COLUMN",
        help=BY_HELP,
    )
    p.add_argument("--suite", default=None, help="only this suite's runs (a store can hold several)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run_summary)


def run_summary(args: argparse.Namespace) -> int:
    if not args.db.is_file():
        raise SpecmoeError(f"results store not found: {args.db}; run a suite first or pass the right --db")
    from specmoe.report.summary_table import check_by, select
    from specmoe.results.store import Store

    by = check_by(args.by)  # before the store is read: a typo is one line at once
    with Store(args.db) as store:
        rows = select(store.rows(), args.suite, args.db)
    print_summary(rows, by, args.json)
    return 0
