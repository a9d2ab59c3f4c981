# SPDX-License-Identifier: Apache-2.0
"""compare.py - deras against llama.cpp on the same GGUF files, the same threads, in one run.

    bench/llamacpp/compare.py [--model GGUF] [--threads 2] [--formats Q4_1,Q8_0,Q4_K]
        [--modes exact,q8,q8/f16] [--rounds 2] [--no-serve] [--build DERAS_BUILD_DIR] [--out FILE.jsonl]

What it does, in this order (issue 12's targets in brackets):
 1. bench/llamacpp/build.sh: llama.cpp from the llama-cpp-python sdist on PyPI, built once
    into ~/.cache/deras/llama.cpp (a benchmark-only dependency, outside the repository).
 2. The model requantized with llama-quantize --allow-requantize to each format asked that
    it is not already stored in (into ~/.cache/deras/llama.cpp/models). Requantizing a Q4_1
    file to Q8_0 or Q4_K adds no precision back: these files are for speed only. The test
    model's 576 columns are not a multiple of 256, so "Q4_K" is llama.cpp's Q4_K_M recipe
    with its fallbacks: Q5_0 for most matrices, Q4_K/Q6_K for ffn_down, Q8_0 for attn_v and
    the embedding.
 3. Per format, --rounds rounds, each running llama.cpp then deras back to back:
    llama-bench -p 128,512 -n 0 (prefill) and -p 0 -n 128 -d 128 (decode of 128 tokens after
    a 128-token context, as bench_model decodes) against bench_model --prompt-lens 128,512
    --decode-tokens 128; both with --threads. [decode >= 1.2x, prefill >= 1.5x]
 3b. deras runs once per --modes entry, each reported on its own lines: MODE or MODE/KV,
    MODE its --matmul-mode (exact, the default: f32 activations; q8, llama.cpp's
    arithmetic: int8 activations, on weights packed at load) and KV its --kv-dtype (f32,
    deras's CPU default, when not given; f16 is llama.cpp's default cache type).
 4. Serving (first format only): llama-server -np 16 and deras serve (each mode), one after the other,
    both loaded by bench/llamacpp/load.py with the same requests: 16 concurrent clients,
    prompts of 100 token ids, 64 output tokens, ignore_eos, streaming. [>= 2x]

Each figure is the best of the rounds (a shared machine only ever adds time); every raw
measurement is printed too. Output: JSON lines on stdout ({"bench": "vs_llamacpp", ...}
with deras, llama.cpp, ratio and target per measurement), a table on stderr. Figures are
only meaningful on an otherwise idle machine: the load average is recorded at start and
end. Cost: a one-time llama.cpp build (10-25 min on 2 cores), then about 2 minutes per
format per round plus 1-2 minutes of serving per round.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from benchlib import free_port, machine, stop, wait_health  # noqa: E402
CACHE = os.environ.get("DERAS_LLAMACPP_DIR", os.path.expanduser("~/.cache/deras/llama.cpp"))
TARGETS = {"decode": 1.2, "prefill": 1.5, "serve": 2.0}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def emit(out, rec):
    line = json.dumps(rec)
    print(line, flush=True)
    if out:
        out.write(line + "\n")
        out.flush()


def llama_bin(name):
    d = os.environ.get("DERAS_LLAMACPP_BIN", os.path.join(CACHE, "build", "bin"))
    return os.path.join(d, name)


def loadavg():
    return round(os.getloadavg()[0], 2)


def requantize(model, fmt):
    stem = os.path.basename(model)
    if f".{fmt}." in stem or stem.endswith(f".{fmt}.gguf"):
        return model
    base = re.sub(r"\.(Q\d_\w+|F16|BF16|F32)?\.?gguf$", "", stem)
    dst = os.path.join(CACHE, "models", f"{base}.{fmt}.gguf")
    if not os.path.exists(dst):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        log(f"requantizing {stem} to {fmt} (speed only: no precision comes back)")
        subprocess.run([llama_bin("llama-quantize"), "--allow-requantize", model, dst + ".tmp",
                        fmt], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.replace(dst + ".tmp", dst)
    return dst


def llama_bench(model, threads, args):
    r = subprocess.run([llama_bin("llama-bench"), "-m", model, "-t", str(threads), "-o", "jsonl",
                        "-r", "3"] + args, check=True, capture_output=True, text=True)
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]


def mode_args(mode):
    """deras's options for a --modes entry: MODE or MODE/KV."""
    mm, _, kv = mode.partition("/")
    return ["--matmul-mode", mm] + (["--kv-dtype", kv] if kv else [])


