#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""structured_bench.py - decode throughput with structured output on vs off: deras's engine
(bench_structured), and the same schema through llama.cpp's grammar sampling for comparison.

    bench/structured_bench.py [--build build] [--model PATH] [--batches 1,16] [--output 128]
                              [--repeat 5] [--threads N] [--llama-bin DIR]

1. build/bench/bench_structured with the arguments: B greedy requests asking for a list of
   orders, each exactly --output tokens, free vs under the order-list JSON Schema (masks on
   the helper thread, and inline), interleaved and repeated (best and median reported).
2. When llama.cpp's llama-server is found (--llama-bin, default
   ~/.cache/deras/llama.cpp/build/bin), the same model file, prompts and schema
   (bench_structured --print-schema) through llama-server (--parallel B): B concurrent
   /completion requests with n_predict = --output, free (ignore_eos) vs json_schema, in the
   same interleaved order; decode tokens/s = predicted tokens / the longest request's
   predicted_ms (llama-server's own timings, prompt processing left out).

Output: one JSON object (date, CPU, commands, both engines' results and their ratios) on
stdout; progress on stderr. Timings on a shared machine are noisy: take figures from a quiet
one (docs/benchmarks.md, "Structured output", has the command).
"""

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request

from benchlib import free_port, wait_health

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SUBJECTS = ["a bookshop", "a bakery", "a hardware store", "a flower shop",
            "an electronics store", "a toy store", "a coffee roaster", "a bicycle shop"]


def post(url, body, timeout=3600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def llama_run(url, batch, output, schema):
    """Decode tokens/s of batch concurrent completions (schema None: free)."""
    def one(i):
        body = {"prompt": "<|im_start|>user\nList the orders of %s this week as JSON."
                          "<|im_end|>\n<|im_start|>assistant\n" % SUBJECTS[i % len(SUBJECTS)],
                "n_predict": output, "temperature": 0, "cache_prompt": False}
        if schema is None:
            body["ignore_eos"] = True
        else:
            body["json_schema"] = schema
        return post(url + "/completion", body)["timings"]
    with concurrent.futures.ThreadPoolExecutor(batch) as ex:
        timings = list(ex.map(one, range(batch)))
    tokens = sum(t["predicted_n"] for t in timings)
    return tokens / (max(t["predicted_ms"] for t in timings) / 1000.0)


def llama_bench(args, schema, batches):
    server = os.path.join(os.path.expanduser(args.llama_bin), "llama-server")
    if not os.access(server, os.X_OK):
        print("llama-server not found at %s: no comparison" % server, file=sys.stderr)
        return None
    out = {"command": None, "results": []}
    for batch in batches:
        port = free_port()
        cmd = [server, "-m", args.model, "--port", str(port), "--parallel", str(batch),
               "-c", str(batch * (args.output + 256)), "--no-webui"]
        if args.threads:
            cmd += ["-t", str(args.threads)]
        out["command"] = " ".join(cmd)
        log = tempfile.TemporaryFile()
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        url = "http://127.0.0.1:%d" % port
        try:
            try:
                wait_health(url, p, timeout=300, what="llama-server")
            except RuntimeError as e:
                log.seek(0)
                raise RuntimeError("%s:\n%s" % (e, log.read().decode(errors="replace")[-3000:]))
            arms = {"free": None, "schema": schema}
            for name, sch in arms.items():  # warm-up
                llama_run(url, batch, args.output, sch)
            runs = {name: [] for name in arms}
            for r in range(args.repeat):
                for name in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
                    runs[name].append(llama_run(url, batch, args.output, arms[name]))
                    print("llama.cpp batch %d, repeat %d, %s: %.1f tok/s" %
                          (batch, r + 1, name, runs[name][-1]), file=sys.stderr)
            for name in arms:
                res = {"batch": batch, "arm": name, "best_tok_s": round(max(runs[name]), 2),
                       "median_tok_s": round(statistics.median(runs[name]), 2),
                       "runs": [round(x, 2) for x in runs[name]]}
                if name != "free":
                    res["best_vs_free"] = round(max(runs[name]) / max(runs["free"]), 3)
                    res["median_vs_free"] = round(statistics.median(runs[name]) /
                                                  statistics.median(runs["free"]), 3)
                out["results"].append(res)
        finally:
            p.terminate()
            p.wait(30)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/deras/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--llama-bin", default="~/.cache/deras/llama.cpp/build/bin")
    args = ap.parse_args()
    exe = os.path.join(args.build, "bench", "bench_structured")
    schema = json.loads(subprocess.run([exe, "--print-schema"], check=True,
                                       capture_output=True, text=True).stdout)
    cmd = [exe, "--model", args.model, "--batches", args.batches, "--output",
           str(args.output), "--repeat", str(args.repeat), "--threads", str(args.threads)]
    deras = json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)
    batches = [int(b) for b in args.batches.split(",")]
    llama = llama_bench(args, schema, batches)
    print(json.dumps({"bench": "structured_bench", "deras": deras, "llama_cpp": llama,
                      "command": " ".join(sys.argv)}, indent=1))


if __name__ == "__main__":
    main()
