"""`specmoe findings`: the studies' claims measured on this machine and the findings document written
from the results, or only rewritten from them (`--render-only`; `specmoe.findings`)."""

from __future__ import annotations

from specmoe.cli.options import path_arg


def add_findings(commands) -> None:
    p = commands.add_parser(
        "findings", help="measure the studies' claims on this machine and write the findings document"
    )
    p.add_argument(
        "--scale", default="cpu", help="cpu (about an hour on one core) or full (the suites as shipped)"
    )
    p.add_argument(
        "--out", type=path_arg, help="results folder (default: docs/results/cpu/findings of this checkout)"
    )
    p.add_argument(
        "--doc", type=path_arg, help="the document to write (default: docs/findings.md of this checkout)"
    )
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
    p.add_argument(
        "--pass",
        dest="pass_name",
        metavar="NAME",
        help="measure this pass alone (moesd-wide or study-hybrid-mtp): its zoo, runs, report and the "
        "document, printing its wall time; it needs its predictions first (--predict)",
    )
    p.add_argument(
        "--predict",
        action="store_true",
        help="with --pass: the performance model's prediction of every cell of the pass, before its "
        "runs, written beside the results (probes this machine unless --hw names a hardware file)",
    )
    p.add_argument("--hw", type=path_arg, help="with --predict: a `specmoe hw` file instead of probing now")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="with --pass: its code path end to end on the smallest sizes, in a couple of minutes "
        "(into another --out and --doc: never findings)",
    )
    p.set_defaults(run=run_findings)


def run_findings(args) -> int:
    from specmoe.errors import SpecmoeError
    from specmoe.findings.checkout import findings_paths
    from specmoe.findings.document import write_document
    from specmoe.findings.run import predict_pass, run_pass
    from specmoe.findings.run import run_findings as measure_findings

    if (args.predict or args.smoke or args.hw) and not args.pass_name:
        raise SpecmoeError("--predict, --smoke and --hw go with --pass NAME (e.g. --pass moesd-wide)")
    if args.hw and not args.predict:
        raise SpecmoeError("--hw names the hardware file --predict prices from; add --predict")
    args.out, args.doc = findings_paths(args.out, args.doc)
    if args.render_only:
        print(f"wrote {write_document(args.out, args.doc, rules_changed=args.rules_changed)}")
        return 0
    if args.pass_name and args.predict:
        return predict_pass(args.pass_name, args.out, args.hw, smoke=args.smoke)
    if args.pass_name:
        return run_pass(args.pass_name, args.out, args.doc, smoke=args.smoke)
    return measure_findings(args.scale, args.out, args.doc, engines=tuple(args.engine))
