#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""router_check.py - deras-router end to end, with real processes on this machine.

Starts deras-router on the tiny test model and one or two workers (deras-worker, or
fake_worker.py with --fake), then drives it as clients do (ZeroMQ DEALER/REQ + msgpack)
through the behaviours the router promises: streaming and non-streaming requests, n > 1,
stop strings (never partly emitted), cancel, deadlines, a client killed mid-stream (its
KV blocks come back at once), a flood against a small queue (busy, every request
answered, memory flat), garbage frames, a killed worker (re-dispatch / worker_failed),
duplicate ids, REQ clients, pong, and the drain at SIGTERM.

    python3 tests/integration/router_check.py --build build            # real worker
    python3 tests/integration/router_check.py --build build --fake     # fake worker
    python3 tests/integration/router_check.py --build build stop_strings cancel

Needs python3-zmq and python3-msgpack (Debian). Exit status 0 when every scenario passed.

Where a request must still run when the scenario acts on it (cancel, a deadline, a killed
client or worker, a drain), the worker is slowed on purpose: fake_worker.py by --step-ms,
deras-worker by its test-only step delay (DERAS_TEST_STEP_DELAY_MS, docs/worker.md), so the
request lasts seconds on any machine. Events are waited for, not slept on.
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    import msgpack
    import zmq
