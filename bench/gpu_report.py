#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gpu_report.py - join bench_cuda_kernels and sdpa_compare JSON lines into the tables of
docs/benchmarks.md, and check the issue's two targets.

    python3 bench/gpu_report.py bench.jsonl sdpa.jsonl > summary.md

Table 1: every kernel against its floor (memory-bound: bytes over the measured copy
bandwidth; compute-bound: FLOPs over the measured cuBLAS bf16 rate). Table 2: attention
against torch SDPA's flash backend on the same shapes. Then the targets: decode attention
at batch 64, context 4,096, 32/8 heads, head dim 128 at >= 80% of copy bandwidth; prefill
at 4,096 tokens, head dim 128, causal within 1.25x of SDPA flash. Exit status 0 when both
hold, 1 otherwise (the tables are printed either way).
"""
import json
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def main():
    ours = load(sys.argv[1])
    torch_rows = load(sys.argv[2]) if len(sys.argv) > 2 else []
    head = next((r for r in ours if "device" in r), {})
    copy = next((r for r in ours if r.get("kernel") == "ceiling_copy"), {})
    gemm = next((r for r in ours if r.get("kernel") == "ceiling_gemm"), {})
    tdev = next((r for r in torch_rows if "device" in r), {})
    print(f"Device: {head.get('device', '?')} ({head.get('sms', '?')} SMs); torch "
          f"{tdev.get('torch', '?')} on {tdev.get('device', '?')}")
    print(f"Measured ceilings: copy {copy.get('gbps', float('nan')):.0f} GB/s (read + write), "
          f"cuBLAS bf16 {gemm.get('tflops', float('nan')):.0f} TFLOP/s (8192^3)\n")
    print("| kernel | shape | time (ms) | floor (ms) | achieved | fraction of floor |")
    print("|---|---|---:|---:|---:|---:|")
    for r in ours:
        if "fraction" not in r:
            continue
        ach = f"{r['gbps']:.0f} GB/s" if "gbps" in r else f"{r['tflops']:.0f} TFLOP/s"
        print(f"| {r['kernel']} | {r['shape']} | {r['ms']:.4f} | {r['floor_ms']:.4f} | {ach} | "
              f"{r['fraction']:.2f} |")
    print("\n| attention | shape | deras (ms) | torch SDPA flash (ms) | deras / torch |")
    print("|---|---|---:|---:|---:|")
    by_shape = {(r["kernel"].split("_")[-1], r["shape"]): r for r in torch_rows if "kernel" in r}
    for r in ours:
        if r.get("kernel") not in ("decode_attention", "prefill_attention", "prefill_attention_v2"):
            continue
        t = by_shape.get((r["kernel"].split("_")[0], r["shape"]))
        if not t:
            tcol, ratio = "n/a", "n/a"
        elif "ms" not in t:
            tcol, ratio = t.get("error", "failed"), "n/a"
        else:
            tcol = f"{t['ms']:.4f}" + (" (K/V expanded)" if t.get("how") == "expanded_kv" else "")
            ratio = f"{r['ms'] / t['ms']:.2f}"
        print(f"| {r['kernel']} | {r['shape']} | {r['ms']:.4f} | {tcol} | {ratio} |")

    ok = True
    dec = next((r for r in ours if r.get("kernel") == "decode_attention" and
                r["shape"] == "batch 64 ctx 4096 q 1 heads 32/8 hd 128 bf16"), None)
    # the faster of the two prefill variants (the report says which)
    pres = [r for r in ours if r.get("kernel") in ("prefill_attention", "prefill_attention_v2")
            and r["shape"] == "batch 1 ctx 4096 q 4096 heads 32/8 hd 128 bf16"]
    pre = min(pres, key=lambda r: r["ms"]) if pres else None
    print()
    if dec:
        good = dec["fraction"] >= 0.80
        ok &= good
        print(f"- decode target (>= 0.80 of copy bandwidth): {dec['fraction']:.2f} "
              f"{'MET' if good else 'NOT MET'}")
    else:
        ok = False
        print("- decode target: no measurement")
    t = by_shape.get(("prefill", pre["shape"])) if pre else None
    if pre and t and "ms" in t:
        ratio = pre["ms"] / t["ms"]
        good = ratio <= 1.25
        ok &= good
        print(f"- prefill target (<= 1.25 x SDPA flash): {ratio:.2f} x with {pre['kernel']} "
              f"{'MET' if good else 'NOT MET'}")
    else:
        ok = False
        print("- prefill target: no measurement (ours or torch's missing)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
