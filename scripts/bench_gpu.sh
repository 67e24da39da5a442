#!/usr/bin/env bash
# Scenario (c): the light pair with every layer of both models on the GPU (ours and llama.cpp's), as
# run on the lent H100 (README, Performance: GPU): HumanEval, the copy set, prose at T=0 and T=1, side
# by side with llama.cpp built with CUDA from the same vendored source; then the exactness tests on
# real llama.cpp with their models offloaded. Needs localspec built for the GPU
# (CMAKE_ARGS="-DGGML_CUDA=on" ./scripts/setup.sh, see README); llama.cpp's tools are built here with
# CMAKE_ARGS (default: CUDA). Extra arguments go to bench.py. Results: bench-out/gpu/<set>.
set -euo pipefail
cd "$(dirname "$0")/.."
CMAKE_ARGS=${CMAKE_ARGS-"-DGGML_CUDA=ON $(./scripts/llama_cmake_args.sh)"} JOBS=${JOBS:-$(nproc)} ./scripts/build_llamacpp.sh \
    || echo "llama.cpp tools not built: their scenarios will be skipped" >&2
PY=${PYTHON:-.venv/bin/python}
DIR=${BENCH_OUT:-bench-out/gpu}
B=("$PY" scripts/bench.py --pair qwen2.5-coder --gpu)
"${B[@]}" --n-prompts 4 --max-tokens 128 --temperature 0 --out "$DIR/humaneval-t0" \
    --scenarios plain,model:auto,hybrid:auto,model:4,llamacpp:4,llamacpp:8 "$@"
"${B[@]}" --prompt-set copy --chat --n-prompts 4 --max-tokens 160 --temperature 0 --out "$DIR/copy-t0" \
    --scenarios plain,ngram:auto,hybrid:auto,llamacpp-ngram:16,llamacpp-ngram:48 "$@"
"${B[@]}" --prompts scripts/prompts/prose.jsonl --chat --n-prompts 6 --max-tokens 128 --temperature 0 --out "$DIR/prose-t0" \
    --scenarios plain,model:auto,hybrid:auto,ngram:auto,llamacpp:4 "$@"
"${B[@]}" --prompts scripts/prompts/prose.jsonl --chat --n-prompts 6 --max-tokens 128 --temperature 1 --out "$DIR/prose-t1" \
    --scenarios plain,model:auto,hybrid:auto,llamacpp:4 "$@"
# The same proofs as on CI's CPU, with the models on the GPU (pytest plugins that import numpy
# before localspec are kept out, as on the machine this was first run on).
LOCALSPEC_TEST_GPU_LAYERS=999 PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "$PY" -m pytest -q -m slow \
    tests/test_backend_sampling.py tests/test_llama_tree.py tests/test_realpair.py tests/test_llama_layer.py
# What tells apart the explanations of the H100's filtered-chain failures (README, GPU): batch-shape
# numerics would show without any chain, and with numpy rows in the chi-square too.
"$PY" scripts/gpu_exactness_check.py 999
"$PY" scripts/gpu_chisq_check.py 999 1000
