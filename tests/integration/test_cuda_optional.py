#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_cuda_optional.py - one build for CPU and GPU hosts: the CUDA backend is a plugin.

Checks, on the build given with --build (made where nvcc was found, so the plugin exists):
  1. no program links the CUDA runtime, cuBLAS or NCCL (readelf NEEDED entries);
  2. with the CUDA libraries hidden (the dynamic loader run with --inhibit-cache and a
     library path of the system's own folders, so /usr/local/cuda* and ld.so.cache are out
     of reach), `deras generate --device cpu` on the test model gives transformers' greedy
     tokens, and `--device cuda:0` fails with exit 1 and a message naming the CUDA library
     that could not be loaded.
Exit 77 (skipped, with the reason) without the plugin or the test model.
"""
import argparse
import os
import subprocess
import sys

SYSTEM_LIBS = "/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu"
LOADER = "/lib64/ld-linux-x86-64.so.2"
PROMPT = "The capital of France is Paris. The capital of Germany is"


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(77)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    plugin = os.path.join(a.build, "kernels", "cuda", "libderas_cuda.so")
    if not os.path.exists(plugin):
        skip(f"no CUDA plugin at {plugin} (configured without nvcc)")
    model = os.environ.get("DERAS_TEST_MODEL", "")
    if not os.path.exists(model):
        skip(f"test model not found at '{model}'")
    progs = [os.path.join(a.build, p) for p in
             ("tools/deras", "tools/derasctl", "worker/deras-worker", "router/deras-router")]
    for p in progs:
        needed = subprocess.run(["readelf", "-d", p], capture_output=True, text=True,
                                check=True).stdout
        bad = [l for l in needed.splitlines() if "NEEDED" in l and
               any(n in l for n in ("libcudart", "libcublas", "libnccl", "libcuda."))]
        if bad:
            sys.exit(f"FAIL: {p} links CUDA libraries: {bad}")
    print(f"1. {len(progs)} programs, none links libcudart, libcublas or libnccl")

    deras = os.path.join(a.build, "tools", "deras")
    hidden = [LOADER, "--inhibit-cache", "--library-path", SYSTEM_LIBS, deras, "generate",
              "--model", model, "--prompt", PROMPT, "--max-tokens", "4", "--temperature", "0"]
    cpu = subprocess.run(hidden + ["--device", "cpu"], capture_output=True, text=True,
                         timeout=600)
    if cpu.returncode != 0 or cpu.stdout.rstrip("\n") != " Berlin. The capital":
        sys.exit(f"FAIL: CUDA libraries hidden, --device cpu: exit {cpu.returncode}, "
                 f"output {cpu.stdout!r}, stderr {cpu.stderr[-500:]!r}")
    print(f"2. CUDA libraries hidden, --device cpu: {cpu.stdout.strip()!r} (transformers' greedy)")
    gpu = subprocess.run(hidden + ["--device", "cuda:0"], capture_output=True, text=True,
                         timeout=600)
    if gpu.returncode != 1 or "libcudart.so" not in gpu.stderr:
        sys.exit(f"FAIL: CUDA libraries hidden, --device cuda:0: expected exit 1 naming "
                 f"libcudart.so, got exit {gpu.returncode}: {gpu.stderr[-500:]!r}")
    print(f"3. CUDA libraries hidden, --device cuda:0: exit 1, {gpu.stderr.strip()}")


if __name__ == "__main__":
    main()
