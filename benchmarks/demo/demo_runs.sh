#!/usr/bin/env bash
# The README's main command from a fresh clone, RUNS times, then `specmoe demo --quick` from an empty
# cache, each timed; a summary of every run in docs/results/cpu/demo/runs.md and each run's console
# beside it. Run it on a quiet machine (nothing else using the cores): the demo's noise guard flags
# what another process disturbs, and this script records the load before each run.
#
#   bash benchmarks/demo/demo_runs.sh            # 5 runs, about 30 minutes on 2 cores
#   RUNS=1 OUT=/tmp/demo bash benchmarks/demo/demo_runs.sh
#   KEEP_WORK=1 bash benchmarks/demo/demo_runs.sh   # keep the clones and caches (about 2.4 GiB a run)
#
# Each run: `git clone` of this checkout's HEAD into a new folder, a new virtual environment, the
# README's `pip install -c constraints.txt -e .` (the installer's own download cache kept, as a user
# who has installed torch before), `specmoe demo` with an empty specmoe cache (so the zoos are built
# and trained), then `specmoe demo --quick` with another empty cache. EXTRA_PIP_ARGS (e.g.
# "--extra-index-url https://download.pytorch.org/whl/cpu") is passed to pip where its torch would
# otherwise be the CUDA build.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=${RUNS:-5}
OUT=${OUT:-$REPO/docs/results/cpu/demo}
EXTRA_PIP_ARGS=${EXTRA_PIP_ARGS:-}
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/specmoe-demo-runs.XXXXXX")
# Each run leaves a clone, a virtual environment and two caches: gigabytes that fill a disk in a
# few invocations. They go on exit, even a failed one, unless asked to stay.
if [ "${KEEP_WORK:-0}" != 1 ]; then
    trap 'rm -rf "$WORK"' EXIT
fi
# Relocating XDG_CACHE_HOME (for an empty specmoe cache) would relocate pip's cache too: keep pip's.
PIP_CACHE_DIR=${PIP_CACHE_DIR:-$("$PYTHON" -m pip cache dir 2>/dev/null || echo "$HOME/.cache/pip")}
export PIP_CACHE_DIR
mkdir -p "$OUT"

