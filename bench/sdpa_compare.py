#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""sdpa_compare.py - PyTorch's scaled_dot_product_attention (flash backend) on the shapes
bench_cuda_kernels times, for the comparison the CUDA issue asks for.

    python3 bench/sdpa_compare.py [--reps 20]

Dense bf16 tensors (torch has no paged layout): prefill q (b, 32, n, d), k/v (b, 8, n, d),
causal; decode q (b, 32, 1, d) against k/v (b, 8, ctx, d). Grouped-query heads go through
enable_gqa=True when the flash backend takes it, else K/V are expanded to 32 heads (the
same FLOPs; more bytes, which matters only for decode) and the line says so. Chunked
prefill (queries at an offset into a longer context) is left out: SDPA's is_causal aligns
the mask top-left, so it would compute another function. Each figure is the median of
--reps launches timed with CUDA events after warm-up, on random data. One JSON object per
line on stdout, with the same "shape" strings as bench_cuda_kernels, so
bench/gpu_report.py can join them.
"""
import argparse
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

PREFILL = [(1, 4096, 32, 8, 128), (1, 4096, 32, 8, 64), (4, 2048, 32, 8, 128),
           (1, 16384, 32, 8, 128)]
DECODE = [(64, 4096, 32, 8, 128), (1, 32768, 32, 8, 128), (16, 4096, 32, 8, 128),
          (256, 1024, 32, 8, 128), (256, 4096, 32, 8, 128), (8, 16384, 32, 8, 128)]


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def sdpa(q, k, v, causal):
    """Run under the flash backend; returns (callable, how) or raises."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                        enable_gqa=True)
            return fn, "enable_gqa"
        except (RuntimeError, TypeError):
            rep = q.shape[1] // k.shape[1]
            ke = k.repeat_interleave(rep, dim=1)
            ve = v.repeat_interleave(rep, dim=1)
            F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)
            return (lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal),
                    "expanded_kv")


def run(kind, b, n_q, ctx, hq, hkv, d, reps):
    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(b, hq, n_q, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, hkv, ctx, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(b, hkv, ctx, d, device="cuda", dtype=torch.bfloat16, generator=g)
    shape = f"batch {b} ctx {ctx} q {n_q} heads {hq}/{hkv} hd {d} bf16"
    line = {"kernel": f"torch_sdpa_flash_{kind}", "shape": shape}
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            fn, how = sdpa(q, k, v, causal=(kind == "prefill"))
            line["ms"] = round(timed(fn, reps), 5)
            line["how"] = how
    except Exception as e:  # report, never hide: the join shows the reason
        line["error"] = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps(line), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_compare: torch sees no CUDA device", file=sys.stderr)
        return 77
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}),
          flush=True)
    for b, n, hq, hkv, d in PREFILL:
        run("prefill", b, n, n, hq, hkv, d, args.reps)
    for b, ctx, hq, hkv, d in DECODE:
        run("decode", b, 1, ctx, hq, hkv, d, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
