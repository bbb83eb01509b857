"""`specmoe findings`: the studies' claims measured on this machine and the findings document written
from the results, or only rewritten from them (`--render-only`; `specmoe.findings`)."""

from __future__ import annotations

from pathlib import Path


def add_findings(commands) -> None:
    p = commands.add_parser(
        "findings", help="measure the studies' claims on this machine and write the findings document"
    )
    p.add_argument(
        "--scale", default="cpu", help="cpu (about an hour on one core) or full (the suites as shipped)"
    )
    p.add_argument("--out", type=Path, default=Path("docs/results/cpu/findings"), help="results folder")
    p.add_argument("--doc", type=Path, default=Path("docs/findings.md"), help="the document to write")
    p.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite the document from the results folder, measure nothing",
    )
    p.add_argument(
        "--rules-changed",
        action="store_true",
        help="render although the rules file changed since the runs were measured (the document says so)",
    )
    p.add_argument(
        "--engine",
        action="append",
        default=[],
        help="measure only this engine's steps and profiles: transformers-bf16, llamacpp-q8_0, "
        "llamacpp-q4_k_m, or transformers-hybrid (the hybrid zoo's pass); repeat (default: all)",
    )
    p.set_defaults(run=run_findings)


def run_findings(args) -> int:
    from specmoe.findings.document import write_document
    from specmoe.findings.run import run_findings as measure_findings

    if args.render_only:
        print(f"wrote {write_document(args.out, args.doc, rules_changed=args.rules_changed)}")
        return 0
    return measure_findings(args.scale, args.out, args.doc, engines=tuple(args.engine))