except ImportError as ex:  # ctest reports exit 77 as skipped
    print(f"SKIPPED: {ex} (install python3-zmq and python3-msgpack)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
STEP_DELAY = "DERAS_TEST_STEP_DELAY_MS"  # deras-worker's test-only knob (cluster.py)


class Proc:
    """A child process whose stderr goes to a log file (shown when a scenario fails)."""

    def __init__(self, name, argv, env, logdir):
        self.name = name
        self.log = os.path.join(logdir, name + ".log")
        self.f = open(self.log, "w")
        self.p = subprocess.Popen(argv, stdout=self.f, stderr=subprocess.STDOUT, env=env)

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def wait(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        if self.alive():
            self.p.kill()
            self.p.wait()
        self.f.close()

    def tail(self, n=30):
        try:
            with open(self.log) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


class Client:
    def __init__(self, ctx, addr, kind=zmq.DEALER):
        self.s = ctx.socket(kind)
        self.s.setsockopt(zmq.LINGER, 0)
        self.s.connect(addr)
        self.backlog = []  # messages read ahead (wait_chunks), handed out first by recv

    def close(self):
        self.s.close(0)

    def send(self, obj):
        self.s.send(msgpack.packb(obj))

    def recv(self, timeout_ms):
        if self.backlog:
            return self.backlog.pop(0)
        if not self.s.poll(timeout_ms):
            return None
        return msgpack.unpackb(self.s.recv(), raw=False)

    def wait_chunks(self, ids, timeout=60.0):
        """Read until every id in ids has streamed a chunk (its client has seen it); what
        was read stays for recv/collect."""
        seen, kept = set(), []
        end = time.time() + timeout
        while not set(ids) <= seen:
            check(time.time() < end, f"no chunk from {sorted(set(ids) - seen)} within {timeout} s")
            if not self.s.poll(200):
                continue
            m = msgpack.unpackb(self.s.recv(), raw=False)
            kept.append(m)
            if m.get("type") == "chunk":
                seen.add(m["id"])
        self.backlog.extend(kept)

    def request(self, rid, prompt, **kw):
        m = {"type": "request", "id": rid}
        if isinstance(prompt, str):
            m["prompt"] = prompt
        else:
            m["prompt_ids"] = prompt
        m.update(kw)
        self.send(m)

    def collect(self, want, timeout=60.0):
        """want: {id: n}. Returns {id: {"chunks": {i: [..]}, "finals": {i: msg}, "error": msg}}
        once every id has all its finals or an error."""
        out = {i: {"chunks": {}, "finals": {}, "error": None} for i in want}
        end = time.time() + timeout
        pending = set(want)
        while pending and time.time() < end:
            m = self.recv(200)
            if m is None:
                continue
            r = out.get(m.get("id"))
            if r is None:
                raise AssertionError(f"reply for an id never sent: {m}")
            if m["id"] not in pending:
                continue  # e.g. unknown_request for a cancel sent after the end
            if m["type"] == "chunk":
                r["chunks"].setdefault(m["index"], []).append(m)
            elif m["type"] == "final":
                r["finals"][m["index"]] = m
            elif m["type"] == "error":
                r["error"] = m
            if r["error"] or len(r["finals"]) == want[m["id"]]:
                pending.discard(m["id"])
        if pending:
            raise AssertionError(f"no end for {sorted(pending)} within {timeout} s")
        return out

    def ping(self):
        """The pong; what arrives before it (chunks, finals, errors of requests in flight)
        stays for recv/collect, so a scenario may ping while it has requests running."""
        self.send({"type": "ping"})
        end = time.time() + 30
        while time.time() < end:
            if not self.s.poll(500):
                continue
            m = msgpack.unpackb(self.s.recv(), raw=False)
            if m.get("type") == "pong":
                return m
            self.backlog.append(m)
        raise AssertionError("no pong")


def stream_text(r, i=0):
    return "".join(c["text"] for c in r["chunks"].get(i, []))


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Env:
    def __init__(self, args):
        self.args = args
        self.ctx = zmq.Context()
        self.tmp = tempfile.mkdtemp(prefix="deras-rtr-check-")
        self.env = dict(os.environ, DERAS_RUNTIME_DIR=self.tmp)
        self.listen = f"tcp://127.0.0.1:{args.port or free_port()}"
        self.wsock = f"ipc://{self.tmp}/workers.sock"
        self.router = None
        self.workers = []
        self.clients = []

    def start_router(self, *extra):
        # heartbeats every 200 ms; dead after 3 s of silence: no stall of a loaded machine
        # kills a worker by mistake, and the killed one is waited for (pong), not timed
        argv = [os.path.join(self.args.build, "router", "deras-router"), "--model", self.args.model,
                "--listen", self.listen, "--workers", self.wsock, "--worker-timeout-ms", "3000",
                "--heartbeat-ms", "200", "--drain-timeout", "3", *extra]
        self.router = Proc("router", argv, self.env, self.tmp)
        c = self.client()
        c.ping()
        return c

    def start_worker(self, name, *extra, wait=True, slow_ms=0):
        """slow_ms: every step at least this long (fake: --step-ms; deras-worker: its
        test-only step delay on top of the step's work)."""
        env = self.env
        if self.args.fake:
            argv = [sys.executable, os.path.join(HERE, "fake_worker.py"), "--router", self.wsock,
                    "--name", name, "--model", os.path.basename(self.args.model.rstrip("/")), *extra]
            if slow_ms:
                argv += ["--step-ms", str(slow_ms)]
        else:
            argv = [os.path.join(self.args.build, "worker", "deras-worker"), "--model", self.args.model,
                    "--router", self.wsock, "--name", name, "--threads", "1",
                    "--kv-cache-memory", self.args.kv_cache, *extra]
            if slow_ms:
                env = dict(env, **{STEP_DELAY: str(slow_ms)})
        w = Proc(name, argv, env, self.tmp)
        self.workers.append(w)
        if wait:
            self.wait_ready(name)
        return w

    def wait_ready(self, name, timeout=60):
        c = self.client()
        end = time.time() + timeout
        while time.time() < end:
            for w in c.ping()["workers"]:
                if w["name"] == name and w["state"] == "ready":
                    c.close()
                    return
            time.sleep(0.1)
        raise AssertionError(f"worker {name} never became ready")

    def client(self, kind=zmq.DEALER):
        c = Client(self.ctx, self.listen, kind)
        self.clients.append(c)
        return c

    def stop(self):
        """Stop everything; the router by SIGTERM, so it must drain and exit 0 with a log
        free of sanitizer reports (leaks included). Returns what went wrong, or ""."""
        problem = ""
        for c in self.clients:
            c.close()
        if self.router and self.router.alive():
            self.router.signal(signal.SIGTERM)
            rc = self.router.wait(60)
            if rc != 0:
                problem = f"router exit status {rc} at SIGTERM"
        if self.router:
            self.router.stop()
            with open(self.router.log) as f:
                log = f.read()
            for mark in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
                if mark in log:
                    problem += f"; router log has '{mark}'"
        for w in self.workers:
            w.stop()
        return problem

    def logs(self):
        out = ""
        for p in ([self.router] if self.router else []) + self.workers:
            out += f"--- {p.name} ---\n{p.tail()}"
        return out


def worker_of(pong, name):
    for w in pong["workers"]:
        if w["name"] == name:
            return w
    return None


def wait_kv_back(c, name, timeout=60.0):
    end = time.time() + timeout
    w = None
    while time.time() < end:
        w = worker_of(c.ping(), name)
        if w and w["running"] == 0 and w["kv_blocks_free"] == w["kv_blocks_total"]:
            return w
        time.sleep(0.05)
    raise AssertionError(f"worker {name} still holds sequences or KV blocks: {w}")


# ---- scenarios: each gets a fresh router and workers ----

PROMPT = "Once upon a time, in a land far away, there lived a curious fox."


def s_basic(e):
    """non-streaming and streaming give the same greedy text; usage and timings present"""
    c = e.start_router()
    e.start_worker("w0")
    c.request("ns", PROMPT, max_tokens=24, temperature=0, ignore_eos=True)
    c.request("st", PROMPT, max_tokens=24, temperature=0, ignore_eos=True, stream=True)
    r = c.collect({"ns": 1, "st": 1})
    check(not r["ns"]["error"] and not r["st"]["error"], f"errors: {r}")
    f = r["ns"]["finals"][0]
    check(f["finish_reason"] == "length", f"finish {f}")
    check(len(f["token_ids"]) == 24 and f["usage"]["completion_tokens"] == 24, f"tokens {f}")
    u = f["usage"]
    check(u["prompt_tokens"] > 0 and u["total_ms"] >= u["ttft_ms"] >= 0, f"usage {u}")
    st = r["st"]
    check(stream_text(st) == f["text"], f"stream {stream_text(st)!r} != {f['text']!r}")
    ids = [t for ch in st["chunks"][0] for t in ch["token_ids"]]
    check(ids == f["token_ids"], "stream ids differ")
    check("text" not in st["finals"][0] or not st["finals"][0].get("text"), "stream final carries text")
    # logprobs passed through
    c.request("lp", PROMPT, max_tokens=4, temperature=0, logprobs=2)
    r = c.collect({"lp": 1})["lp"]
    if not e.args.fake:
        lps = r["finals"][0].get("logprobs")
        check(lps and len(lps) == len(r["finals"][0]["token_ids"]), f"logprobs: {r['finals'][0]}")


def s_n_samples(e):
    """n > 1: one final per sample, per-sample chunks"""
    c = e.start_router()
    e.start_worker("w0")
    c.request("a", PROMPT, max_tokens=16, n=3, stream=True, seed=7, ignore_eos=True)
    c.request("b", PROMPT, max_tokens=16, n=2, seed=7, ignore_eos=True)
    r = c.collect({"a": 3, "b": 2})
    check(sorted(r["a"]["finals"]) == [0, 1, 2], f"a finals {r['a']}")
    check(sorted(r["b"]["finals"]) == [0, 1], f"b finals {r['b']}")
    for i in range(3):
        n = sum(len(ch["token_ids"]) for ch in r["a"]["chunks"][i])
        check(n == 16, f"sample {i}: {n} tokens")


def s_stop_strings(e):
    """a stop string ends the sample; no byte of it is ever emitted"""
    c = e.start_router()
    e.start_worker("w0")
    c.request("ref", PROMPT, max_tokens=40, temperature=0, ignore_eos=True)
    # temperatures too small to divide by are greedy (issue 14): the same text, any seed
    c.request("tiny", PROMPT, max_tokens=40, temperature=1e-30, ignore_eos=True, seed=7)
    r0 = c.collect({"ref": 1, "tiny": 1})
    text = r0["ref"]["finals"][0]["text"]
    check(r0["tiny"]["finals"][0]["text"] == text, f"temperature 1e-30: {r0['tiny']}")
    cut = None
    for i in range(4, len(text) - 4):
        s = text[i:i + 3]
        if s.strip() and text.find(s) == i:
            cut = (i, s)
            break
    check(cut, f"no usable stop string in {text!r}")
    i, stop = cut
    want = text[:i]
    c.request("s", PROMPT, max_tokens=40, temperature=0, ignore_eos=True, stream=True,
              stop=[stop, "never-appears"])
    c.request("n", PROMPT, max_tokens=40, temperature=0, ignore_eos=True, stop=[stop])
    r = c.collect({"s": 1, "n": 1})
    got = stream_text(r["s"])
    check(got == want, f"stream with stop {stop!r}: {got!r}, want {want!r}")
    check(r["s"]["finals"][0]["finish_reason"] == "stop", f"{r['s']['finals'][0]}")
    check(r["n"]["finals"][0]["text"] == want, f"non-stream: {r['n']['finals'][0]['text']!r}")
    check(r["n"]["finals"][0]["finish_reason"] == "stop", "finish_reason")
    wait_kv_back(c, "w0")


def s_cancel(e):
    """cancel ends every sample with abort/cancelled; unknown ids are unknown_request"""
    c = e.start_router()
    e.start_worker("w0", slow_ms=20)  # 3000 tokens: a minute; only the cancel ends them
    c.request("x", PROMPT, max_tokens=3000, stream=True, n=2, ignore_eos=True)
    while True:
        m = c.recv(30000)
        check(m is not None, "no chunk")
        if m["type"] == "chunk":
            break
    c.send({"type": "cancel", "id": "x"})
    r = c.collect({"x": 2})["x"]
    for i in (0, 1):
        f = r["finals"][i]
        check(f["finish_reason"] == "abort" and f["abort_reason"] == "cancelled", f"{f}")
    c.send({"type": "cancel", "id": "x"})
    m = c.recv(30000)
    check(m and m["type"] == "error" and m["code"] == "unknown_request", f"{m}")
    wait_kv_back(c, "w0")


def s_deadline(e):
    """deadline_ms ends unfinished samples with abort/deadline_exceeded"""
    c = e.start_router()
    e.start_worker("w0", slow_ms=20)  # 4000 tokens: over a minute; only the deadline ends them
    t = time.time()
    c.request("d", PROMPT, max_tokens=4000, ignore_eos=True, deadline_ms=300)
    c.request("ds", PROMPT, max_tokens=4000, ignore_eos=True, deadline_ms=300, stream=True)
    r = c.collect({"d": 1, "ds": 1})
    took = time.time() - t
    for k in ("d", "ds"):
        f = r[k]["finals"][0]
        check(f["finish_reason"] == "abort" and f["abort_reason"] == "deadline_exceeded", f"{f}")
    # never early; late only by scheduling on a loaded machine (the requests would run a
    # minute: 10 s still shows the deadline ended them)
    check(0.25 < took < 10.0, f"deadline fired after {took:.2f} s")
    wait_kv_back(c, "w0")


CLIENT_SNIPPET = r"""
import sys, zmq, msgpack
s = zmq.Context().socket(zmq.DEALER); s.connect(sys.argv[1])
s.send(msgpack.packb({"type": "request", "id": "k", "prompt": sys.argv[2], "max_tokens": 4000,
                      "ignore_eos": True, "stream": sys.argv[3] == "1", "n": 2}))
if sys.argv[3] == "1":
    s.recv()
print("started", flush=True)
import time; time.sleep(60)
"""


def s_client_killed(e):
    """a client killed mid-request has its work aborted at once, streaming or not"""
    c = e.start_router()
    e.start_worker("w0", slow_ms=20)  # 4000 tokens: over a minute, unless aborted
    for stream in ("1", "0"):
        p = subprocess.Popen([sys.executable, "-c", CLIENT_SNIPPET, e.listen, PROMPT, stream],
                             stdout=subprocess.PIPE, text=True)
        check(p.stdout.readline().strip() == "started", "client did not start")
        end = time.time() + 60
        while True:  # the request runs at the worker
            w = worker_of(c.ping(), "w0")
            if w["running"] > 0 or w["kv_blocks_free"] < w["kv_blocks_total"]:
                break
            check(time.time() < end, f"nothing running: {w}")
            time.sleep(0.05)
        p.kill()
        p.wait()
        t = time.time()
        wait_kv_back(c, "w0")
        # aborted at once (a fraction of a second), not run to its end a minute later; 10 s
        # is room for a loaded machine
        check(time.time() - t < 10.0, "KV blocks came back late")


def sanitized(e):
    with open(os.path.join(e.args.build, "router", "deras-router"), "rb") as f:
        return b"__asan_init" in f.read()


def s_flood(e):
    """a flood against a small queue: busy answers, every request answered, memory flat"""
    c = e.start_router("--max-queued-requests", "64", "--max-queued-tokens", "100000")
    # the fake steps every 5 ms; deras-worker 2 ms more than its work: either serves at most
    # a few hundred requests a second, so the flood fills the queue on any machine
    e.start_worker("w0", *(["--max-seqs", "1"] if e.args.fake else ["--max-seqs", "1", "--max-live-seqs", "4"]),
                   slow_ms=0 if e.args.fake else 2)
    rss = []
    for round_ in range(6):
        ids = {}
        for i in range(5000):
            rid = f"f{round_}-{i}"
            c.request(rid, PROMPT, max_tokens=2, n=1 + i % 3, stop=["zz"] if i % 2 else [])
            ids[rid] = 1 + i % 3
        r = c.collect(ids, timeout=300)
        busy = sum(1 for v in r.values() if v["error"] and v["error"]["code"] == "busy")
        done = sum(1 for v in r.values() if v["finals"])
        other = [v["error"] for v in r.values() if v["error"] and v["error"]["code"] != "busy"]
        check(not other, f"unexpected errors: {other[:3]}")
        check(busy > 0 and done > 0 and busy + done == 5000, f"busy {busy}, done {done}")
        with open(f"/proc/{e.router.p.pid}/status") as f:
            rss.append(int([l for l in f if l.startswith("VmRSS")][0].split()[1]))
    # AddressSanitizer's quarantine keeps freed memory: only a plain build can tell. A leak
    # grows RSS in every round (13 bytes per request is 64 kB a round); buffers sized by
    # the peak backlog (socket queues, decoder storage) step up once when a round happens
    # to back up further than the earlier ones, then stay. Round 0 warms up.
    if not sanitized(e):
        steps = [b - a for a, b in zip(rss[1:], rss[2:])]
        check(not all(d > 64 for d in steps) and rss[-1] <= rss[1] + 8192,
              f"router RSS grows under floods: {rss} kB")
        print(f"     flood: router RSS after each round {rss} kB")
    wait_kv_back(c, "w0")


def s_garbage(e):
    """garbage frames get errors (or a dropped connection), never a crash or a stall"""
    c = e.start_router()
    e.start_worker("w0")
    rnd = random.Random(1)
    g = e.client()
    n_err = 0
    for i in range(300):
        kind = i % 6
        if kind == 0:
            g.s.send(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 64))))
        elif kind == 1:
            g.s.send_multipart([b"a", b"b", b"c"])
        elif kind == 2:
            full = msgpack.packb({"type": "request", "id": f"g{i}", "prompt": "hi", "max_tokens": 2})
            g.s.send(full[:rnd.randint(0, len(full) - 1)])
        elif kind == 3:
            g.s.send(msgpack.packb({"type": "request", "id": f"g{i}", "prompt": "x", "n": 10**9}))
        elif kind == 4:
            g.s.send(msgpack.packb([1, 2, {"type": "ping"}]))
        else:
            g.s.send(msgpack.packb({"type": "request", "id": f"g{i}", "prompt": b"\xff\xfe".decode("latin1"),
                                    "max_tokens": 1, "bogus": 1}))
    end = time.time() + 60
    while time.time() < end and n_err < 300:
        m = g.recv(10000)
        if m is None:
            break
        check(m["type"] == "error", f"garbage answered with {m}")
        n_err += 1
    check(n_err == 300, f"{n_err} error replies for 300 garbage frames")
    # a frame over the protocol's 4 MiB cap: read and answered message_too_large (only frames
    # over ZeroMQ's own 128 MiB cap cost the connection), and the router lives on. The
    # answer, waited for, says the router handled the frame before the checks below
    big = e.client()
    big.s.send(b"\x00" * (5 << 20))
    m = big.recv(30000)
    check(m and m["type"] == "error" and m["code"] == "message_too_large", f"5 MiB frame: {m}")
    # REQ envelope with garbage
    rq = e.client(zmq.REQ)
    rq.s.send(b"\xc1")
    m = rq.recv(30000)
    check(m and m["type"] == "error" and m["code"] == "malformed", f"REQ garbage: {m}")
    check(e.router.alive(), "router died")
    c.request("after", PROMPT, max_tokens=3)
    check(c.collect({"after": 1})["after"]["finals"], "no service after garbage")


