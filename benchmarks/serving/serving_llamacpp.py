"""Serving benchmark against llama.cpp's llama-server, plain and with a draft model, on this machine.
Not a test: starts the servers, runs specmoe/suites/serving-llamacpp.toml against them, checks the stored
per-request draft counts against the servers' own logs, and writes the results.

    scripts/build_llama_server.sh            # /tmp/llama-server/build/bin/llama-server
    SPECMOE_LLAMA_SERVER=/tmp/llama-server/build/bin/llama-server taskset -c 1 \
        python -m benchmarks.serving.serving_llamacpp --db serving-llamacpp.db --server-cpus 0 \
        --out docs/results/cpu/serving

Each served model of the suite has a line in LAUNCH: which zoo model's GGUF the server loads, and
its draft and γ for an SD server. The port comes from the model's `url`, the alias from its
`model`; every server gets as many slots as the suite's largest concurrency, one thread, and the
CPUs of `--server-cpus` (pin this process elsewhere, with `taskset`, so client and servers do not
share a core). Only one server works at a time (server runs are measured one after another), so
they can share their CPUs.

Written under --out: `serving-llamacpp.csv` (`bench export` of the store), `summary.json` (`bench
summary --json`) and `summary.txt`, `audit.csv` (the rows in the study's schema, for `specmoe
audit`), `tables.md` (the report's speedup, latency and log-check tables), `log_check.json` (per
server: its `--version`, the stored per-request (accepted, drafted) against the server's log lines
and its /metrics totals, `specmoe.serving.server_log`) and `logs/<alias>-<port>.txt` (each
server's model, draft and slot lines and its draft-acceptance lines, paths under the home folder
written from `~`; the full logs stay beside the store).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from specmoe.bench.served_rows import stored_counts
from specmoe.bench.suite_run import run_suite
from specmoe.drafts import stored_gamma
from specmoe.report.summary_json import to_json
from specmoe.report.summary_table import build, format_text
from specmoe.results.export import export_records, write_records
from specmoe.results.store import RunRow, Store
from specmoe.serving.client import metrics_text
from specmoe.serving.llama_server import LlamaServerSpec, RunningServer, serving
from specmoe.serving.server_log import check_counts, logged_requests
from specmoe.suite.expand import expand
from specmoe.suite.load import load_suite
from specmoe.suite.types import ModelSpec, Suite
from specmoe.zoo.gguf import zoo_gguf
from specmoe.zoo.smollm2 import GGUF_NAME as SMOLLM2_GGUF
from specmoe.zoo.smollm2_draft import DRAFT_GGUF

BINARY_ENV = "SPECMOE_LLAMA_SERVER"
GGUF_TYPE = "q8_0"
CTX_PER_SLOT = 512  # positions per request: the longest factual prompt plus 64 new tokens fit
HOME = Path("~").expanduser()


@dataclass(frozen=True)
class Launch:
    zoo: str  # "bench", "trained" or "smollm2": which --*-zoo folder
    model: str  # the target's zoo name
    draft: str | None = None  # the draft's zoo name, for an SD server
    gamma: int | None = None  # draft tokens per round, with a draft


LAUNCH: dict[str, Launch] = {
    "moe": Launch("bench", "moe"),
    "moe-draft-xs": Launch("bench", "moe", "draft-xs", 4),
    "trained-moe": Launch("trained", "moe"),
    "trained-moe-draft-xs": Launch("trained", "moe", "draft-xs", 4),
    "smollm2": Launch("smollm2", "smollm2"),
    "smollm2-draft": Launch("smollm2", "smollm2", "draft", 4),
}


def launch_gguf(zoo: Path, kind: str, model: str) -> Path:
    """The GGUF a server loads: the bench and trained zoos export theirs (Q8_0); SmolLM2 is the
    packaged Q4_1 file and its distilled draft the Q8_0 twin `zoo build --preset smollm2-draft` wrote."""
    if kind != "smollm2":
        return zoo_gguf(zoo, model, GGUF_TYPE)
    path = zoo / (SMOLLM2_GGUF if model == "smollm2" else DRAFT_GGUF)
    if not path.is_file():
        fix = "run `specmoe zoo fetch smollm2` and `specmoe zoo build --preset smollm2-draft`"
        sys.exit(f"{path} is missing: {fix}")
    return path


def only_groups(suite: Suite, names: list[str] | None) -> Suite:
    """The suite cut to the named groups and the models they use (all of it when names is None)."""
    if not names:
        return suite
    unknown = sorted(set(names) - {g.name for g in suite.groups})
    if unknown:
        have = ", ".join(g.name for g in suite.groups)
        sys.exit(f"{suite.path}: no group {', '.join(unknown)}; it has {have}")
    groups = tuple(g for g in suite.groups if g.name in names)
    used = {m for g in groups for m in (*g.target, *g.draft)}
    models = {name: m for name, m in suite.models.items() if name in used}
    return replace(suite, groups=groups, models=models)


def served_models(suite: Suite) -> list[ModelSpec]:
    return [m for m in suite.models.values() if m.server is not None]


def server_specs(suite: Suite, zoos: dict[str, Path], cpus: str | None) -> list[LlamaServerSpec]:
    """One llama-server per served model of the suite, as LAUNCH describes it."""
    slots = max(max(g.concurrency or [1]) for g in suite.groups)
    specs = []
    for model in served_models(suite):
        if model.name not in LAUNCH:
            sys.exit(f"{suite.path}: model '{model.name}' has no line in LAUNCH of {__file__}; add one")
        launch = LAUNCH[model.name]
        port = re.fullmatch(r"http://127\.0\.0\.1:(\d+)", model.server.url)
        if port is None:
            sys.exit(
                f"{suite.path}: model '{model.name}': url must be http://127.0.0.1:PORT to be started here"
            )
        zoo = zoos[launch.zoo]
        specs.append(
            LlamaServerSpec(
                alias=model.server.model,
                port=int(port[1]),
                model=launch_gguf(zoo, launch.zoo, launch.model),
                draft=None if launch.draft is None else launch_gguf(zoo, launch.zoo, launch.draft),
                gamma=launch.gamma,
                parallel=slots,
                ctx=slots * CTX_PER_SLOT,
                cpus=cpus,
            )
        )
    return specs


def spec_decode_totals(spec: LlamaServerSpec) -> dict[str, float]:
    """llama-server's server-wide spec-decode counters (`--metrics`), warm-ups included."""
    text = metrics_text(spec.server) or ""
    found = re.findall(r"^llamacpp:(spec_decode_num_\w+_total) ([0-9.e+]+)$", text, flags=re.M)
    return {name: float(value) for name, value in found}


