#!/usr/bin/env bash
# Scenario (b): the heavy target -- the same 1.5B weights stored F16 (qwen2.5-coder-1.5b-instruct-f16, derived
# from the Q4_K_M file by `localspec models convert`) -- with the catalog's 0.5B draft (its Q4_0 copy), on the CPU, T=0 then T=1
# with top-k 40: target-only, localspec at γ 2, 4, 8 and auto, llama.cpp's speculative-simple at n_max 2, 4, 8.
# About 14 minutes on 2 cores. Extra arguments go to bench.py. Results: bench-out/heavy/t0 and t1.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build_llamacpp.sh || echo "llama.cpp tools not built: their scenarios will be skipped" >&2
PY=${PYTHON:-.venv/bin/python}
DIR=${BENCH_OUT:-bench-out/heavy}
S=plain,model:2,model:4,model:8,model:auto,llamacpp:2,llamacpp:4,llamacpp:8
"$PY" scripts/bench.py --pair qwen2.5-coder-heavy --scenarios "$S" --temperature 0 --out "$DIR/t0" "$@"
"$PY" scripts/bench.py --pair qwen2.5-coder-heavy --scenarios "$S" --temperature 1 --top-k 40 --out "$DIR/t1" "$@"