def s_protocol_errors(e):
    """validation: duplicate ids, token ranges, context length, REQ clients"""
    c = e.start_router()
    e.start_worker("w0", *(["--step-ms", "20"] if e.args.fake else []))
    c.request("dup", PROMPT, max_tokens=500, ignore_eos=True, stream=True)
    c.request("dup", PROMPT, max_tokens=5)
    m = None
    while True:
        m = c.recv(30000)
        check(m is not None, "no reply")
        if m["type"] == "error":
            break
    # the refusal names no request (id ""), so it cannot end the live one, whose stream
    # goes on: chunks after the refusal, then its own final (the cancel's abort)
    check(m["code"] == "duplicate_id" and m["id"] == "" and "'dup'" in m["message"], f"{m}")
    n_after = 0
    while n_after < 2:
        m = c.recv(30000)
        check(m is not None and m.get("id") == "dup" and m["type"] == "chunk",
              f"the live request's stream stopped after the duplicate: {m}")
        n_after += 1
    c.send({"type": "cancel", "id": "dup"})
    r = c.collect({"dup": 1})
    check(r["dup"]["error"] is None and r["dup"]["finals"][0]["finish_reason"] == "abort",
          f"the live request did not end with its own final: {r['dup']}")
    c.request("tok", [1, 2, 5000], max_tokens=2)
    c.request("stop", PROMPT, max_tokens=2, stop_token_ids=[99999])
    c.request("ctx", PROMPT, max_tokens=32000)
    r = c.collect({"tok": 1, "stop": 1, "ctx": 1})
    check(r["tok"]["error"]["code"] == "token_out_of_range", f"{r['tok']}")
    check(r["stop"]["error"]["code"] == "token_out_of_range", f"{r['stop']}")
    check(r["ctx"]["error"]["code"] in ("context_length_exceeded", "limit_exceeded"), f"{r['ctx']}")
    rq = e.client(zmq.REQ)
    rq.request("req", PROMPT, max_tokens=3)
    m = rq.recv(30000)
    check(m and m["type"] == "final" and m["id"] == "req", f"REQ: {m}")


