# SPDX-License-Identifier: Apache-2.0
"""test_serving.py - deras served for real: router, workers and clients as separate processes.

What the router/worker issue asks to see, each test printing its figures:
  - 64 concurrent streaming clients (the Python client, one per thread) against a router
    with two CPU workers: every request completes, each greedy output equals that prompt
    run alone, streamed and non-streamed text are identical, both workers served work;
  - seeded sampling gives the same tokens alone and batched with others;
  - a corpus of hostile frames, each answered with its error code, while normal requests
    keep being served during and after;
  - a flood of 10,000 requests against a small queue: the excess gets `busy` at once, the
    accepted ones complete, the router's memory stays bounded (measured from /proc);
  - clients killed mid-stream: the workers' reported KV usage returns to its baseline;
  - `deras serve` under load: Ctrl-C lets in-flight requests finish, exit 0, nothing left;
  - two `deras serve` instances on one host, each with its own ports and admin socket, both
    serving, both drained by derasctl;
  - (test model) a step longer than the router's dead-worker timeout does not kill the
    worker: its pulse thread keeps it alive.

Where a request must still run when the test acts (a kill, a signal), or must take long
enough to tell two outcomes apart, the workers get the test-only step delay
(cluster.STEP_DELAY, docs/worker.md): the test sets how long a step takes, not the CPU.

Model: tests/data/tiny-chat (random Llama weights, real 1,005-token tokenizer: gibberish but
deterministic and fast), except the long-step test, which needs the test model's slow steps.

    DERAS_BUILD_DIR=build python3 tests/integration/test_serving.py [Class.test ...]
Exit 77 (skipped) without pyzmq/msgpack or the built binaries. The processes are started by
cluster.py (shared with test_failures.py).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from cluster import (DERAS, DERASCTL, ROOT, STEP_DELAY, TINY, VOCAB, Chunk, Client, Cluster,
                     DerasError, collect_stream, free_port, proc_status)

import msgpack  # after cluster, which skips (exit 77) where it is missing
import zmq


PROMPTS = ["Request %d: %s" % (i, " ".join(["alpha", "beta", "gamma", "delta", "epsilon",
                                            "zeta", "eta", "theta"][: 1 + i % 8]) * (1 + i % 5))
           for i in range(64)]


class Serving(unittest.TestCase):
    """Two workers behind one router, tiny-chat."""

    @classmethod
    def setUpClass(cls):
        cls.c = Cluster()

    @classmethod
    def tearDownClass(cls):
        codes = cls.c.stop()
        assert codes == [0] * len(codes), "exit codes %r" % (codes,)

    def test_64_concurrent_streaming_clients_match_each_prompt_alone(self):
        alone = []
        for i, p in enumerate(PROMPTS):
            r = self.c.client.complete(p, max_tokens=8 + i % 41, temperature=0)
            alone.append((r.text, r.token_ids[0], r.finish_reasons[0]))
        served0 = {w["name"]: w["served"] for w in self.c.pong()}

        results, errors = [None] * 64, []
        barrier = threading.Barrier(64)

        def run(i):
            try:
                cl = Client(self.c.address, timeout=120)
                barrier.wait()
                results[i] = collect_stream(cl, PROMPTS[i], max_tokens=8 + i % 41, temperature=0)
                cl.close()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((i, repr(e)))

        t0 = time.monotonic()
        threads = [threading.Thread(target=run, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        wall = time.monotonic() - t0
        self.assertEqual(errors, [])
        for i in range(64):
            self.assertIsNotNone(results[i], "client %d did not finish" % i)
            self.assertEqual(results[i], alone[i], "client %d: streamed concurrently vs alone" % i)
        served = {w["name"]: w["served"] - served0[w["name"]] for w in self.c.pong()}
        self.assertTrue(all(n > 0 for n in served.values()), served)
        print("64 concurrent streaming clients: 64/64 complete in %.2f s, every text and token "
              "list identical to the same prompt run alone (non-streaming); requests per "
              "worker %s" % (wall, served))

    def test_seeded_sampling_is_the_same_alone_and_batched(self):
        params = [dict(temperature=0.9, top_p=0.95, seed=1000 + i, max_tokens=32, ignore_eos=True)
                  for i in range(8)]
        alone = [self.c.client.complete(PROMPTS[i], **params[i]).token_ids[0] for i in range(8)]
        out, errors = [None] * 8, []

        def run(i):
            try:
                cl = Client(self.c.address, timeout=120)
                out[i] = cl.complete(PROMPTS[i], **params[i]).token_ids[0]
                cl.close()
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

        def noise(j):
            cl = Client(self.c.address, timeout=120)
            cl.complete(PROMPTS[20 + j], temperature=1.0, max_tokens=40)
            cl.close()

        threads = [threading.Thread(target=noise, args=(j,)) for j in range(24)]
        threads += [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        self.assertEqual(out, alone)
        print("seeded sampling: 8 requests (temperature 0.9, top_p 0.95) give the same tokens "
              "alone and batched among 24 others")

    def test_hostile_frames_get_their_codes_while_service_continues(self):
        ok = {"type": "request", "id": "ok", "prompt": "hello", "max_tokens": 4}

        def req(**kw):
            m = dict(ok)
            m.update(kw)
            return msgpack.packb({k: v for k, v in m.items() if v is not None})

        def raw_str(field_bytes, value):
            """A request whose string field holds raw (invalid UTF-8) bytes."""
            frame = req(**{field_bytes: "QQQ"})
            return frame.replace(b"\xa3QQQ", b"\xa3" + value)

        huge_prompt = msgpack.packb({"type": "request", "id": "huge", "prompt": "x" * (100 << 20)})
        cases = [
            ("not msgpack", b"\xc1\xc1garbage", "malformed"),
            ("truncated msgpack", req(id="t1")[:-2], "malformed"),
            ("array bomb (2^32 elements in 5 bytes)", b"\xdd\xff\xff\xff\xff", "malformed"),
            ("not a map", msgpack.packb([1, 2, 3]), "malformed"),
            ("trailing bytes", req(id="t2") + b"\x00", "malformed"),
            ("unknown type", msgpack.packb({"type": "nope"}), "unknown_type"),
            ("unsupported version", req(id="v2", v=2), "unsupported_version"),
            ("missing id", msgpack.packb({"type": "request", "prompt": "x"}), "missing_field"),
            ("missing prompt", msgpack.packb({"type": "request", "id": "np"}), "missing_field"),
            ("unknown field", req(id="u1", temprature=0.5), "invalid_field"),
            ("max_tokens of the wrong type", req(id="w1", max_tokens="ten"), "invalid_field"),
            ("prompt of the wrong type", req(id="w2", prompt=123), "invalid_field"),
            ("temperature NaN", req(id="n1", temperature=float("nan")), "value_out_of_range"),
            ("temperature inf", req(id="n2", temperature=float("inf")), "value_out_of_range"),
            ("temperature negative", req(id="n3", temperature=-1.0), "value_out_of_range"),
            ("top_p 0", req(id="n4", top_p=0.0), "value_out_of_range"),
            ("top_p 2", req(id="n5", top_p=2.0), "value_out_of_range"),
            ("presence_penalty 3", req(id="n6", presence_penalty=3.0), "value_out_of_range"),
            ("repetition_penalty 0", req(id="n7", repetition_penalty=0.0), "value_out_of_range"),
            ("top_k negative", req(id="n8", top_k=-5), "value_out_of_range"),
            ("max_tokens 0", req(id="m0", max_tokens=0), "value_out_of_range"),
            ("max_tokens huge", req(id="m1", max_tokens=2 ** 40), "limit_exceeded"),
            ("max_tokens -1", req(id="m2", max_tokens=-1), "value_out_of_range"),
            ("n 17", req(id="c1", n=17), "limit_exceeded"),
            ("logprobs 21", req(id="c2", logprobs=21), "limit_exceeded"),
            ("17 stop strings", req(id="c3", stop=["s%d" % i for i in range(17)]), "limit_exceeded"),
            ("a 300-byte stop string", req(id="c4", stop=["x" * 300]), "limit_exceeded"),
            ("17 stop token ids", req(id="c5", stop_token_ids=list(range(17))), "limit_exceeded"),
            ("a 65-byte id", req(id="i" * 65), "limit_exceeded"),
            ("negative prompt token id", req(id="k1", prompt=None, prompt_ids=[5, -1]),
             "token_out_of_range"),
            ("prompt token id = vocab", req(id="k2", prompt=None, prompt_ids=[5, VOCAB]),
             "token_out_of_range"),
            ("stop token id = vocab", req(id="k3", stop_token_ids=[VOCAB]), "token_out_of_range"),
            ("prompt + max_tokens beyond the context",
             req(id="k4", prompt=None, prompt_ids=[7] * 4000, max_tokens=200),
             "context_length_exceeded"),
            ("invalid UTF-8 in the prompt", raw_str("prompt", b"\xff\xfe\xfd"), "invalid_utf8"),
            ("invalid UTF-8 in a stop string", req(id="s1", stop=["QQQ"]).replace(
                b"\xa3QQQ", b"\xa3\xc3\x28\x80"), "invalid_utf8"),
            ("a 100 MB frame", huge_prompt, "message_too_large"),
            ("cancel of an unknown id", msgpack.packb({"type": "cancel", "id": "nobody"}),
             "unknown_request"),
        ]
        # normal traffic throughout
        stop_bg, bg_done, bg_errors = threading.Event(), [0], []

        def background():
            cl = Client(self.c.address, timeout=60)
            while True:  # at least one request, however late this thread starts
                try:
                    r = cl.complete("steady", max_tokens=6, temperature=0)
                    assert r.finish_reasons[0] in ("length", "stop")
                    bg_done[0] += 1
                except Exception as e:  # noqa: BLE001
                    bg_errors.append(repr(e))
                if stop_bg.is_set():
                    break
            cl.close()

        bg = threading.Thread(target=background)
        bg.start()
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(self.c.address)
        got = {}
        try:
            for name, frame, want in cases:
                s.send(frame)
                if not s.poll(60000):
                    self.fail("%s: no reply within 60 s" % name)
                reply = msgpack.unpackb(s.recv(), raw=False)
                got[name] = (reply.get("type"), reply.get("code"), reply.get("message", ""))
            # duplicate id: a long request, the same id again while it is live
            s.send(req(id="dup", prompt="long one", max_tokens=3000, ignore_eos=True, stream=True))
            s.send(req(id="dup"))
            dup_code = None
            deadline = time.monotonic() + 60
            while dup_code is None and time.monotonic() < deadline:
                if s.poll(1000):
                    m = msgpack.unpackb(s.recv(), raw=False)
                    if m.get("type") == "error":
                        dup_code = m.get("code")
            s.send(msgpack.packb({"type": "cancel", "id": "dup"}))
        finally:
            s.close()
            stop_bg.set()
            bg.join(60)
        for name, _, want in cases:
            typ, code, message = got[name]
            self.assertEqual((typ, code), ("error", want), "%s: %s" % (name, message))
        self.assertEqual(dup_code, "duplicate_id")
        self.assertIn("4000", got["prompt + max_tokens beyond the context"][2])
        self.assertEqual(bg_errors, [])
        self.assertGreater(bg_done[0], 0)
        self.assertTrue(self.c.alive())
        r = self.c.client.complete("after the storm", max_tokens=8, temperature=0)
        self.assertEqual(len(r.token_ids[0]), 8)
        print("hostile corpus: %d frames (+ duplicate id), each answered with its code; %d "
              "normal requests served meanwhile, router and workers alive"
              % (len(cases), bg_done[0]))

    def test_clients_killed_mid_stream_free_their_kv(self):
        # a cluster of its own whose steps take 20 ms more: a 3500-token stream would run for
        # over 70 s, so blocks back within the bound below were freed by the kill, not by
        # the requests running to their end (however fast the machine)
        c = Cluster(worker_env={STEP_DELAY: "20"})
        try:
            c.wait_kv_baseline()  # a fresh cluster: nothing held (it raises after 60 s)
            script = ("import sys; sys.path.insert(0, %r)\n"
                      "from deras_client import Client\n"
                      "c = Client(%r, timeout=60)\n"
                      "s = c.stream('keep talking', max_tokens=3500, ignore_eos=True, "
                      "temperature=0)\n"
                      "next(s); print('streaming', flush=True)\n"
                      "for ev in s: pass\n") % (os.path.join(ROOT, "tools", "clients", "python"),
                                                c.address)
            procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
                     for _ in range(16)]
            for p in procs:
                self.assertEqual(p.stdout.readline().strip(), b"streaming")
            busy = c.pong()
            self.assertEqual(sum(w["running"] + w["waiting"] for w in busy), 16, busy)
            t0 = time.monotonic()
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()
                p.stdout.close()
            dt = c.wait_kv_baseline()
            # the router notices the gone clients and aborts their requests at once: well
            # under the 70 s they would otherwise hold their blocks (30 s of room for a
            # loaded machine; it takes a fraction of a second)
            self.assertLess(dt, 30.0)
            print("16 clients killed mid-stream: running 0 and every KV block free again %.2f s "
                  "after the kill (%.2f s total)" % (dt, time.monotonic() - t0))
        finally:
            codes = c.stop()
        self.assertEqual(codes, [0, 0, 0])


class Flood(unittest.TestCase):
    """A small admission queue under 10,000 requests fired at once."""

    def test_flood_gets_busy_quickly_and_memory_stays_bounded(self):
        # steps 10 ms longer (the test-only knob): the workers finish at most 16 requests per
        # 80 ms, so most of the flood finds the queue full however fast the machine is
        # compared with this test's sending
        c = Cluster(n_workers=2, router_args=("--max-queued-requests", "32",
                                              "--max-queued-tokens", "4096"),
                    worker_args=("--max-seqs", "8"), worker_env={STEP_DELAY: "10"})
        try:
            for i in range(50):  # warm-up: buffers and pools at their working size
                c.client.complete(PROMPTS[i % 64], max_tokens=4)
            rss0 = proc_status(c.router.pid, "VmRSS")
            ctx = zmq.Context.instance()
            socks = []
            for _ in range(4):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.setsockopt(zmq.SNDHWM, 0)
                s.setsockopt(zmq.RCVHWM, 0)
                s.connect(c.address)
                socks.append(s)
            N = 10000
            sent_at, answered, busy_lat = {}, {}, []
            peak = rss0
            poller = zmq.Poller()
            for s in socks:
                poller.register(s, zmq.POLLIN)

            def take(timeout_ms):
                for s, _ in poller.poll(timeout_ms):
                    while True:
                        try:
                            m = msgpack.unpackb(s.recv(zmq.NOBLOCK), raw=False)
                        except zmq.Again:
                            break
                        rid = m.get("id")
                        if m["type"] == "error":
                            answered[rid] = m["code"]
                            if m["code"] == "busy":
                                busy_lat.append(time.monotonic() - sent_at[rid])
                        elif m["type"] == "final":
                            answered[rid] = "final:" + m["finish_reason"]

            t0 = time.monotonic()
            for i in range(N):
                rid = "f%d" % i
                sent_at[rid] = time.monotonic()
                socks[i % 4].send(msgpack.packb({"type": "request", "id": rid,
                                                 "prompt": PROMPTS[i % 64], "max_tokens": 8}))
                # replies are read while sending (every 50 requests), so a busy answer's
                # latency is the router's, not the time this loop takes to send the rest
                if i % 50 == 49:
                    take(0)
            deadline = time.monotonic() + 300
            while len(answered) < N and time.monotonic() < deadline:
                take(1000)
                peak = max(peak, proc_status(c.router.pid, "VmRSS"))
            wall = time.monotonic() - t0
            for s in socks:
                s.close()
            hwm = proc_status(c.router.pid, "VmHWM")
            codes = {}
            for v in answered.values():
                codes[v] = codes.get(v, 0) + 1
            self.assertEqual(len(answered), N, "unanswered: %d" % (N - len(answered)))
            self.assertEqual(set(codes) - {"busy", "final:length", "final:stop"}, set(), codes)
            self.assertGreater(codes.get("busy", 0), N // 2)
            accepted = N - codes.get("busy", 0)
            busy_lat.sort()
            p50, p99 = busy_lat[len(busy_lat) // 2], busy_lat[int(len(busy_lat) * 0.99)]
            # answered at once (milliseconds): a busy held until a slot freed would wait for
            # requests that take 80 ms each, 16 at a time, behind thousands (tens of seconds
            # for most of them); 10 s is room for a loaded machine stalling this process or
            # the router working through the flood's backlog
            self.assertLess(p99, 10.0)
            self.assertLess(hwm - rss0, 64 * 1024, "router memory grew by %d kB" % (hwm - rss0))
            self.assertTrue(c.alive())
            print("flood of %d requests (queue cap 32): %d busy (answered in p50 %.1f ms, p99 "
                  "%.1f ms), %d accepted and all completed, in %.1f s; router RSS %d kB before, "
                  "peak %d kB (high-water mark %d kB, +%d kB)"
                  % (N, codes.get("busy", 0), p50 * 1e3, p99 * 1e3, accepted, wall, rss0, peak,
                     hwm, hwm - rss0))
        finally:
            codes = c.stop()
        self.assertEqual(codes, [0, 0, 0])


TOKENS = 400  # of each request in flight when `deras serve` is signalled


class Serve(unittest.TestCase):
    """`deras serve`: one command; Ctrl-C (SIGINT) and SIGTERM (systemctl stop, kill) drain."""

    def test_two_instances_each_with_its_own_ports_and_admin_socket(self):
        d = tempfile.mkdtemp(prefix="deras-serve-two-")
        inst = []
        try:
            for k in range(2):
                port, mport = free_port(), free_port()
                admin = "ipc://%s/admin-%d.sock" % (d, k)
                log = open(os.path.join(d, "serve-%d.log" % k), "w+")
                p = subprocess.Popen([DERAS, "serve", "--model", TINY,
                                      "--listen", "tcp://127.0.0.1:%d" % port, "--admin", admin,
                                      "--metrics-listen", "127.0.0.1:%d" % mport,
                                      "--num-workers", "1", "--threads", "1",
                                      "--kv-cache-memory", "64MiB"],
                                     stdout=log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, DERAS_RUNTIME_DIR=d))
                inst.append((p, "tcp://127.0.0.1:%d" % port, admin, mport, log))
            texts = []
            for p, address, admin, mport, log in inst:
                health = None
                deadline = time.monotonic() + 60
                while health != 0:
                    self.assertIsNone(p.poll(), "serve exited: %s" % open(log.name).read()[-2000:])
                    self.assertLess(time.monotonic(), deadline, "instance never became ready")
                    health = subprocess.run([DERASCTL, "--admin", admin, "health"],
                                            capture_output=True).returncode
                    time.sleep(0.1)
                cl = Client(address, timeout=60)
                texts.append(cl.complete("Hello", max_tokens=8, temperature=0).text)
                cl.close()
                m = subprocess.run(["python3", "-c", "import urllib.request,sys; print(urllib."
                                    "request.urlopen(sys.argv[1]).status)",
                                    "http://127.0.0.1:%d/health" % mport],
                                   capture_output=True, text=True)
                self.assertEqual(m.stdout.strip(), "200", m.stderr)
            self.assertEqual(texts[0], texts[1])  # the same model, greedy: the same text
            for p, address, admin, mport, log in inst:
                r = subprocess.run([DERASCTL, "--admin", admin, "drain", "--all", "--timeout",
                                    "10"], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                st = subprocess.run([DERASCTL, "--admin", admin, "status", "--json"],
                                    capture_output=True, text=True)
                self.assertEqual([w["state"] for w in json.loads(st.stdout)["workers"]],
                                 ["drained"])
            print("two deras serve instances: both served %r; both drained through their own "
                  "admin sockets" % texts[0])
        finally:
            for p, address, admin, mport, log in inst:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)
            for p, address, admin, mport, log in inst:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                log.close()
            shutil.rmtree(d, ignore_errors=True)

    def drain_under_load(self, sig):
        """Serve with 2 workers, 8 requests streaming, then `sig` to serve: all 8 must finish,
        serve exit 0, and no process, shared-memory segment or socket file be left."""
        d = tempfile.mkdtemp(prefix="deras-serve-test-")
        address = "ipc://%s/clients.sock" % d
        shm_before = set(os.listdir("/dev/shm"))
        log = open(os.path.join(d, "serve.log"), "w+")
        # its workers inherit the test-only step delay: 400 tokens take at least 10 s, so all
        # 8 requests are surely in flight when the signal comes, however fast the machine
        # (only a 10 s stall of this test between their first chunks and the signal could
        # miss them), and they finish well within the router's drain timeout
        serve = subprocess.Popen([DERAS, "serve", "--model", TINY, "--listen", address,
                                  "--num-workers", "2", "--threads", "1", "--kv-cache-memory",
                                  "64MiB", "--router-arg", "--metrics-listen=none"],
                                 stdout=log, stderr=subprocess.STDOUT,
                                 env=dict(os.environ, DERAS_RUNTIME_DIR=d,  # its admin socket
                                          **{STEP_DELAY: "25"}))
        try:
            cl = Client(address, timeout=60)
            deadline = time.monotonic() + 60
            while True:
                try:
                    if sum(w["state"] == "ready" for w in cl.ping(timeout=1)["workers"]) == 2:
                        break
                except DerasError:
                    pass
                self.assertLess(time.monotonic(), deadline, "serve never became ready")
                time.sleep(0.1)
            children = [int(p) for p in subprocess.run(
                ["pgrep", "-P", str(serve.pid)], capture_output=True, text=True).stdout.split()]
            self.assertEqual(len(children), 3)  # router + 2 workers
            results, errors, streaming = [None] * 8, [], [False] * 8

            def run(i):
                try:
                    c2 = Client(address, timeout=120)
                    ids, finals = [], []
                    for ev in c2.stream(PROMPTS[i], max_tokens=TOKENS, ignore_eos=True,
                                        temperature=0):
                        if isinstance(ev, Chunk):
                            ids.extend(ev.token_ids)
                            streaming[i] = True
                        else:
                            finals.append(ev.finish_reason)
                    results[i] = (ids, finals)
                    c2.close()
                except Exception as e:  # noqa: BLE001
                    errors.append(repr(e))

            threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 60
            while not all(streaming) and time.monotonic() < deadline:
                time.sleep(0.01)
            in_flight = sum(streaming[i] and results[i] is None for i in range(8))
            serve.send_signal(sig)
            for t in threads:
                t.join(120)
            code = serve.wait(60)
            cl.close()
        finally:
            if serve.poll() is None:
                serve.kill()
                serve.wait()
        log.flush()
        log.seek(0)
        text = log.read()
        log.close()
        self.assertEqual(errors, [], text[-3000:])
        self.assertEqual(code, 0, text[-3000:])
        self.assertEqual(in_flight, 8, "requests streaming when the signal was sent")
        for i, r in enumerate(results):
            self.assertIsNotNone(r)
            self.assertEqual((len(r[0]), r[1]), (TOKENS, ["length"]), "request %d" % i)
        for pid in children:
            self.assertFalse(os.path.exists("/proc/%d" % pid), "child %d left behind" % pid)
        self.assertEqual(sorted(os.listdir(d)), ["serve.log"], "socket files left behind")
        self.assertEqual(set(os.listdir("/dev/shm")) - shm_before, set(),
                         "shared-memory segments left behind")
        shutil.rmtree(d, ignore_errors=True)
        return signal.Signals(sig).name

    def test_ctrl_c_under_load_finishes_in_flight_and_leaves_nothing(self):
        name = self.drain_under_load(signal.SIGINT)
        print("deras serve + %s (Ctrl-C) with 8 requests streaming: all 8 finished their %d "
              "tokens, exit 0, router and 2 workers gone, no socket file, socket directory or "
              "shared-memory segment left" % (name, TOKENS))

    def test_sigterm_under_load_finishes_in_flight_and_leaves_nothing(self):
        name = self.drain_under_load(signal.SIGTERM)
        print("deras serve + %s with 8 requests streaming: all 8 finished their %d tokens, "
              "exit 0, router and 2 workers gone, no socket file, socket directory or "
              "shared-memory segment left" % (name, TOKENS))


class LongSteps(unittest.TestCase):
    """The test model on one thread: a single prefill step takes longer than the router's
    dead-worker timeout, and the worker must stay alive through it."""

    def test_a_step_longer_than_the_worker_timeout_does_not_kill_the_worker(self):
        model = os.environ.get("DERAS_TEST_MODEL", "")
        if not os.path.exists(model):
            if os.environ.get("DERAS_REQUIRE_MODEL") == "1":
                self.fail("test model not found at %r" % model)
            raise unittest.SkipTest("test model not found")
        # the stuck timeout (no step completed while busy) is set far beyond this one long
        # step (tens of seconds under the sanitizers on a busy machine): this test is about
        # liveness only. Every serving step takes 1.5 s more than its work (the test-only
        # step delay), so the 400-token prefill step outlasts the 1 s timeout on any machine,
        # however fast: its forward pass still runs, the delay only makes it long for sure.
        c = Cluster(model=model, n_workers=1, kv="256MiB",
                    router_args=("--worker-timeout-ms", "1000", "--heartbeat-ms", "200",
                                 "--stuck-timeout-ms", "600000"),
                    worker_args=("--max-batch-tokens", "1024"), worker_env={STEP_DELAY: "1500"})
        try:
            # 400 tokens in one step: a real prefill (about 3 s on a release build, several
            # times that under the sanitizers) plus 1.5 s
            ids = [(i * 37) % 40000 + 100 for i in range(400)]
            t0 = time.monotonic()
            try:
                r = c.client.complete(prompt_ids=ids, max_tokens=2, temperature=0, timeout=600)
            except DerasError:
                print(c.log_text())
                raise
            dt = time.monotonic() - t0
            self.assertEqual(len(r.token_ids[0]), 2)
            self.assertEqual([w["state"] for w in c.pong()], ["ready"])
            self.assertGreater(dt, 3.0, "2 steps of at least 1.5 s each took %.2f s" % dt)
            print("a 400-token prefill step of %.1f s with a 1 s dead-worker timeout: the "
                  "worker stayed ready (pulse heartbeats)" % dt)
        finally:
            codes = c.stop()
        self.assertEqual(codes, [0, 0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
