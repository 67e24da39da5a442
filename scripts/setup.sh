#!/usr/bin/env bash
# Create .venv and install localspec into it (editable). The first run compiles llama-cpp-python
# from source (about 5 minutes on 2 cores); pip caches the wheel, so later runs take seconds.
# Build for a GPU by exporting CMAKE_ARGS first, e.g. CMAKE_ARGS="-DGGML_CUDA=on" (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
extras=${LOCALSPEC_EXTRAS:+[$LOCALSPEC_EXTRAS]}
.venv/bin/python -m pip install -q -e ".$extras"