def s_worker_killed(e):
    """a killed worker: requests that sent nothing yet go to another worker; streams that
    did end with worker_failed naming the worker"""
    c = e.start_router()
    # w0 alone first, slowed: it takes all 12 requests, and at the kill each of its 3000-token
    # streams has sent something (waited for) while none of its 600-token non-streaming
    # requests can have ended (18 s at least): the 6 streams must fail, the 6 others re-run
    # on w1, which starts (at full speed) only once w0 holds everything
    w0 = e.start_worker("w0", slow_ms=30)
    want = {}
    for i in range(6):
        c.request(f"s{i}", PROMPT, max_tokens=3000, ignore_eos=True, stream=True)
        want[f"s{i}"] = 1
        c.request(f"n{i}", PROMPT, max_tokens=600, ignore_eos=True)
        want[f"n{i}"] = 1
    c.wait_chunks([f"s{i}" for i in range(6)])  # every stream has sent something
    end = time.time() + 60
    while True:
        w = worker_of(c.ping(), "w0")
        if w["running"] + w["waiting"] == 12:
            break
        check(time.time() < end, f"not all 12 requests at w0: {w}")
        time.sleep(0.05)
    e.start_worker("w1")
    w0.p.kill()
    r = c.collect(want, timeout=120)
    for i in range(6):
        err = r[f"s{i}"]["error"]
        check(err and err["code"] == "worker_failed" and "w0" in err["message"], f"s{i}: {err}")
        n = r[f"n{i}"]
        check(not n["error"], f"non-streaming n{i} was not re-dispatched: {n['error']}")
        check(n["finals"] and n["finals"][0]["finish_reason"] == "length", f"n{i}: {n['finals']}")
    pong = c.ping()
    check(worker_of(pong, "w0")["state"] == "dead", f"{pong}")
    # a new worker under the same name registers again
    e.start_worker("w0")
    c.request("again", PROMPT, max_tokens=3)
    check(c.collect({"again": 1})["again"]["finals"], "no service after the restart")