now() { date +%s.%N; }
seconds() { "$PYTHON" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$1" "$2"; }

# One JSON line about a finished demo: its configurations by verdict, from its own store.
summarise() {
    "$1" - "$2" <<'EOF'
import json, sys
from specmoe.results.store import Store
from specmoe.report.story import Outcome, accounts, outcome
with Store(sys.argv[1]) as store:
    rows = store.rows()
found = accounts(rows, keep_noisy=True)
cells = []
for a in found:
    c = a.comparison
    if c.no_number or c.impossible:
        continue
    cells.append({
        "config": f"{c.config.get('target')} + {c.config.get('draft')}, γ={c.config.get('gamma')}, B={c.config.get('batch_size')}",
        "speedup": round(c.speedup.value, 3),
        "low": round(c.speedup.low, 3),
        "high": round(c.speedup.high, 3),
        "n": c.speedup.n,
        "verdict": outcome(c.speedup).value,
        "busy": bool(c.busy),
    })
quiet_pays = [c for c in cells if c["verdict"] == Outcome.PAYS.value and not c["busy"]]
print(json.dumps({
    "runs": len(rows),
    "noisy_runs": sum(r.noisy for r in rows),
    "configurations": cells,
    "paid_whole_interval_above_1": len(quiet_pays),
}))
EOF
}

SUMMARY="$OUT/runs.jsonl"
: > "$SUMMARY"
echo "work folder: $WORK; results: $OUT"
for run in $(seq 1 "$RUNS"); do
    clone="$WORK/run-$run"
    load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
    echo "run $run of $RUNS (1-minute load average before it: $load)"
    git clone -q --no-local "$REPO" "$clone"
    cd "$clone"
    t0=$(now)
    # shellcheck disable=SC2086  # EXTRA_PIP_ARGS is a list of words
    "$PYTHON" -m venv .venv && . .venv/bin/activate && pip install -q -c constraints.txt -e . $EXTRA_PIP_ARGS
    t1=$(now)
    XDG_CACHE_HOME="$WORK/cache-$run" specmoe demo > "$OUT/run-$run.txt" 2> "$OUT/run-$run.log"
    t2=$(now)
    XDG_CACHE_HOME="$WORK/cache-quick-$run" specmoe demo --quick --out specmoe-demo-quick \
        > "$OUT/run-$run-quick.txt" 2> "$OUT/run-$run-quick.log"
    t3=$(now)
    main=$(summarise "$clone/.venv/bin/python" specmoe-demo/results.db)
    quick=$(summarise "$clone/.venv/bin/python" specmoe-demo-quick/results.db)
    deactivate
    "$PYTHON" - "$run" "$load" "$(seconds "$t0" "$t1")" "$(seconds "$t1" "$t2")" "$(seconds "$t2" "$t3")" \
        "$main" "$quick" >> "$SUMMARY" <<'EOF'
import json, sys
run, load, pip_s, demo_s, quick_s, main, quick = sys.argv[1:]
print(json.dumps({"run": int(run), "load_before": load, "pip_s": float(pip_s), "demo_s": float(demo_s),
                  "command_s": round(float(pip_s) + float(demo_s), 1), "quick_s": float(quick_s),
                  "demo": json.loads(main), "quick": json.loads(quick)}, ensure_ascii=False))
EOF
    # Shipped consoles name no folder of this machine.
    sed -i -e "s#$WORK#<work>#g" -e "s#$HOME#~#g" "$OUT/run-$run".txt "$OUT/run-$run".log "$OUT/run-$run"-quick.*
    tail -1 "$OUT/run-$run.txt"
    cd "$REPO"
done

"$PYTHON" - "$SUMMARY" "$OUT/runs.md" <<'EOF'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
lines = [
    "# `specmoe demo` from a fresh clone, run after run",
    "",
    "Written by `bash benchmarks/demo/demo_runs.sh`: each run clones the repository, installs it in a new",
    "virtual environment (the installer's download cache kept), runs `specmoe demo` with an empty",
    "specmoe cache, then `specmoe demo --quick` with another. Seconds of wall time; a configuration",
    "pays when its speedup's whole interval lies above 1× and none of its runs was flagged noisy.",
    "",
    "| run | load before | pip | `specmoe demo` | README command | `--quick` | configurations paying | noisy runs |",
    "|---|---|---|---|---|---|---|---|",
]
for r in runs:
    d = r["demo"]
    paying = [c for c in d["configurations"] if c["verdict"] == "pays" and not c["busy"]]
    lines.append(
        f"| {r['run']} | {r['load_before']} | {r['pip_s']:.0f} | {r['demo_s']:.0f} | **{r['command_s']:.0f}** | "
        f"{r['quick_s']:.0f} | {len(paying)} of {len(d['configurations'])} | {d['noisy_runs']} of {d['runs']} |"
    )
hits = sum(1 for r in runs if r["demo"]["paid_whole_interval_above_1"] >= 1)
lines += [
    "",
    f"Runs in which at least one configuration paid with its whole interval above 1×: {hits} of {len(runs)}.",
    "",
    "Each configuration's speedup, run by run (interval; BUSY where its runs were flagged):",
    "",
]
configs = list(dict.fromkeys(c["config"] for r in runs for c in r["demo"]["configurations"]))
lines += ["| configuration | " + " | ".join(f"run {r['run']}" for r in runs) + " |",
          "|---|" + "---|" * len(runs)]
for name in configs:
    cells = []
    for r in runs:
        found = [c for c in r["demo"]["configurations"] if c["config"] == name]
        c = found[0] if found else None
        cells.append("–" if c is None else
                     f"{c['speedup']:.2f}× [{c['low']:.2f}, {c['high']:.2f}] {c['verdict']}" + (" BUSY" if c["busy"] else ""))
    lines.append(f"| {name} | " + " | ".join(cells) + " |")
lines += ["", "Consoles: run-N.txt (stdout) and run-N.log (progress), run-N-quick.* for `--quick`.", ""]
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(lines))
print("\n".join(lines))
EOF
if [ "${KEEP_WORK:-0}" = 1 ]; then
    echo "work folder kept: $WORK (delete it when done)"
fi
