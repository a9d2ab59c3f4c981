#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench_synthetic.py - a synthetic quantized model of a real model's shape, served by
`deras serve`: the worker's resident memory against its bound, decode tokens/s, and the
same file's decode tokens/s in llama.cpp.

    python3 bench/bench_synthetic.py --build build                      # Llama-3-8B, Q4_K_M
    python3 bench/bench_synthetic.py --build build --matmul-mode q8     # llama.cpp's arithmetic
    python3 bench/bench_synthetic.py --build build --preset tiny --out /tmp/tiny.gguf --json

1. The model: bench/make_synthetic_model.py writes --preset (default llama-3-8b: 32 layers,
   hidden 4096, 32 heads / 8 KV heads of 128, FFN 14336, vocabulary 128256, rope theta
   500000) as --type (default q4_k_m, llama-quantize's mix of Q4_K and Q6_K) with random
   weights, to --out (default ~/.cache/deras/synthetic/<preset>.<type>.gguf; kept and
   reused; never in the repository), with the test model's tokenizer padded to the
   vocabulary (--tokenizer-from; a minimal byte-level one without it). Before writing it
   checks the free disk space (1.2 x the file's size). The generator needs the PyPI
   packages gguf and numpy: this interpreter's if it has them, else a virtual environment
   made once in ~/.cache/deras/venv-gguf (pip install gguf==0.19.0 numpy).
2. Serving: `deras serve` with one CPU worker (--threads, --kv-cache-memory, --matmul-mode:
   exact, the default, or q8, whose worker packs the weights at load), a private
   runtime directory; then one text completion (`deras complete`: the tokenizer works) and
   --requests streaming requests one at a time (`deras bench`: --max-tokens tokens each,
   EOS ignored, greedy, random 16-token prompts); decode tokens/s = 1 / median time per
   output token.
3. Memory: the worker's VmHWM (peak resident set), VmRSS, RssFile, RssAnon from /proc,
   against the bound of issue 12: file size x 1.25 + KV budget + 64 MiB. The KV cache is
   an anonymous mapping of the budget touched lazily: a few short requests touch a sliver
   of it, and the bound counts all of it, as a full cache would.
4. llama.cpp: `llama-bench -m FILE -n 32 -p 0 -t THREADS -o json` when its binary is found
   ($DERAS_LLAMACPP_BIN, else ~/.cache/deras/llama.cpp/build/bin; bench/ has the script
   that builds it); the command is printed either way.

Prints a summary, or with --json one object on stdout. Exit status: 0, 1 if the bound does
not hold or a step failed, 77 if the generator's packages cannot be had (--no-venv).
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchlib import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.path.expanduser("~/.cache/deras")
MIB = 1 << 20


def log(msg):
    print("bench_synthetic: %s" % msg, file=sys.stderr, flush=True)


def has_gguf(python):
    return subprocess.run([python, "-c", "import gguf, numpy"], capture_output=True).returncode == 0


def generator_python(allow_venv):
    if has_gguf(sys.executable):
        return sys.executable
    venv = os.path.join(CACHE, "venv-gguf")
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and has_gguf(py):
        return py
    if not allow_venv:
        return None
    log("making %s (pip install gguf==0.19.0 numpy)" % venv)
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "gguf==0.19.0", "numpy"], check=True)
    return py


def model_bytes(preset, qtype, python):
    """The file's size as the generator would write it (tensor bytes; metadata is small)."""
    code = ("import sys;"
            "sys.path.insert(0,%r); import make_synthetic_model as m;"
            "L,d,h,kv,ff,V,_,_=m.PRESETS[%r]; print(L*(2*d*d+2*d*(d//h)*kv+3*d*ff)+2*V*d)"
            % (HERE, preset))
    params = int(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                check=True).stdout)
    bits = {"f16": 16, "q8_0": 8.5, "q4_0": 4.5, "q4_k": 4.5, "q4_k_m": 4.9}[qtype]
    return int(params * bits / 8)


