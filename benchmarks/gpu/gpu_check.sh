#!/usr/bin/env bash
# specmoe on a CUDA GPU, checked in one command: the hardware probe, SD's losslessness on the GPU in
# float64, float32, bfloat16 and compiled, MoESD's sweep at real layer shapes (specmoe/suites/moesd-gpu.toml),
# the performance model profiled, fitted and asked on the GPU, and `advise --config` for the same
# models beside the measurements. Everything goes under one folder, summarised in its README.md.
#
#   benchmarks/gpu/gpu_check.sh [--out DIR]     # on a machine with a CUDA GPU; meant to take <= 8 minutes
#   benchmarks/gpu/gpu_check.sh --smoke [--out DIR]   # the same steps on the CPU at tiny widths
#   benchmarks/gpu/gpu_check.sh --steps models,suite ...   # only these steps (or groups: lossless, advise)
#   benchmarks/gpu/gpu_check.sh --set 'batch_size=[1, 16]' ...  # passed on to the suite (repeatable)
#
# The models are random-weight, built from docs/perf-examples configs on the GPU the first time and
# cached under ~/.cache/specmoe/zoo/configs (about 53 GB of disk in bf16; set XDG_CACHE_HOME to put
# them elsewhere). docs/gpu-check.md describes each step. A step that fails is recorded and the others still run (a
# step that needs a failed one is skipped); the exit status is 1 if any step was not ok.
# SPECMOE (default: specmoe) and PYTHON (default: python3) name the commands to run.
set -euo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }

