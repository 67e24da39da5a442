#!/usr/bin/env bash
# Scenario (c): scenario (a) with every layer of both models on the GPU (ours and llama.cpp's), T=0 then T=1
# with top-k 40, 10 prompts x 256 tokens. Needs localspec built for the GPU (CMAKE_ARGS="-DGGML_CUDA=on"
# ./scripts/setup.sh, see README); llama.cpp's tools are built here with CMAKE_ARGS (default: CUDA,
# without AMX on an AMX CPU).
# Extra arguments go to bench.py. Results: bench-out/gpu/t0 and t1.
set -euo pipefail
cd "$(dirname "$0")/.."
CMAKE_ARGS=${CMAKE_ARGS-"-DGGML_CUDA=ON $(./scripts/llama_cmake_args.sh)"} JOBS=${JOBS:-$(nproc)} ./scripts/build_llamacpp.sh \
    || echo "llama.cpp tools not built: their scenarios will be skipped" >&2
PY=${PYTHON:-.venv/bin/python}
DIR=${BENCH_OUT:-bench-out/gpu}
S=plain,model:1,model:2,model:3,model:4,model:5,model:6,model:7,model:8,model:auto,hybrid:auto
S=$S,llamacpp:2,llamacpp:4,llamacpp:8
ARGS=(--pair qwen2.5-coder --gpu --n-prompts 10 --max-tokens 256 --scenarios "$S")
"$PY" scripts/bench.py "${ARGS[@]}" --temperature 0 --out "$DIR/t0" "$@"
"$PY" scripts/bench.py "${ARGS[@]}" --temperature 1 --top-k 40 --out "$DIR/t1" "$@"