def warmup_requests(suite: Suite, url: str) -> int:
    """Requests the suite's warm-ups send to the server at `url` when run in one process (each
    configuration warms up once, `specmoe.bench.served.ServedRunner`)."""
    seen: dict[str, int] = {}
    for spec in expand(suite):
        model = spec.draft_model if spec.arm == "sd" else spec.target_model
        if model is not None and model.server is not None and model.server.url == url:
            seen[spec.config_key] = spec.warmup * (spec.requests or spec.concurrency or 1)
    return sum(seen.values())


def server_rows(rows: list[RunRow], url: str) -> list[RunRow]:
    return [r for r in rows if r.env.get("server_url") == url]


def log_check(suite: Suite, rows: list[RunRow], running: RunningServer, totals: dict[str, float]) -> dict:
    text = running.log.read_text(errors="replace")
    logged = logged_requests(text)
    check = check_counts(
        logged, stored_counts(server_rows(rows, running.spec.url)), warmup_requests(suite, running.spec.url)
    )
    return {
        "alias": running.spec.alias,
        "url": running.spec.url,
        "draft": None if running.spec.draft is None else running.spec.draft.name,
        "gamma": stored_gamma(running.spec.gamma),  # 0 without a draft, as the runs are stored
        **check.as_dict(),
        "metrics": totals,
        # /metrics counts every request (warm-ups too), as the log does: the two must agree.
        "metrics_agree_with_log": metrics_agree(totals, check.logged_accepted, check.logged_drafted),
    }