MODE=full
OUT=""
STEPS=""
EXTRA_SETS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --smoke) MODE=smoke ;;
    --out) [[ $# -ge 2 ]] || { echo "gpu_check.sh: --out needs a folder; see --help" >&2; exit 2; }; OUT=$2; shift ;;
    --steps) [[ $# -ge 2 ]] || { echo "gpu_check.sh: --steps needs a list; see --help" >&2; exit 2; }; STEPS=$2; shift ;;
    --set) [[ $# -ge 2 ]] || { echo "gpu_check.sh: --set needs KEY=VALUE; see --help" >&2; exit 2; }; EXTRA_SETS+=("$2"); shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
  shift
done

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EX="$ROOT/docs/perf-examples"
SUITE="$ROOT/specmoe/suites/moesd-gpu.toml"
PYTHON=${PYTHON:-python3}
# The Python half is the module benchmarks.gpu.gpu_check of this checkout, wherever the script runs from.
CHECK=(env "PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m benchmarks.gpu.gpu_check)
read -r -a SPECMOE <<< "${SPECMOE:-specmoe}"
OUT=${OUT:-gpu-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [[ -n "$(ls -A "$OUT")" ]]; then
  echo "gpu_check.sh: $OUT is not empty; pass a new --out folder" >&2
  exit 2
fi

BATCHES=1,4,16,64,128
if [[ $MODE == smoke ]]; then
  touch "$OUT/SMOKE"
  DEVICE=cpu
  ENGINE=hf-eager-cpu
  HW=(--read-mib 64 --repeats 3)
  NEW_TOKENS=8
  # Each model keeps its architecture, expert count, top-k and vocabulary; widths and depth are cut.
  OLMOE_CUT="hidden_size = 64, intermediate_size = 32, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 4"
  DENSE_CUT="vocab_size = 50304, hidden_size = 64, intermediate_size = 128, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 4"
  QWEN3_MOE_CUT="hidden_size = 64, moe_intermediate_size = 16, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 16"
  DRAFT_CUT="hidden_size = 32, intermediate_size = 64, num_hidden_layers = 2, num_attention_heads = 2, num_key_value_heads = 1, head_dim = 16"
  SETS=(
    device=cpu prompts=1 warmup=0 "max_new_tokens=$NEW_TOKENS" "batch_size=[1, 4]" "gamma=[2]"
    "models.olmoe.overrides={$OLMOE_CUT}"
    "models.dense.overrides={$DENSE_CUT}"
    "models.qwen3-moe.overrides={$QWEN3_MOE_CUT}"
    "models.draft-olmoe.overrides={vocab_size = 50304, $DRAFT_CUT}"
    "models.draft-qwen3.overrides={$DRAFT_CUT}"
  )
  BATCHES=1,4
  LOSSLESS_CUT=(hidden_size=64 intermediate_size=32 num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=4)
  PROFILE=(--batch 1,4 --tokens 1,2,3 --context 16 --repeats 2 --warmup 1)
  DRAFT_PROFILE=(--batch 1,4 --tokens 1,2 --context 16 --repeats 2 --warmup 1)
  # Inductor takes minutes to compile even a tiny model on a small CPU: the smoke runs the compiled
  # path's static-cache code with torch.compile turned off (the GPU run compiles).
  COMPILE_ENV=(env TORCHDYNAMO_DISABLE=1)
  # A shared CPU disturbs every run; the noise guard would measure each again and then leave it out.
  export SPECMOE_NOISE_GUARD=0
else
  DEVICE=cuda
  ENGINE=hf-eager
  HW=()
  NEW_TOKENS=32
  SETS=()
  # OLMoE-1B-7B's layers at full width, 2 of its 16: the GPU's kernels at real shapes, small enough
  # for float64 (8 GB) and a second copy as its own draft.
  LOSSLESS_CUT=(num_hidden_layers=2)
  PROFILE=(--batch "$BATCHES" --tokens 1,2,3,4,5 --context 128 --repeats 5 --warmup 2)
  DRAFT_PROFILE=(--batch "$BATCHES" --tokens 1,2 --context 128 --repeats 5 --warmup 2)
  COMPILE_ENV=()
fi
SET_ARGS=()
for setting in ${SETS[@]+"${SETS[@]}"} ${EXTRA_SETS[@]+"${EXTRA_SETS[@]}"}; do SET_ARGS+=(--set "$setting"); done

if [[ $MODE == full ]]; then
  if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu_check.sh: torch sees no CUDA GPU here; run it where one is (with torch's CUDA build), or pass --smoke" >&2
    rmdir "$OUT" 2> /dev/null || true
    exit 2
  fi
  CACHE="${XDG_CACHE_HOME:-$HOME/.cache}"
  mkdir -p "$CACHE"
  FREE_GB=$(($(df -Pk "$CACHE" | awk 'NR == 2 {print $4}') / 1000000))
  if ((FREE_GB < 55)); then
    echo "[gpu_check] $CACHE has $FREE_GB GB free; building the models takes about 53 GB the first time" >&2
  fi
fi

printf 'step\tstatus\tseconds\toutput\tcommand\n' > "$OUT/steps.tsv"
FAILED=0

# wanted NAME: whether --steps (default: every step) names the step or its group ("lossless" for
# lossless-float32-self, "profile" for profile-draft).
wanted() {
  [[ -z $STEPS ]] && return 0
  local item
  for item in ${STEPS//,/ }; do
    [[ $1 == "$item" || $1 == "$item"-* ]] && return 0
  done
  return 1
}

# run_step NAME OUTPUT_FILE COMMAND...: stdout to OUTPUT_FILE, stderr to NAME.log, one steps.tsv line;
# a step --steps leaves out is not run and fails nothing (its dependants are skipped).
run_step() {
  local name=$1 output=$2
  shift 2
  wanted "$name" || return 1
  local started code=0 status=ok ms
  started=$(date +%s%N)
  echo "[gpu_check] $name: $*" >&2
  "$@" > "$OUT/$output" 2> "$OUT/$name.log" || code=$?
  if ((code != 0)); then
    status="failed (exit $code)"
    FAILED=1
    echo "[gpu_check] $name failed; see $OUT/$name.log" >&2
  fi
  ms=$((($(date +%s%N) - started) / 1000000))
  printf '%s\t%s\t%d.%d\t%s\t%s\n' "$name" "$status" $((ms / 1000)) $((ms % 1000 / 100)) "$output" "$*" >> "$OUT/steps.tsv"
  [[ $status == ok ]]
}

skip_step() {
  wanted "$1" || return 0
  printf '%s\t%s\t0.0\t\t\n' "$1" "skipped (needs $2)" >> "$OUT/steps.tsv"
  FAILED=1
}

{
  echo "mode: $MODE, device: $DEVICE, started $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  "$PYTHON" -c 'import platform, torch, transformers; print("python", platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__); print("cuda", torch.version.cuda, [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])'
  git -C "$ROOT" rev-parse --short HEAD 2> /dev/null | sed 's/^/specmoe commit /' || true
} > "$OUT/env.txt" 2>&1 || true

run_step hw hw.txt "${SPECMOE[@]}" hw --device "$DEVICE" ${HW[@]+"${HW[@]}"} --out "$OUT/hw.json" || true

# The suite's models, built as `bench run` builds them (the same folders), and the lossless checks'
# target (`lossless`, OLMoE with LOSSLESS_CUT), one "name<TAB>folder" a line.
declare -A MODEL
LOSSLESS_OVERRIDES=()
for item in "${LOSSLESS_CUT[@]}"; do LOSSLESS_OVERRIDES+=(--lossless-override "$item"); done
if run_step models models.tsv "${CHECK[@]}" models "$SUITE" --device "$DEVICE" \
  "${LOSSLESS_OVERRIDES[@]}" ${SET_ARGS[@]+"${SET_ARGS[@]}"}; then
  while IFS=$'\t' read -r name folder; do MODEL[$name]=$folder; done < "$OUT/models.tsv"
fi

# Lossless: SD against plain decoding in each dtype, eager and compiled. The random draft is rejected
# almost always (float64: the rejection path exactly); the target as its own draft accepts every
# token in exact arithmetic (the acceptance path; in bf16 its near-ties).
if [[ -n "${MODEL[lossless]:-}" && -n "${MODEL[draft-olmoe]:-}" ]]; then
  TARGET=${MODEL[lossless]}
  PROMPTS=(--prompt "def fibonacci(n):" --prompt "The capital of France is" --prompt "Step 1: add 17 and 25." --prompt "请介绍长城。")
  GEN=("${SPECMOE[@]}" generate --target "$TARGET" --device "$DEVICE" --max-new-tokens "$NEW_TOKENS" --gamma 4 --check --json "${PROMPTS[@]}")
  run_step lossless-float64-draft lossless-float64-draft.json "${GEN[@]}" --draft "${MODEL[draft-olmoe]}" --dtype float64 || true
  for dtype in float32 bfloat16; do
    run_step "lossless-$dtype-self" "lossless-$dtype-self.json" "${GEN[@]}" --draft "$TARGET" --dtype "$dtype" || true
  done
  run_step lossless-compiled-self lossless-compiled-self.json ${COMPILE_ENV[@]+"${COMPILE_ENV[@]}"} "${GEN[@]}" \
    --draft "$TARGET" --dtype bfloat16 --compile || true
else
  for check in float64-draft float32-self bfloat16-self compiled-self; do skip_step "lossless-$check" models; done
fi

# MoESD's sweep; `bench run` ends with the result table (suite.txt), the rows go to a CSV.
if run_step suite suite.txt "${SPECMOE[@]}" bench run "$SUITE" --db "$OUT/moesd-gpu.db" ${SET_ARGS[@]+"${SET_ARGS[@]}"}; then
  run_step export export.txt "${SPECMOE[@]}" bench export --db "$OUT/moesd-gpu.db" --out "$OUT/moesd-gpu.csv" || true
else
  skip_step export suite
fi

# The performance model on the same GPU: OLMoE and its draft profiled, the target fitted, predictions.
if [[ -n "${MODEL[olmoe]:-}" && -n "${MODEL[draft-olmoe]:-}" ]]; then
  PROFILED=1
  run_step profile olmoe.profile.txt "${SPECMOE[@]}" profile --model "${MODEL[olmoe]}" --device "$DEVICE" --dtype bfloat16 \
    "${PROFILE[@]}" --hw "$OUT/hw.json" --out "$OUT/olmoe.profile.json" || PROFILED=0
  run_step profile-draft draft.profile.txt "${SPECMOE[@]}" profile --model "${MODEL[draft-olmoe]}" --device "$DEVICE" \
    --dtype bfloat16 "${DRAFT_PROFILE[@]}" --out "$OUT/draft.profile.json" || PROFILED=0
  if [[ $PROFILED == 0 ]]; then
    skip_step fit profile
    skip_step predict profile
  elif run_step fit olmoe.fit.txt "${SPECMOE[@]}" model fit "$OUT/olmoe.profile.json" --out "$OUT/olmoe.fit.json"; then
    run_step predict predict.json "${SPECMOE[@]}" model predict "$OUT/olmoe.fit.json" --batch "$BATCHES" --gamma 1,2,3,4 \
      --alpha 0.6,0.9 --draft "$OUT/draft.profile.json" --json || true
  else
    skip_step predict fit
  fi
else
  for step in profile profile-draft fit predict; do skip_step "$step" models; done
fi

# advise from the configs alone (the built folders' config.json: the suite's overrides applied).
for pair in olmoe:draft-olmoe dense:draft-olmoe qwen3-moe:draft-qwen3; do
  target=${pair%%:*} draft=${pair#*:}
  if [[ -n "${MODEL[$target]:-}" && -n "${MODEL[$draft]:-}" ]]; then
    run_step "advise-$target" "advise-$target.txt" "${SPECMOE[@]}" advise --config "${MODEL[$target]}/config.json" \
      --draft-config "${MODEL[$draft]}/config.json" --hardware "$OUT/hw.json" --engine "$ENGINE" --dtype bfloat16 \
      --batch "$BATCHES" --acceptance 0.9 --acceptance-kind alpha --output-tokens "$NEW_TOKENS" || true
  else
    skip_step "advise-$target" models
  fi
done

"${CHECK[@]}" readme "$OUT" > /dev/null
echo "$OUT/README.md"
exit "$FAILED"
