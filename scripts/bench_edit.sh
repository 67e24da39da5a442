#!/usr/bin/env bash
# Code editing, where the output repeats its input ("add type hints and a docstring", HumanEval solutions as
# input, chat template), light pair on the CPU, T=0: target-only, localspec's n-gram, model and hybrid
# drafters, and llama.cpp's ngram-simple (drafts of up to 16) and draft-simple (n_max 4, 8).
# About 8 minutes on 2 cores. Extra arguments go to bench.py. Results: bench-out/edit.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build_llamacpp.sh || echo "llama.cpp tools not built: their scenarios will be skipped" >&2
PY=${PYTHON:-.venv/bin/python}
S=plain,ngram:auto,model:auto,hybrid:auto,llamacpp-ngram:16,llamacpp:4,llamacpp:8
"$PY" scripts/bench.py --pair qwen2.5-coder --prompt-set edit --max-tokens 160 --scenarios "$S" --temperature 0 \
    --out "${BENCH_OUT:-bench-out/edit}" "$@"
