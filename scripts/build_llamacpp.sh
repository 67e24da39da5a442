#!/usr/bin/env bash
# Build llama.cpp's own `llama-speculative-simple`, `llama-speculative` (token trees), `llama-bench` and
# `ggml-rpc-server` (with the RPC backend) from the llama.cpp vendored in the
# llama-cpp-python 0.3.36 sdist -- the same code the bindings run -- into build/llama.cpp (git-ignored).
# scripts/bench.py runs them side by side with localspec. Binaries are never committed.
#
#   ./scripts/build_llamacpp.sh                                     # CPU, about 6 minutes on 2 cores
#   CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" JOBS=16 ./scripts/build_llamacpp.sh
#
# Idempotent: does nothing when both tools are built with the same CMAKE_ARGS. The sdist is fetched
# with pip (or taken from LLAMACPP_SDIST=path.tar.gz); an unpacked build/llama.cpp/src is reused as is.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
DEST=${LLAMACPP_DIR:-build/llama.cpp}
SRC=$DEST/src
BIN=$SRC/build/bin
STAMP=$DEST/cmake-args
# On an AMX CPU, without AMX, as the bindings are built (scripts/llama_cmake_args.sh: ggml's AMX matmul
# segfaults here); the same kernels on both sides of the comparison. A CMAKE_ARGS of your own wins.
# The RPC backend is always built: the latency benchmark runs llama.cpp's tools with --rpc.
CMAKE_ARGS="${CMAKE_ARGS-$(./scripts/llama_cmake_args.sh)} -DGGML_RPC=ON"
TARGETS="llama-bench llama-speculative-simple llama-speculative ggml-rpc-server"

if [ -x "$BIN/llama-speculative-simple" ] && [ -x "$BIN/llama-speculative" ] && [ -x "$BIN/ggml-rpc-server" ] \
    && [ -x "$BIN/llama-bench" ] && [ -f "$STAMP" ] \
    && [ "$(cat "$STAMP")" = "$CMAKE_ARGS" ]; then
    echo "llama.cpp tools already built in $BIN"
    exit 0
fi
mkdir -p "$DEST"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" != "$CMAKE_ARGS" ]; then
    rm -rf "$SRC/build" "$STAMP"  # another backend: configure from scratch
fi

if [ ! -f "$SRC/CMakeLists.txt" ]; then
    SDIST=${LLAMACPP_SDIST:-$DEST/llama_cpp_python-$VERSION.tar.gz}
    if [ ! -f "$SDIST" ]; then
        PYTHON=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
        "$PYTHON" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DEST"
    fi
    echo "unpacking vendor/llama.cpp from $SDIST"
    rm -rf "$SRC.part" && mkdir -p "$SRC.part"
    # Only the C++ sources: the test vocabularies (models/) and docs are not needed for these targets.
    tar -xzf "$SDIST" -C "$SRC.part" --strip-components=3 \
        --exclude='*/vendor/llama.cpp/models/*.gguf*' --exclude='*/vendor/llama.cpp/docs' \
        --exclude='*/vendor/llama.cpp/media' "llama_cpp_python-$VERSION/vendor/llama.cpp"
    mv "$SRC.part" "$SRC"
fi

# CMAKE_ARGS adds CPU flags or a backend (CUDA, Metal, Vulkan).
# shellcheck disable=SC2086
(cd "$SRC" && cmake -B build -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF $CMAKE_ARGS \
    && cmake --build build -j"${JOBS:-2}" --target $TARGETS)
printf '%s' "$CMAKE_ARGS" > "$STAMP"
echo "built in $BIN: $TARGETS"
