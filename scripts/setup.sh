#!/usr/bin/env bash
# Create .venv and install localspec into it (editable). The first run compiles llama-cpp-python
# from source (about 5 minutes on 2 cores); pip caches the wheel, so later runs take seconds.
# Build for a GPU by exporting CMAKE_ARGS first, e.g. CMAKE_ARGS="-DGGML_CUDA=on" (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# On an AMX CPU, build llama.cpp without AMX (its AMX matmul segfaults: see llama_cmake_args.sh).
# A CMAKE_ARGS of your own, even an empty one, wins.
no_amx=$(./scripts/llama_cmake_args.sh)
export CMAKE_ARGS=${CMAKE_ARGS-$no_amx}
extras=${LOCALSPEC_EXTRAS:+[$LOCALSPEC_EXTRAS]}
.venv/bin/python -m pip install -q -e ".$extras"
# A wheel pip cached from an earlier build may still hold AMX: rebuild it once from source.
if [ -n "$no_amx" ] && [ "$CMAKE_ARGS" = "$no_amx" ] && ! .venv/bin/python -c \
    "import sys, llama_cpp; sys.exit(b'AMX_INT8 = 1' in llama_cpp.llama_print_system_info())"; then
  echo "setup: the installed llama-cpp-python was built with AMX; rebuilding it without (~5 min)" >&2
  .venv/bin/python -m pip cache remove 'llama_cpp_python*' >/dev/null 2>&1 || true
  pin=$(grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)
  .venv/bin/python -m pip install -q --force-reinstall --no-deps "$pin"
fi