def deras_bench(build, model, threads, mode):
    r = subprocess.run([os.path.join(build, "bench", "bench_model"), "--model", model,
                        "--threads", str(threads), "--prompt-lens", "128,512",
                        "--decode-tokens", "128", "--repeat", "3"] + mode_args(mode),
                       check=True, capture_output=True, text=True)
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]


def serve_load(kind, build, model, threads, a, mode="exact"):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    extra = ""
    if kind == "llama.cpp":
        slots = a.concurrency
        ctx = slots * (a.prompt_tokens + a.max_tokens + 64)
        cmd = [llama_bin("llama-server"), "-m", model, "-t", str(threads), "-tb", str(threads),
               "-np", str(slots), "-c", str(ctx), "--host", "127.0.0.1", "--port", str(port)]
        extra = json.dumps({"cache_prompt": False})
    else:
        cmd = [os.path.join(build, "tools", "deras"), "serve", "--model", model, "--device", "cpu",
               "--threads", str(threads), "--metrics-listen", f"127.0.0.1:{port}",
               "--listen", f"tcp://127.0.0.1:{free_port()}",
               "--admin", f"ipc://{tempfile.gettempdir()}/deras-compare-{os.getpid()}.sock",
               "--kv-cache-memory", "2GiB"] + mode_args(mode) + sum(
                   (["--worker-arg", w] for w in a.deras_worker_arg), [])
    logf = open(os.path.join(CACHE, f"serve-{kind}.log"), "w")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_health(url, proc, what=kind)
        r = subprocess.run([sys.executable, os.path.join(HERE, "load.py"), "--url", url,
                            "--concurrency", str(a.concurrency), "--requests", str(a.requests),
                            "--prompt-tokens", str(a.prompt_tokens), "--max-tokens",
                            str(a.max_tokens), "--extra", extra],
                           check=True, capture_output=True, text=True)
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        stop(proc)
        logf.close()