def s_bad_worker(e):
    """a hostile or confused worker: refused HELLOs, garbage, unknown rids, wild token ids"""
    c = e.start_router()
    name = os.path.basename(e.args.model.rstrip("/"))

    def dealer(ident):
        d = e.ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.ROUTING_ID, ident)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(e.wsock)
        e.clients.append(Client.__new__(Client))
        e.clients[-1].s = d
        return d

    def rx(d, timeout=30000):
        return msgpack.unpackb(d.recv(), raw=False) if d.poll(timeout) else None

    hello = {"type": "hello", "v": 1, "name": "bad", "device": "x", "model": name, "vocab_size": 1005,
             "max_model_len": 4096, "tp_size": 1, "kv_blocks_total": 10, "block_size": 16,
             "max_seqs": 2, "pid": 4242}
    vocab = c.ping()  # the router is up
    d = dealer(b"bad")
    d.send(msgpack.packb({"type": "heartbeat", "load": {}}))
    m = rx(d)
    check(m and m["type"] == "refuse", f"unregistered heartbeat: {m}")
    d.send(msgpack.packb(dict(hello, vocab_size=7)))
    m = rx(d)
    check(m and m["type"] == "refuse" and "vocabulary" in m["reason"], f"vocab mismatch: {m}")
    d.send(msgpack.packb(dict(hello, model="other-model")))
    m = rx(d)
    check(m and m["type"] == "refuse" and "model" in m["reason"], f"model mismatch: {m}")
    d.send(msgpack.packb(dict(hello, v=99)))
    m = rx(d)
    check(m and m["type"] == "refuse", f"version mismatch: {m}")
    d.send(msgpack.packb(hello))
    m = rx(d)
    check(m and m["type"] == "welcome", f"hello: {m}")
    load = {"phase": "ready", "running": 0, "waiting": 0, "queued_tokens": 0, "running_tokens": 0,
            "kv_blocks_free": 10, "kv_blocks_total": 10, "tokens_per_s": 0.0, "steps": 0,
            "preemptions": 0, "prefix_hit_tokens": 0, "prefix_query_tokens": 0,
            "prompt_tokens": 0, "generated_tokens": 0}
    check(worker_of(c.ping(), "bad")["state"] == "starting", "registered before its load said ready")
    d.send(msgpack.packb({"type": "heartbeat", "load": load}))  # its warm-up ran
    for junk in (b"", b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"type": "submit"}),
                 msgpack.packb({"type": "step", "tokens": [[1, 0]], "finishes": [], "load": load})):
        d.send(junk)
    d.send_multipart([b"a", b"b"])
    # tokens for a rid the router never gave: answered with an ABORT
    d.send(msgpack.packb({"type": "step", "tokens": [[999, 0, 5]], "finishes": [[998, 0, 1, 3, 1]],
                          "load": load}))
    m = rx(d)
    check(m and m["type"] == "abort" and m["rid"] == 999, f"stray tokens: {m}")
    # a real request: answer with wild ids and indices, then finish it properly
    c.request("q", PROMPT, max_tokens=5, n=2, stream=True)
    m = rx(d)
    check(m and m["type"] == "submit", f"submit: {m}")
    rid = m["rid"]
    d.send(msgpack.packb({"type": "step", "tokens": [[rid, 0, 2000000], [rid, 7, 5], [rid, 1, 300]],
                          "finishes": [[rid, 9, 0, 1, 1]], "load": load}))
    d.send(msgpack.packb({"type": "step", "tokens": [[rid, 0, 301]],
                          "finishes": [[rid, 0, 1, 10, 2], [rid, 1, 0, 10, 1]], "load": load}))
    r = c.collect({"q": 2})["q"]
    check(not r["error"] and sorted(r["finals"]) == [0, 1], f"{r}")
    check(r["finals"][0]["finish_reason"] == "length" and r["finals"][1]["finish_reason"] == "stop",
          f"{r['finals']}")
    check(e.router.alive(), "router died")
    # a REJECT other than busy ends the request with the worker's code
    c.request("rj", PROMPT, max_tokens=5)
    m = rx(d)
    check(m and m["type"] == "submit", f"submit: {m}")
    d.send(msgpack.packb({"type": "reject", "rid": m["rid"], "code": "invalid_field", "message": "nope"}))
    r = c.collect({"rj": 1})["rj"]
    check(r["error"] and r["error"]["code"] == "invalid_field" and "bad" in r["error"]["message"], f"{r}")
    check(worker_of(c.ping(), "bad")["state"] == "ready", "worker not ready")
    del vocab


