#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# run.sh SOURCE_ROOT WORK_DIR MODEL - copy the engine's folders (and nothing else of the
# project) into WORK_DIR, build them as a project of their own (CMakeLists.txt here), and
# run the result on MODEL. Exit status: the build's or the program's.
set -eu
src=$1 work=$2 model=$3
rm -rf "$work"
mkdir -p "$work/src/common" "$work/src/kernels/cuda"
cp -r "$src/common/base" "$src/common/checkpoint" "$src/common/request" "$src/common/tokenizer" \
   "$src/common/grammar" "$work/src/common/"
cp "$src"/kernels/*.c "$src"/kernels/*.h "$work/src/kernels/"
cp -r "$src/kernels/cpu" "$work/src/kernels/"
cp "$src/kernels/cuda/cuda_loader.c" "$src/kernels/cuda/cuda_ops.h" "$src/kernels/cuda/cuda_plugin.h" \
   "$work/src/kernels/cuda/"
cp -r "$src/engine" "$work/src/"
cp "$src/tests/engine_alone/CMakeLists.txt" "$src/tests/engine_alone/main.c" "$work/src/"
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release > "$work/cmake.log"
cmake --build "$work/build" -j 2 > "$work/build.log" || { cat "$work/build.log"; exit 1; }
OMP_NUM_THREADS=2 "$work/build/engine_alone" "$model"
