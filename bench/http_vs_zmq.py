#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""http_vs_zmq.py - the same `deras bench` workload over the router's two doors, back to
back against one `deras serve`: the client protocol (ZeroMQ) and the OpenAI-compatible HTTP
API (streaming /v1/completions, or /v1/chat/completions with --chat). One JSON object on
stdout.

    python3 bench/http_vs_zmq.py [--model tests/data/tiny-chat] [--repeats 5]
        [--requests 200] [--max-tokens 64:128] [--rate 0] [--chat] [--build build]

The runs alternate in ABBA order (zmq http http zmq ...) after one warm-up of each, so a
machine whose load drifts hurts both alike; the summary gives each transport's best and
median output tokens/s over the repeats and the ratios http/zmq of both (the issue's
target: at least 0.8), and what each door costs in CPU: the router's, the worker's and the
bench client's CPU time per 1,000 output tokens (from /proc and getrusage), which load on
the machine disturbs much less than throughput. Timings on a shared or loaded machine are
noisy: take the figures on a quiet one, and compare only within one run of this script.

Output: {"date", "cpu", "loadavg", "command", "serve", "bench_args", "runs":
[{"transport", "repeat", "report", "cpu_s": {"router", "worker", "client"}}], "summary":
{"zmq": {...}, "http": {...}, "ratio_best", "ratio_median"}}, each report being `deras
bench --json`'s object.
"""
import argparse
import datetime
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

from benchlib import free_port, machine, wait_health

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def cpu_s(pid):
    """User + system CPU seconds of a process so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid):
    """{name: pid} of the processes whose parent is pid (deras serve's router and worker)."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    head, rest = f.read().rsplit(")", 1)
                if int(rest.split()[1]) == pid:
                    out[head.split("(", 1)[1]] = int(d)
            except (OSError, ValueError, IndexError):
                pass
    return out


def bench(deras, target, args, procs):
    before = {k: cpu_s(p) for k, p in procs.items()}
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([deras, "bench", *target, *args, "--json", "--quiet"],
                       capture_output=True, text=True, timeout=1800)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit("deras bench %s failed (%d): %s" % (" ".join(target), r.returncode,
                                                             r.stderr))
    cpu = {k: cpu_s(p) - before[k] for k, p in procs.items()}
    cpu["client"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return json.loads(r.stdout), cpu


def summary(runs):
    reports = [r["report"] for r in runs]
    tps = [r["output_tokens_per_s"] for r in reports]
    per_k = {k: statistics.median(1e6 * r["cpu_s"][k] / r["report"]["output_tokens"]
                                  for r in runs) for k in runs[0]["cpu_s"]}
    return {"cpu_ms_per_1k_tokens_median": per_k, "output_tokens_per_s_best": max(tps), "output_tokens_per_s_median":
            statistics.median(tps), "requests_per_s_median":
            statistics.median(r["requests_per_s"] for r in reports), "failed":
            sum(r["failed"] for r in reports), "ttft_p50_ms_median":
            statistics.median(r["ttft_ms"]["p50"] for r in reports), "tpot_p50_ms_median":
            statistics.median(r["tpot_ms"]["p50"] for r in reports)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "tests", "data", "tiny-chat"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", default="64:128")
    ap.add_argument("--rate", default="0")
    ap.add_argument("--concurrency", default="0")
    ap.add_argument("--chat", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="the worker's CPU threads")
    ap.add_argument("--kv-cache-memory", default="64MiB")
    a = ap.parse_args()
    deras = os.path.join(a.build, "tools", "deras")
    d = tempfile.mkdtemp(prefix="deras-http-vs-zmq-")
    port, http = free_port(), free_port()
    addr, url = "tcp://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % http
    serve = [deras, "serve", "--model", a.model, "--listen", addr, "--admin",
             "ipc://%s/admin.sock" % d, "--metrics-listen", "127.0.0.1:%d" % http,
             "--threads", str(a.threads), "--kv-cache-memory", a.kv_cache_memory]
    log = open(os.path.join(d, "serve.log"), "w")
    p = subprocess.Popen(serve, env=dict(os.environ, DERAS_RUNTIME_DIR=d), stdout=log,
                         stderr=subprocess.STDOUT)
    args = ["--requests", str(a.requests), "--max-tokens", a.max_tokens, "--rate", a.rate,
            "--concurrency", a.concurrency, "--seed", "1", "--ignore-eos"] + (
                ["--chat"] if a.chat else [])
    targets = {"zmq": ["--address", addr], "http": ["--http", url]}
    runs = []
    try:
        wait_health(url, p, timeout=120, what="deras serve")
        found = children(p.pid)
        procs = {"router": found["deras-router"], "worker": found["deras-worker"]}
        for t in ("zmq", "http"):  # warm-up: first connections, allocator, caches
            bench(deras, targets[t], args, procs)
        for i in range(a.repeats):
            order = ("zmq", "http") if i % 2 == 0 else ("http", "zmq")
            for t in order:
                report, cpu = bench(deras, targets[t], args, procs)
                runs.append({"transport": t, "repeat": i, "report": report, "cpu_s": cpu})
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
        shutil.rmtree(d, ignore_errors=True)
    s = {t: summary([r for r in runs if r["transport"] == t]) for t in targets}
    s["ratio_best"] = (s["http"]["output_tokens_per_s_best"] /
                       s["zmq"]["output_tokens_per_s_best"])
    s["ratio_median"] = (s["http"]["output_tokens_per_s_median"] /
                         s["zmq"]["output_tokens_per_s_median"])
    out = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "cpu": "%(cpu)s, %(cores)d cores" % machine(), "loadavg": os.getloadavg(), "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] +
                                                   sys.argv[1:]),
           "serve": " ".join(serve[1:]), "bench_args": " ".join(args), "runs": runs,
           "summary": s}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