def metrics_agree(totals: dict[str, float], accepted: int, drafted: int) -> bool:
    drafted_total = totals.get("spec_decode_num_draft_tokens_total", 0.0)
    return drafted_total == drafted and totals.get("spec_decode_num_accepted_tokens_total", 0.0) == accepted


def log_excerpt(running: RunningServer) -> str:
    """The server's model, draft and slot lines and its draft-acceptance lines."""
    keep = re.compile(r"load_model: |loading draft model|draft acceptance = ")
    lines = running.log.read_text(errors="replace").splitlines()
    return "\n".join(line for line in lines if keep.search(line)) + "\n"


def study_schema(rows: list[RunRow]) -> list[dict]:
    """The rows in the MoE SD study's CSV schema, for `specmoe audit`: an SD row's claimed speedup is
    its tokens/s over its paired baseline's (same configuration and repeat)."""
    baseline = {(r.config_key, r.repeat): r for r in rows if r.arm == "baseline"}
    out = []
    for r in rows:
        paired = baseline.get((r.baseline_key, r.repeat))
        sd = r.arm == "sd"
        out.append(
            {
                "job_id": r.run_id,
                "target_model": r.config["target"],
                "draft_model": r.config["draft"] if sd else "none",
                "draft_len": r.config["gamma"] if sd else "",
                "tokens_per_sec": r.tokens_per_s,
                "draft_acceptance_rate": "" if r.acceptance_rate is None else r.acceptance_rate,
                # A baseline's speedup over itself is 1 by definition; the audit checks it is not above.
                "speedup_vs_baseline": (r.tokens_per_s / paired.tokens_per_s if paired else "")
                if sd
                else 1.0,
            }
        )
    return out


def server_version(binary: str) -> str:
    done = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    return " ".join((done.stdout + done.stderr).split())


def load_label(row: dict) -> str:
    """c=N for a closed loop, R req/s (at most N in flight) for an open one."""
    rate = row["request_rate"]
    return f"c={row['concurrency']}" if rate is None else f"{rate:g} req/s, ≤{row['concurrency']} in flight"


def _ms(values: dict[str, float]) -> str:
    return " / ".join(f"{values[p] * 1e3:.2f}" for p in ("p50", "p90", "p99"))


