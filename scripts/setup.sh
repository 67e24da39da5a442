#!/usr/bin/env bash
# Create .venv and install localspec into it (editable). The first run compiles llama-cpp-python
# from source (about 5 minutes on 2 cores); pip caches the wheel, so later runs take seconds.
# Build for a GPU by exporting CMAKE_ARGS first, e.g. CMAKE_ARGS="-DGGML_CUDA=on" (see README); the RPC
# backend (-DGGML_RPC=ON: `localspec rpc-server`, --rpc) is always added.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# On an AMX CPU, build llama.cpp without AMX (its AMX matmul segfaults: see llama_cmake_args.sh).
# A CMAKE_ARGS of your own, even an empty one, wins.
no_amx=$(./scripts/llama_cmake_args.sh)
own_args=${CMAKE_ARGS+set}
export CMAKE_ARGS="${CMAKE_ARGS-$no_amx} -DGGML_RPC=ON"
extras=${LOCALSPEC_EXTRAS:+[$LOCALSPEC_EXTRAS]}
.venv/bin/python -m pip install -q -e ".$extras"
# pip's wheel cache is not keyed by CMAKE_ARGS: a wheel cached from an earlier build may hold AMX or
# lack RPC. Rebuild it once from source.
rebuild() {
  echo "setup: the installed llama-cpp-python $1; rebuilding it (~5 min)" >&2
  .venv/bin/python -m pip cache remove 'llama_cpp_python*' >/dev/null 2>&1 || true
  pin=$(grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)
  .venv/bin/python -m pip install -q --force-reinstall --no-deps "$pin"
}
if [ -n "$no_amx" ] && [ -z "$own_args" ] && ! .venv/bin/python -c \
    "import sys, llama_cpp; sys.exit(b'AMX_INT8 = 1' in llama_cpp.llama_print_system_info())"; then
  rebuild "was built with AMX"
fi
if ! .venv/bin/python -c "import sys, llama_cpp; sys.exit(not llama_cpp.llama_supports_rpc())"; then
  rebuild "lacks the RPC backend"
fi
