#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# build.sh - build llama.cpp (CPU only, -march=native, Release) from the llama-cpp-python
# sdist on PyPI, outside the repository, for bench/llamacpp/compare.py to measure deras
# against. A benchmark-only dependency: nothing of llama.cpp is vendored, committed, or
# used by deras's build or tests.
#
#   bench/llamacpp/build.sh            # fetch + build once; later runs reuse the cache
#
# Environment:
#   DERAS_LLAMACPP_DIR      cache folder (default ~/.cache/deras/llama.cpp): the sdist is
#                           unpacked in $DIR/src, built in $DIR/build; binaries end up in
#                           $DIR/build/bin (llama-bench, llama-quantize, llama-server).
#   DERAS_LLAMACPP_VERSION  llama-cpp-python version (default 0.3.36: vendors llama.cpp
#                           0c1e570, the build issue 12 quotes).
#   DERAS_LLAMACPP_JOBS     build jobs (default: nproc).
# Cost: a ~75 MB download and a 10-25 minute build on 2 cores, once.
set -euo pipefail

DIR=${DERAS_LLAMACPP_DIR:-$HOME/.cache/deras/llama.cpp}
VER=${DERAS_LLAMACPP_VERSION:-0.3.36}
JOBS=${DERAS_LLAMACPP_JOBS:-$(nproc)}
BIN=$DIR/build/bin
STAMP=$DIR/build/.deras-built-$VER

if [[ -f $STAMP && -x $BIN/llama-bench && -x $BIN/llama-quantize && -x $BIN/llama-server ]]; then
    echo "llama.cpp $VER already built in $BIN" >&2
    exit 0
fi
mkdir -p "$DIR"
if [[ ! -f $DIR/src/.deras-$VER ]]; then
    rm -rf "$DIR/src" "$DIR/dl"
    python3 -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$VER" -d "$DIR/dl"
    mkdir -p "$DIR/src"
    tar xzf "$DIR"/dl/llama_cpp_python-"$VER".tar.gz -C "$DIR/src" --strip-components=1
    rm -rf "$DIR/dl"
    touch "$DIR/src/.deras-$VER"
fi
cmake -S "$DIR/src/vendor/llama.cpp" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >&2
cmake --build "$DIR/build" -j"$JOBS" --target llama-bench llama-quantize llama-server >&2
touch "$STAMP"
echo "llama.cpp $VER built in $BIN" >&2