def tables_markdown(summary: dict, checks: list[dict]) -> str:
    """The report's three tables from `bench summary --json` and the log checks."""
    lines = [
        "<!-- Written by benchmarks/serving/serving_llamacpp.py; do not edit. -->",
        "| target | draft | γ | load | requests/run | baseline tok/s | SD tok/s | speedup | acceptance |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["rows"]:
        accept = "–" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.1%}"
        lines.append(
            f"| {r['target']} | {r['draft']} | {r['gamma']} | {load_label(r)} | {r['requests']} "
            f"| {r['baseline_tokens_per_s']:.1f} | {r['sd_tokens_per_s']:.1f} "
            f"| {r['speedup']['text']} | {accept} |"
        )
    lines += [
        "",
        "| target | arm | load | runs | requests | TTFT p50 / p90 / p99 ms | TPOT p50 / p90 / p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summary["latency"]:
        arm = r["draft"] or "plain"
        lines.append(
            f"| {r['target']} | {arm} | {load_label(r)} | {r['runs']} | {r['tpot_requests']} "
            f"| {_ms(r['ttft_s'])} | {_ms(r['tpot_s'])} |"
        )
    lines += [
        "",
        "| server | draft | stored requests that drafted | in the log | matched | log lines beyond "
        "(warm-up requests sent) | accepted / drafted, stored | log | /metrics | verify steps (/metrics) "
        "| agrees |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        m = c["metrics"]
        metrics = (
            f"{m.get('spec_decode_num_accepted_tokens_total', 0):.0f} / "
            f"{m.get('spec_decode_num_draft_tokens_total', 0):.0f}"
        )
        agrees = "yes" if c["agrees"] and c["metrics_agree_with_log"] else "NO"
        lines.append(
            f"| {c['url']} | {c['draft'] or '–'} | {c['stored']} | {c['logged']} | {c['matched']} "
            f"| {c['extra']} ({c['warmup_requests']}) | {c['stored_accepted']} / {c['stored_drafted']} "
            f"| {c['logged_accepted']} / {c['logged_drafted']} | {metrics} "
            f"| {m.get('spec_decode_num_drafts_total', 0):.0f} | {agrees} |"
        )
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, rows: list[RunRow], checks: list[dict], excerpts: dict[str, str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    columns, records = export_records(rows)
    write_records(out / "serving-llamacpp.csv", columns, records, "csv")
    table = build(rows)
    (out / "summary.json").write_text(json.dumps(to_json(table), ensure_ascii=False, indent=1) + "\n")
    (out / "summary.txt").write_text(format_text(table) + "\n")
    audit_rows = study_schema(rows)
    with (out / "audit.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(audit_rows[0]))
        writer.writeheader()
        writer.writerows(audit_rows)
    (out / "log_check.json").write_text(json.dumps(checks, indent=1) + "\n")
    (out / "tables.md").write_text(tables_markdown(to_json(table), checks))
    (out / "logs").mkdir(exist_ok=True)
    for name, text in excerpts.items():
        (out / "logs" / name).write_text(text.replace(str(HOME), "~"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=Path("specmoe/suites/serving-llamacpp.toml"))
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument("--logs", type=Path, default=None, help="full server logs (default: <db>.logs)")
    parser.add_argument("--server-cpus", default=None, help="taskset CPU list for the servers, e.g. 0")
    parser.add_argument("--bench-zoo", type=Path, default=HOME / ".cache/specmoe/zoo/bench-seed0")
    parser.add_argument("--trained-zoo", type=Path, default=HOME / ".cache/specmoe/zoo/trained-seed0")
    parser.add_argument("--smollm2-zoo", type=Path, default=HOME / ".cache/specmoe/zoo/smollm2")
    parser.add_argument("--groups", nargs="+", default=None, help="only these groups (default: all)")
    args = parser.parse_args()
    binary = os.environ.get(BINARY_ENV)
    if not binary:
        sys.exit(f"set {BINARY_ENV} to a llama-server binary (scripts/build_llama_server.sh builds one)")
    suite = only_groups(load_suite(args.suite), args.groups)
    zoos = {"bench": args.bench_zoo, "trained": args.trained_zoo, "smollm2": args.smollm2_zoo}
    specs = server_specs(suite, zoos, args.server_cpus)
    logs = args.logs or args.db.with_suffix(".logs")
    with serving(binary, specs, logs) as running:
        rows = run_suite(suite, args.db, None)
        totals = [spec_decode_totals(r.spec) for r in running]
    with Store(args.db) as store:
        rows = store.rows(suite.name)
    version = server_version(binary)
    checks = [
        {"server": version, **log_check(suite, rows, r, t)} for r, t in zip(running, totals, strict=True)
    ]
    excerpts = {f"{r.spec.alias}-{r.spec.port}.txt": log_excerpt(r) for r in running}
    write_outputs(args.out, rows, checks, excerpts)
    for check in checks:
        print(f"{check['alias']} {check['url']}: log check {'agrees' if check['agrees'] else 'DISAGREES'}")
    return 0 if all(c["agrees"] and c["metrics_agree_with_log"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
