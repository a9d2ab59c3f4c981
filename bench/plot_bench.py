#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""plot_bench.py - pictures of `deras bench --samples` runs.

    bench/plot_bench.py --out DIR RUN.jsonl [RUN.jsonl ...]

writes DIR/latency_cdf.png (the CDFs of time to first token, time per output token and
end-to-end latency, one curve per run) and, with two or more Poisson runs (--rate > 0),
DIR/throughput_vs_load.png (output tokens/s and TTFT p50/p99 against the offered load,
requests/s). Each run is one file from `deras bench --samples FILE`; a run with rate 0
(everything at once) is a burst, not a load level: it appears in the CDFs only. Needs
matplotlib (Debian python3-matplotlib); draws off-screen (Agg).
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines or "run" not in lines[0]:
        raise SystemExit("%s: not a `deras bench --samples` file (no run line)" % path)
    return lines[0]["run"], lines[1:]


def offered(run):
    return run["config"]["rate"]


def cdf(values):
    v = sorted(values)
    n = len(v)
    return v, [(i + 1) / n for i in range(n)]


def label(run):
    rate = run["config"]["rate"]
    return ("%g req/s" % rate) if rate > 0 else "all at once"


def plot_cdfs(runs, out):
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for key, title, ax in zip(("ttft_ms", "tpot_ms", "e2e_ms"),
                              ("time to first token", "time per output token",
                               "end-to-end latency"), axes):
        for run, samples in runs:
            vals = [s[key] for s in samples if s[key] is not None]
            if vals:
                x, y = cdf(vals)
                ax.step(x, y, where="post", label=label(run))
        ax.set_title(title)
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("deras bench: latency CDFs (%s)" % runs[0][0].get("date", ""))
    fig.tight_layout()
    path = os.path.join(out, "latency_cdf.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_load(runs, out):
    runs = sorted(runs, key=lambda r: offered(r[0]))
    x = [offered(r) for r, _ in runs]
    tok = [r["output_tokens_per_s"] for r, _ in runs]
    p50 = [r["ttft_ms"]["p50"] for r, _ in runs]
    p99 = [r["ttft_ms"]["p99"] for r, _ in runs]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(x, tok, "o-")
    a.set_xlabel("offered load (requests/s)")
    a.set_ylabel("output tokens/s")
    a.set_title("throughput")
    a.grid(alpha=0.3)
    b.plot(x, p50, "o-", label="p50")
    b.plot(x, p99, "s--", label="p99")
    b.set_xlabel("offered load (requests/s)")
    b.set_ylabel("TTFT (ms)")
    b.set_title("time to first token")
    b.legend()
    b.grid(alpha=0.3)
    fig.suptitle("deras bench: throughput and TTFT against offered load")
    fig.tight_layout()
    path = os.path.join(out, "throughput_vs_load.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for the PNG files")
    ap.add_argument("runs", nargs="+", help="files from deras bench --samples")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    runs = [load(p) for p in args.runs]
    made = [plot_cdfs(runs, args.out)]
    poisson = [r for r in runs if offered(r[0]) > 0]
    if len(poisson) >= 2:
        made.append(plot_load(poisson, args.out))
    for p in made:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
