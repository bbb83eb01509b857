"""Everything specmoe renders from the shipped results, written into one folder, so that a change
meant to keep behaviour can be checked byte for byte: render before, render after, compare.

    python scripts/render_check.py render OUT      # from the repository root
    python scripts/render_check.py calibration OUT [--slow] [--specbundle DATA_JSON]
    python scripts/render_check.py compare A B     # exit status 1 when any file differs

`render` writes the findings document and its values (`specmoe findings --render-only`, from a copy
of docs/results/cpu), and for every exported CSV of its findings/ and real/: the rows read back
into a store, its HTML report (`specmoe bench report`; moesd with the shipped fits and profiles, as
`specmoe findings` draws it), its CSV export (`specmoe bench export`) and the result table by
config, category and γ, as text and as JSON (`specmoe bench summary`). An export whose rows the
store refuses is named, with the refusal, under `refused/`.

`calibration` writes what `specmoe calibrate` prints for every shipped calibration output, one
file per command (`heldout --out` also writes calibration.md and .json under cal/): about 15
minutes on 2 cores; `--slow` adds the fit variants and the constants' profile intervals (about an
hour more); `--specbundle` the dashboard's rows and checks from SpecForge's data.json.

`compare` replaces each folder's own path by one token first: a report names its store's path.
"""

from __future__ import annotations

import contextlib
import functools
import io
import shutil
import sys
from pathlib import Path

RESULTS = Path("docs/results/cpu")
FINDINGS = RESULTS / "findings"
EXPORTS = (FINDINGS, RESULTS / "real")  # the folders of exported CSVs, rendered one by one
SUMMARY_BY = ("config", "category", "gamma")


def render(out: Path) -> None:
    from specmoe.cli.summary import print_summary
    from specmoe.findings.document import write_document
    from specmoe.findings.results import read_export
    from specmoe.report import write_report
    from specmoe.results.store import Store, export

    if out.exists():
        shutil.rmtree(out)
    work = out / "_work"
    # write_document writes findings.json beside the exports, and reads real/ beside findings/
    shutil.copytree(RESULTS, work / "cpu")
    write_document(work / "cpu" / "findings", out / "findings.md")
    shutil.copy(work / "cpu" / "findings" / "findings.json", out / "findings.json")
    for folder in ("exports", "summary", "refused"):
        (out / folder).mkdir()
    for csv in (path for folder in EXPORTS for path in sorted(folder.glob("*.csv"))):
        name, db = csv.stem, work / f"{csv.stem}.db"
        try:
            with Store(db) as store:
                for row in read_export(csv):
                    store.add(row)
        except ValueError as err:
            (out / "refused" / name).write_text(f"{err}\n")
            continue
        extra = {}
        if name == "moesd":
            extra = {"fits": _jsons("fits"), "profiles": _jsons("profiles")}
        write_report(db, out / "reports" / name, **extra)
        export(db, out / "exports" / f"{name}.csv", "csv")
        with Store(db) as store:
            rows = store.rows()
        for by in SUMMARY_BY:
            for as_json, suffix in ((False, "txt"), (True, "json")):
                text = _printed(functools.partial(print_summary, rows, (by,), as_json))
                (out / "summary" / f"{name}-{by}.{suffix}").write_text(text)
    shutil.rmtree(work)


ISSUE_THREADS = (
    "Tencent/AngelSlim issue 163 (GitHub issue thread)",
    "sgl-project/SpecForge issue 339 (GitHub issue thread)",
)


def calibration_commands(out: Path, slow: bool, specbundle: Path | None) -> list[tuple[str, list[str]]]:
    """(file name, `specmoe calibrate` arguments) of every rendered calibration output."""
    cal = out / "cal"
    commands = [
        ("calibration", ["heldout", "--out", str(cal)]),
        ("calibration-fit", ["fit"]),
        ("heldout-intervals", ["heldout", "--intervals", str(cal / "calibration.json")]),
        ("step-time-audit", ["check", "--steps"]),
        (
            "frozen-issue-threads",
            ["frozen", "--issue-threads", *(a for s in ISSUE_THREADS for a in ("--source", s))],
        ),
        ("measured-step", ["heldout", "--measured-step"]),
    ]
    if slow:
        commands += [
            ("fit-check-soft-L1", ["heldout", "--variant", "soft-L1"]),
            ("constant-intervals", ["fit", "--intervals"]),
            ("fit-check-keep-priors", ["heldout", "--variant", "keep-priors"]),
        ]
    if specbundle is not None:
        data = str(specbundle)
        commands += [
            ("specbundle-rows", ["specbundle", data]),
            ("specbundle-sensitivity", ["specbundle", data, "--rule", "sensitivity"]),
            ("gamma-check", ["specbundle", data, "--gamma-check"]),
            ("tree-check", ["specbundle", data, "--tree-check"]),
        ]
    return commands


def render_calibration(out: Path, slow: bool, specbundle: Path | None) -> None:
    from specmoe.cli import main as specmoe

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name, args in calibration_commands(out, slow, specbundle):
        text = _printed(functools.partial(specmoe, ["calibrate", *args]))
        (out / f"{name}.out").write_text(text, encoding="utf-8")


def _jsons(folder: str) -> tuple[Path, ...]:
    return tuple(sorted((FINDINGS / folder).glob("*.json")))


def _printed(call) -> str:
    """What `call` prints, or the one line of the ValueError it raises (JSON refuses inf and nan)."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            call()
    except ValueError as err:
        return f"ValueError: {err}\n"
    return buffer.getvalue()


def compare(a: Path, b: Path) -> int:
    """Files only one folder holds, and files whose bytes differ; the number of both."""
    a, b = a.resolve(), b.resolve()
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    bad = sorted(files_a ^ files_b)
    for rel in bad:
        print(f"only in one folder: {rel}")
    for rel in sorted(files_a & files_b):
        left = (a / rel).read_bytes().replace(bytes(a), b"OUT")
        right = (b / rel).read_bytes().replace(bytes(b), b"OUT")
        if left != right:
            print(f"differs: {rel}")
            bad.append(rel)
    print(f"{len(files_a & files_b)} files compared, {len(bad)} differ or are missing")
    return len(bad)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "render":
        render(Path(argv[1]))
        return 0
    if len(argv) >= 2 and argv[0] == "calibration":
        rest = argv[2:]
        slow = "--slow" in rest
        data = Path(rest[rest.index("--specbundle") + 1]) if "--specbundle" in rest else None
        render_calibration(Path(argv[1]), slow, data)
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        return 1 if compare(Path(argv[1]), Path(argv[2])) else 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
