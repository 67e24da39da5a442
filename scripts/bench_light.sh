#!/usr/bin/env bash
# Scenario (a): the light pair (Qwen2.5-Coder 1.5B + 0.5B, Q4_K_M) on the CPU, T=0 then T=1 with top-k 40:
# target-only, localspec at γ 1..8 and auto, and llama.cpp's speculative-simple at n_max 2, 4, 8 --
# alternating per prompt in one process. About 12 minutes on 2 cores. Extra arguments go to bench.py
# (e.g. --n-prompts 3 --max-tokens 64). Results: bench-out/light/t0 and t1 (BENCH_OUT moves them).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build_llamacpp.sh || echo "llama.cpp tools not built: their scenarios will be skipped" >&2
PY=${PYTHON:-.venv/bin/python}
DIR=${BENCH_OUT:-bench-out/light}
S=plain,model:1,model:2,model:3,model:4,model:5,model:6,model:7,model:8,model:auto,hybrid:auto
S=$S,llamacpp:2,llamacpp:4,llamacpp:8
"$PY" scripts/bench.py --pair qwen2.5-coder --scenarios "$S" --temperature 0 --out "$DIR/t0" "$@"
"$PY" scripts/bench.py --pair qwen2.5-coder --scenarios "$S" --temperature 1 --top-k 40 --out "$DIR/t1" "$@"
