"""The Python half of `benchmarks/gpu/gpu_check.sh`: the suite's models, and the folder's README.

    python -m benchmarks.gpu.gpu_check models SUITE [--set K=V ...] [--device D] [--lossless-override K=V ...]
    python -m benchmarks.gpu.gpu_check readme OUT       # OUT/README.md from OUT's files

`models` loads the suite with the same `--set` overrides `bench run` gets and builds its config models
as `bench run` would (`prepare_zoo`), and the lossless checks' OLMoE, in one process, so the script
can hand the very same folders to `generate`, `profile` and `advise`; it prints "name<TAB>folder".
`readme` reads what the steps wrote (steps.tsv, hw.json, lossless-*.json, the suite's store, the
fit's predictions, advise's answers) and writes one page.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from benchmarks.paths import OLMOE_CONFIG as OLMOE


def models(suite_path: str, settings: list[str], device: str, lossless: list[str]) -> int:
    """Build the suite's config models as `bench run` does, and OLMoE with the `lossless` overrides
    (KEY=VALUE) on `device`; print each as "name<TAB>folder"."""
    from specmoe.bench.suite_zoo import prepare_zoo
    from specmoe.suite.load import load_suite
    from specmoe.suite.model_paths import local_files
    from specmoe.suite.overrides import SuiteOverrides, parse_assignment
    from specmoe.zoo.config_build import build_cached
    from specmoe.zoo.config_source import parse_override, read_config_source

    overrides = SuiteOverrides(tuple(parse_assignment(s) for s in settings))
    suite = load_suite(suite_path, overrides)
    prepare_zoo(suite, None)
    for name, model in suite.models.items():
        print(f"{name}\t{local_files(model, None)}")
    source = read_config_source(OLMOE, dict(parse_override(text) for text in lossless))
    print(f"lossless\t{build_cached(source, device=device)}")
    return 0


# --- README --------------------------------------------------------------------------------------


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _steps(out: Path) -> list[dict[str, str]]:
    path = out / "steps.tsv"
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _steps_section(steps: list[dict[str, str]]) -> list[str]:
    lines = ["## Steps", "", "| step | status | seconds | output |", "|---|---|---|---|"]
    for step in steps:
        lines.append(f"| {step['step']} | {step['status']} | {step['seconds']} | `{step['output']}` |")
    total = sum(float(s["seconds"]) for s in steps)
    failed = [s["step"] for s in steps if s["status"] != "ok"]
    verdict = f"Not ok: {', '.join(failed)}." if failed else "Every step ok."
    lines += ["", f"All steps: {total:.0f} s. {verdict}"]
    return lines


def _hw_section(out: Path) -> list[str]:
    hw = _read_json(out / "hw.json")
    if not hw:
        return ["## Hardware", "", "No hw.json (the step failed)."]
    flops = ", ".join(f"{k} {v / 1e12:.2f} TFLOP/s" for k, v in hw.get("flops_per_s", {}).items())
    return [
        "## Hardware (`specmoe hw`)",
        "",
        f"{hw.get('name')} ({hw.get('device')}): read bandwidth "
        f"{hw['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s; matmul {flops}.",
    ]


def _lossless_section(out: Path) -> list[str]:
    lines = [
        "## Lossless checks (`specmoe generate --check`)",
        "",
        "SD against plain decoding of the same prompts, greedy. A self-draft (the target as its own "
        "draft) accepts every token in exact arithmetic, so it exercises the acceptance path; the "
        "random draft is rejected almost always, the rejection path. A bf16 divergence is a near-tie "
        "the verify pass rounds differently from one-token steps (the check names its margin).",
        "",
        "| check | tokens | acceptance | divergences | verdict |",
        "|---|---|---|---|---|",
    ]
    for path in sorted(out.glob("lossless-*.json")):
        result = _read_json(path)
        if not result:
            lines.append(f"| {path.stem} | | | | no result (see its .log) |")
            continue
        stats, divergences = result["stats"], result.get("divergences", [])
        verdict = "identical to plain decoding" if not divergences else f"{len(divergences)} divergence(s)"
        rate = stats.get("acceptance_rate")
        lines.append(
            f"| {path.stem.removeprefix('lossless-')} | {stats['emitted']} | "
            f"{'' if rate is None else f'{rate:.2f}'} | {len(divergences)} | {verdict} |"
        )
    return lines


def _suite_section(out: Path) -> list[str]:
    lines = ["## The moesd-gpu suite (`specmoe bench run`)", ""]
    text = out / "suite.txt"
    if text.is_file() and text.stat().st_size:
        lines += ["```", text.read_text(encoding="utf-8").rstrip(), "```"]
    else:
        lines.append("No result table (the suite step failed; see suite.log).")
    return lines


def _measured(out: Path) -> dict[tuple[str, float, int, int], dict]:
    """The suite's summary rows by (target, acceptance, gamma, batch), oracle arms only."""
    db = out / "moesd-gpu.db"
    if not db.is_file():
        return {}
    from specmoe.drafts import OracleDraft, parse_draft
    from specmoe.report.summary_json import to_json
    from specmoe.report.summary_table import build
    from specmoe.results.store import Store

    with Store(db) as store:
        table = to_json(build(store.rows(), ("config",)))
    measured = {}
    for row in ({**table["fixed"], **row} for row in table["rows"]):  # a column every row shares is "fixed"
        draft = parse_draft(row["draft"]) if row.get("draft") else None
        if isinstance(draft, OracleDraft):
            measured[(row["target"], draft.acceptance, row["gamma"], row["batch"])] = row
    return measured