def s_no_workers(e):
    """without a worker a request is answered no_workers after the wait"""
    c = e.start_router("--no-workers-wait-ms", "300")
    t = time.time()
    c.request("nw", PROMPT, max_tokens=3)
    r = c.collect({"nw": 1})["nw"]
    check(r["error"] and r["error"]["code"] == "no_workers", f"{r}")
    # never early; late only by scheduling (the upper bound: it did not wait for ever)
    check(0.25 < time.time() - t < 10, "wait not honoured")
    # a worker arriving during the wait serves it
    c.request("late", PROMPT, max_tokens=3)
    e.start_worker("w0", wait=False)
    r = c.collect({"late": 1}, timeout=60)["late"]
    check(r["finals"] or (r["error"] and r["error"]["code"] == "no_workers"), f"{r}")


def s_drain(e):
    """SIGTERM: running requests finish, new ones get shutting_down, exit 0, socket removed"""
    c = e.start_router("--drain-timeout", "120")
    e.start_worker("w0", slow_ms=20)  # 150 tokens: at least 3 s, still running at "new"
    c.request("long", PROMPT, max_tokens=150, ignore_eos=True, stream=True)
    m = c.recv(30000)
    check(m and m["type"] == "chunk", f"{m}")
    e.router.signal(signal.SIGTERM)
    # "new" only once the router handled the signal (its log), instead of sleeping on it
    end = time.time() + 60
    while "stopping:" not in open(e.router.log).read():
        check(time.time() < end, "the router did not start its drain")
        time.sleep(0.02)
    c.request("new", PROMPT, max_tokens=2)
    r = c.collect({"long": 1, "new": 1}, timeout=120)
    check(r["new"]["error"] and r["new"]["error"]["code"] == "shutting_down", f"{r['new']}")
    check(r["long"]["finals"] and r["long"]["finals"][0]["finish_reason"] == "length",
          f"long: finals {r['long']['finals']}, error {r['long']['error']}")
    rc = e.router.wait(60)
    check(rc == 0, f"router exit status {rc}")
    check(not os.path.exists(e.wsock[len("ipc://"):]), "worker socket file left behind")