def ratio_rec(kind, fmt, mode, what, deras, llama, extra=None):
    rec = {"bench": "vs_llamacpp", "kind": kind, "format": fmt, "mode": mode, "what": what,
           "deras": round(deras, 2), "llamacpp": round(llama, 2),
           "ratio": round(deras / llama, 3) if llama else None, "target": TARGETS[kind]}
    rec["met"] = rec["ratio"] is not None and rec["ratio"] >= rec["target"]
    rec.update(extra or {})
    return rec


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=os.path.expanduser(
        "~/.cache/deras/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--formats", default="Q4_1,Q8_0,Q4_K")
    p.add_argument("--modes", default="exact,q8",
                   help="deras configurations to run: MODE[/KV], MODE a --matmul-mode, KV a "
                        "--kv-dtype (e.g. exact,q8,q8/f16)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--no-serve", action="store_true")
    p.add_argument("--no-bench", action="store_true")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--prompt-tokens", type=int, default=100)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--deras-worker-arg", action="append", default=[],
                   help="extra deras-worker argument for the serving run (repeatable)")
    p.add_argument("--out", help="also append the JSON lines to this file")
    a = p.parse_args()

    if not os.environ.get("DERAS_LLAMACPP_BIN"):
        subprocess.run([os.path.join(HERE, "build.sh")], check=True)
    out = open(a.out, "a") if a.out else None
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    ver = subprocess.run([llama_bin("llama-bench"), "--version"], capture_output=True,
                         text=True)
    llver = (ver.stdout + ver.stderr).strip().splitlines()
    emit(out, {"bench": "vs_llamacpp_machine", "date": time.strftime("%Y-%m-%d %H:%M"),
               **machine(), "threads": a.threads, "deras_commit": git,
               "llamacpp_version": llver[0] if llver else "", "loadavg_start": loadavg()})

    fmts = [f.strip() for f in a.formats.split(",") if f.strip()]
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    models = {f: requantize(a.model, f) for f in fmts}
    summary = []
    for fmt in [] if a.no_bench else fmts:
        m = models[fmt]
        best, best_ll = {}, {}
        for rnd in range(a.rounds):
            log(f"[{fmt}] round {rnd + 1}/{a.rounds}: llama-bench")
            ll = llama_bench(m, a.threads, ["-p", "128,512", "-n", "0"]) + \
                llama_bench(m, a.threads, ["-p", "0", "-n", "128", "-d", "128"])
            for r in ll:
                key = ("prefill", r["n_prompt"]) if r["n_prompt"] else ("decode", r["n_gen"])
                emit(out, {"bench": "llamacpp_raw", "format": fmt, "round": rnd, "phase": key[0],
                           "tokens": key[1], "depth": r.get("n_depth", 0),
                           "tokens_per_s": round(r["avg_ts"], 2),
                           "stddev": round(r["stddev_ts"], 2)})
                best_ll[key] = max(best_ll.get(key, 0), r["avg_ts"])
            for mode in modes:
                log(f"[{fmt}] round {rnd + 1}/{a.rounds}: bench_model --matmul-mode {mode}")
                for r in deras_bench(a.build, m, a.threads, mode):
                    if r["bench"] not in ("prefill", "decode"):
                        continue
                    key = ("prefill", r["prompt_tokens"]) if r["bench"] == "prefill" else \
                          ("decode", r["tokens"])
                    emit(out, {"bench": "deras_raw", "format": fmt, "mode": mode, "round": rnd,
                               "phase": key[0], "tokens": key[1],
                               "tokens_per_s": r["tokens_per_s"]})
                    best[(mode,) + key] = max(best.get((mode,) + key, 0), r["tokens_per_s"])
        for (mode, phase, n), d in sorted(best.items()):
            rec = ratio_rec(phase, fmt, mode, f"{phase} {n} tokens, tokens/s", d,
                            best_ll.get((phase, n), 0))
            emit(out, rec)
            summary.append(rec)

    if not a.no_serve:
        fmt = fmts[0]
        best = {}
        for rnd in range(a.rounds):
            for kind, mode in [("llama.cpp", "")] + [("deras", m) for m in modes]:
                log(f"[serve {fmt}] round {rnd + 1}/{a.rounds}: {kind} {mode}")
                r = serve_load(kind, a.build, models[fmt], a.threads, a, mode or "exact")
                r.update({"bench": "serve_raw", "server": kind, "mode": mode, "format": fmt,
                          "round": rnd})
                emit(out, r)
                best[mode] = max(best.get(mode, 0), r["output_tokens_per_s"])
        for mode in modes:
            rec = ratio_rec("serve", fmt, mode, f"{a.concurrency} concurrent, output tokens/s",
                            best[mode], best[""])
            emit(out, rec)
            summary.append(rec)

    emit(out, {"bench": "vs_llamacpp_end", "loadavg_end": loadavg()})
    log("\n| kind | format | deras mode | measurement | deras | llama.cpp | ratio | target |")
    log("|---|---|---|---|---:|---:|---:|---:|")
    for r in summary:
        log(f"| {r['kind']} | {r['format']} | {r['mode']} | {r['what']} | {r['deras']} | {r['llamacpp']} | "
            f"{r['ratio']}x | {r['target']}x {'met' if r['met'] else 'MISSED'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