def _beside_section(out: Path) -> list[str]:
    """OLMoE's measured speedups beside what the fit of its own profile predicts."""
    lines = ["## Measured beside predicted (OLMoE, oracle drafts)", ""]
    predicted = _read_json(out / "predict.json")
    measured = _measured(out)
    if not predicted or not measured:
        return [*lines, "Needs the suite, the profiles and the fit; one of them failed."]
    lines += [
        "Measured: the suite's speedup (SD tok/s over baseline tok/s of the same prompts) with its "
        "interval, and the acceptance it reached (bf16 near-ties can put it below the oracle's dial). "
        "Predicted: `specmoe model predict` on the fit of OLMoE's profile on this device and its "
        "draft's profile, at the dialed acceptance (* outside the profiled grid).",
        "",
        "| B | γ | α | measured | accepted | predicted |",
        "|---|---|---|---|---|---|",
    ]
    for row in predicted["rows"]:
        for alpha, speedup in sorted(row["speedup"].items()):
            cell = measured.get(("olmoe", float(alpha), row["gamma"], row["batch"]))
            if cell is None:
                continue
            mark = " *" if row["extrapolated"] else ""
            lines.append(
                f"| {row['batch']} | {row['gamma']} | {alpha} | {_speedup(cell)} | "
                f"{_number(cell.get('acceptance_rate'))} | {speedup:.2f}×{mark} |"
            )
    return lines


def _speedup(cell: dict) -> str:
    """The summary's own wording: "1.12× [1.05, 1.19] 95% n=10", or why there is no number."""
    if cell.get("speedup") is None:
        return cell.get("impossible") or cell.get("no_number") or "no number"
    return cell["speedup"]["text"]


def _number(value) -> str:
    return "–" if value is None else f"{value:.2f}"


def _advise_section(out: Path) -> list[str]:
    lines = [
        "## From the configs alone (`specmoe advise --config`)",
        "",
        "First principles on this device's `specmoe hw` numbers and the eager engine profile, for each "
        "suite target and its draft at α = 0.9 (the built folders' config.json, the suite's overrides "
        "applied): nothing measured above enters these.",
    ]
    for path in sorted(out.glob("advise-*.txt")):
        lines += ["", f"`{path.name}`:", "", "```", path.read_text(encoding="utf-8").rstrip(), "```"]
    return lines


def readme(out: Path) -> int:
    env = (out / "env.txt").read_text(encoding="utf-8").rstrip() if (out / "env.txt").is_file() else ""
    smoke = (out / "SMOKE").exists()
    mode = "smoke (CPU, tiny shapes)" if smoke else "full (CUDA GPU, real shapes)"
    lines = [
        "# specmoe GPU check",
        "",
        f"Mode: {mode}. Written by `benchmarks/gpu/gpu_check.sh`; every step's command, output and log "
        "are in "
        "this folder (steps.tsv lists them).",
        *(
            [
                "",
                "A smoke run checks that every step works, not what it measures: the models are cut to "
                "tiny widths, runs decode a few tokens with the noise guard off on a CPU that other "
                "processes share, and the compiled check runs the static-cache path with torch.compile "
                "turned off. Its speedups are noise; read none of them as a result.",
            ]
            if smoke
            else []
        ),
        "",
        "```",
        env,
        "```",
        "",
        *_steps_section(_steps(out)),
        "",
        *_hw_section(out),
        "",
        *_lossless_section(out),
        "",
        *_suite_section(out),
        "",
        *_beside_section(out),
        "",
        *_advise_section(out),
    ]
    (out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(out / "README.md")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("models")
    build.add_argument("suite")
    build.add_argument("--set", dest="settings", action="append", default=[])
    build.add_argument("--device", default="cpu")
    build.add_argument("--lossless-override", dest="lossless", action="append", default=[])
    page = commands.add_parser("readme")
    page.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "models":
        return models(args.suite, args.settings, args.device, args.lossless)
    return readme(args.out)


if __name__ == "__main__":
    from specmoe.errors import SpecmoeError

    try:
        raise SystemExit(main())
    except SpecmoeError as err:
        print(f"gpu_check.py: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