SCENARIOS = {
    "basic": s_basic, "n_samples": s_n_samples, "stop_strings": s_stop_strings,
    "cancel": s_cancel, "deadline": s_deadline, "client_killed": s_client_killed,
    "flood": s_flood, "garbage": s_garbage, "protocol_errors": s_protocol_errors,
    "worker_killed": s_worker_killed, "bad_worker": s_bad_worker, "no_workers": s_no_workers, "drain": s_drain,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "tests", "data", "tiny-chat"))
    ap.add_argument("--fake", action="store_true", help="fake_worker.py instead of deras-worker")
    ap.add_argument("--kv-cache", default="256MiB", help="deras-worker --kv-cache-memory")
    ap.add_argument("--port", type=int, default=0, help="client port (default: a free one)")
    ap.add_argument("--verbose", action="store_true", help="show the processes' logs after each scenario")
    ap.add_argument("scenarios", nargs="*", default=list(SCENARIOS))
    args = ap.parse_args()
    failed = 0
    for name in args.scenarios:
        e = Env(args)
        t = time.time()
        try:
            SCENARIOS[name](e)
            problem = e.stop()
            if problem:
                raise AssertionError(problem)
            print(f"ok   {name} ({time.time() - t:.1f} s)", flush=True)
            if args.verbose:
                print(e.logs(), flush=True)
            shutil.rmtree(e.tmp, ignore_errors=True)  # kept, with the logs, on failure
        except Exception as ex:  # noqa: BLE001 - report and go on
            failed += 1
            e.stop()
            print(f"FAIL {name}: {ex}\n{e.logs()}", flush=True)
    print(f"{len(args.scenarios) - failed}/{len(args.scenarios)} scenarios passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