def status_kib(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssFile", "RssAnon"):
                out[k] = int(v.split()[0])
    return out


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def exe_name(pid):
    try:
        return os.path.basename(os.readlink("/proc/%d/exe" % pid))
    except OSError:
        return ""


def kv_bytes(spec):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1000, "MB": 10**6, "GB": 10**9}
    for u, m in units.items():
        if spec.endswith(u):
            return int(float(spec[:-len(u)]) * m)
    raise SystemExit("--kv-cache-memory: give a size with a unit (512MiB, 1GiB)")


def llama_bench_cmd(model, threads):
    d = os.environ.get("DERAS_LLAMACPP_BIN") or os.path.join(CACHE, "llama.cpp", "build", "bin")
    return [os.path.join(d, "llama-bench"), "-m", model, "-n", "32", "-p", "0", "-t",
            str(threads), "-o", "json"]


def llama_bench(model, threads):
    cmd = llama_bench_cmd(model, threads)
    exe = cmd[0]
    if not os.access(exe, os.X_OK):
        return None, " ".join(cmd)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        log("llama-bench failed: %s" % r.stderr[-2000:])
        return None, " ".join(cmd)
    rows = json.loads(r.stdout)
    return next((x["avg_ts"] for x in rows if x.get("n_gen") == 32), None), " ".join(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--preset", default="llama-3-8b")
    ap.add_argument("--type", default="q4_k_m")
    ap.add_argument("--out")
    ap.add_argument("--tokenizer-from",
                    default=os.path.join(CACHE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-cache-memory", default="1GiB")
    ap.add_argument("--matmul-mode", default="exact", choices=("exact", "q8"))
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--no-venv", action="store_true", help="never make a virtual environment")
    ap.add_argument("--no-llama-cpp", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    deras = os.path.join(a.build, "tools", "deras")
    derasctl = os.path.join(a.build, "tools", "derasctl")
    out = a.out or os.path.join(CACHE, "synthetic", "%s.%s.gguf" % (a.preset, a.type))
    tok = a.tokenizer_from if a.tokenizer_from and os.path.exists(a.tokenizer_from) else None
    if a.preset == "tiny":
        tok = None  # its vocabulary is smaller than the test model's

    if not os.path.exists(out):
        py = generator_python(not a.no_venv)
        if py is None:
            print("SKIPPED: the gguf and numpy packages are not available")
            return 77
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        need = model_bytes(a.preset, a.type, py)
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(out))).free
        if free < 1.2 * need:
            raise SystemExit("bench_synthetic: %.1f GiB free next to %s, the model needs about "
                             "%.1f GiB" % (free / (1 << 30), out, need / (1 << 30)))
        cmd = [py, os.path.join(HERE, "make_synthetic_model.py"), "--preset", a.preset,
               "--type", a.type, "--out", out + ".part"] + (["--tokenizer-from", tok] if tok else [])
        log(" ".join(cmd))
        t0 = time.time()
        subprocess.run(cmd, check=True)
        os.replace(out + ".part", out)
        log("wrote %s in %.0f s" % (out, time.time() - t0))
    file_bytes = os.path.getsize(out)
    kv = kv_bytes(a.kv_cache_memory)

    run = tempfile.mkdtemp(prefix="deras-synth-")
    env = dict(os.environ, DERAS_RUNTIME_DIR=run)
    address = "tcp://127.0.0.1:%d" % free_port()
    admin = "ipc://%s/admin.sock" % run
    serve_log = open(os.path.join(run, "serve.log"), "w+")
    serve_cmd = [deras, "serve", "--model", out, "--listen", address, "--admin", admin,
                 "--metrics-listen", "none", "--num-workers", "1", "--device", "cpu",
                 "--threads", str(a.threads), "--kv-cache-memory", a.kv_cache_memory,
                 "--matmul-mode", a.matmul_mode]
    log(" ".join(serve_cmd))
    t0 = time.time()
    serve = subprocess.Popen(serve_cmd, env=env, stdout=serve_log, stderr=subprocess.STDOUT)
    result = {"model": out, "preset": a.preset, "type": a.type, "file_bytes": file_bytes,
              "kv_budget_bytes": kv, "threads": a.threads, "matmul_mode": a.matmul_mode}
    ok = True
    try:
        while subprocess.run([derasctl, "--admin", admin, "health"], env=env,
                             capture_output=True).returncode:
            if serve.poll() is not None:
                serve_log.seek(0)
                raise SystemExit("bench_synthetic: deras serve exited:\n" + serve_log.read()[-4000:])
            time.sleep(0.5)
        result["load_s"] = round(time.time() - t0, 1)
        worker = next(p for p in children(serve.pid) if exe_name(p) == "deras-worker")
        result["rss_ready_kib"] = status_kib(worker)
        text = subprocess.run([deras, "complete", "--address", address, "--max-tokens", "8",
                               "--temperature", "0", "--no-stream", "The capital of France is"],
                              env=env, capture_output=True, text=True, timeout=3600)
        if text.returncode:
            raise SystemExit("bench_synthetic: deras complete failed: %s" % text.stderr)
        result["completion"] = text.stdout.strip()[:80]
        b = subprocess.run([deras, "bench", "--address", address, "--requests", str(a.requests),
                            "--concurrency", "1", "--random-prompt-tokens", "16:16", "--vocab",
                            "256", "--max-tokens", str(a.max_tokens), "--ignore-eos",
                            "--temperature", "0", "--timeout", "3600", "--json", "--quiet"],
                           env=env, capture_output=True, text=True, timeout=7200)
        if b.returncode:
            raise SystemExit("bench_synthetic: deras bench failed: %s" % b.stderr)
        rep = json.loads(b.stdout)
        result["deras_bench"] = rep
        tpot = rep["tpot_ms"]["p50"]
        result["decode_tok_s"] = round(1000.0 / tpot, 3) if tpot > 0 else None
        result["rss_kib"] = status_kib(worker)
    finally:
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(120)
        except subprocess.TimeoutExpired:
            serve.kill()
        serve_log.seek(0)
        lines = serve_log.read().splitlines()
        result["worker_log"] = [ln.split(" I ", 1)[-1] for ln in lines
                                if "KV cache:" in ln or "MiB of weights" in ln]
        serve_log.close()
        shutil.rmtree(run, ignore_errors=True)
    peak = result["rss_kib"]["VmHWM"] * 1024
    bound = file_bytes * 1.25 + kv + 64 * MIB
    result["bound_bytes"] = int(bound)
    result["within_bound"] = peak <= bound
    ok = ok and peak <= bound
    if not a.no_llama_cpp:
        tps, cmd = llama_bench(out, a.threads)
        result["llama_cpp_cmd"] = cmd
        result["llama_cpp_decode_tok_s"] = tps
        if tps and result.get("decode_tok_s"):
            result["ratio_vs_llama_cpp"] = round(result["decode_tok_s"] / tps, 3)
    if a.json:
        print(json.dumps(result))
    else:
        r = result["rss_kib"]
        print("model %s: %.2f GiB file, KV budget %.2f GiB, loaded in %.1f s; worker: %s"
              % (out, file_bytes / (1 << 30), kv / (1 << 30), result["load_s"],
                 "; ".join(result["worker_log"])))
        print("completion: %r" % result["completion"])
        print("worker RSS %.0f MiB (file pages %.0f, anonymous %.0f), peak %.0f MiB; bound "
              "file x 1.25 + KV budget + 64 MiB = %.0f MiB: %s"
              % (r["VmRSS"] / 1024, r["RssFile"] / 1024, r["RssAnon"] / 1024, peak / MIB,
                 bound / MIB, "within" if result["within_bound"] else "EXCEEDED"))
        print("decode: %s tok/s (deras, %d threads); llama.cpp: %s"
              % (result.get("decode_tok_s"), a.threads,
                 "%s tok/s (%s)" % (result["llama_cpp_decode_tok_s"], result["llama_cpp_cmd"])
                 if result.get("llama_cpp_decode_tok_s") else
                 "not run; the same file there: %s" % " ".join(llama_bench_cmd(out, a.threads))))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
