# SPDX-License-Identifier: Apache-2.0
"""test_ops.py - operating deras-router: derasctl, drain, health, stuck workers, metrics.

What the operations issue (router side) asks to see, each test printing its figures:
  - health: 503 (HTTP /health, `derasctl health`) while no worker is ready, a worker
    shown "starting" during its warm-up, 200 once one is ready; /live always 200;
  - drain under steady load from concurrent clients: no request fails, the drained worker
    receives nothing new after the drain began, `status` shows it drained and empty; a
    drain whose timeout passes ends what is left with abort (drain_timeout); undrain;
  - /metrics parses with prometheus_client's parser and its counters match the requests
    sent (and `derasctl metrics` says the same);
  - a worker stopped with SIGSTOP is dead within the bound (3 s by default): its requests
    that had sent nothing run on the other worker, streams end with worker_failed naming
    it, nothing hangs; after SIGCONT it registers again;
  - a worker that heartbeats (its pulse) but completes no step while busy is "stuck" after
    --stuck-timeout-ms, its requests re-run elsewhere or fail, and "dead" once silent;
  - the admin socket: mode 0600, strict decoding, tcp only with CURVE keys;
  - speculative decoding (n-gram proposer): each final's usage carries its sample's drafts
    and acceptances, and they add up to the worker's counters in /metrics (labelled with
    the proposer), in `derasctl status` and in `deras bench`; greedy output is unchanged.

Model: tests/data/tiny-chat (random weights, real tokenizer: fast and deterministic); the
stuck worker is fake_worker.py (a real engine cannot be made to hang on demand).

    DERAS_BUILD_DIR=build python3 tests/integration/test_ops.py [Class.test ...]
Exit 77 (skipped) without pyzmq/msgpack/prometheus_client or the built binaries.
"""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:
    print("SKIPPED: %s (install python3-prometheus-client)" % e)
    sys.exit(77)

from cluster import (DERAS, ROUTER, STEP_DELAY, TINY, VOCAB, Chunk, Client,  # noqa: E402
                     Cluster, DerasError, free_port)
import msgpack  # noqa: E402  (after cluster, which skips (exit 77) where it is missing)
import zmq  # noqa: E402


def http_get(url, timeout=30):
    """(status, body) of a GET (the timeout is a hang guard)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def ctl_json(c, *args):
    rc, out, err = c.ctl(*args, "--json")
    if not out.strip():
        raise AssertionError("derasctl %s: no JSON (rc %d): %s" % (" ".join(args), rc, err))
    return rc, json.loads(out)


def worker_row(status, name):
    for w in status["workers"]:
        if w["name"] == name:
            return w
    raise AssertionError("no worker %s in %r" % (name, status))


def wait_for(what, pred, timeout=60, every=0.05):
    """Poll pred() until it returns a true value; that value, or AssertionError."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(every)


def state_of(c, name):
    """Worker `name`'s state, or None while the router has not heard of it (a worker just
    started registers when it gets to it, sooner or later depending on the machine)."""
    rc, st = ctl_json(c, "status")
    return next((w["state"] for w in st["workers"] if w["name"] == name), None)


def samples(text):
    """{(name, ((label, value), ...)): value} of a Prometheus text (the official parser)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


class Health(unittest.TestCase):
    def test_not_ready_until_a_worker_finished_its_warm_up(self):
        # no death here: a worker timeout far beyond any stall of a loaded machine
        c = Cluster(n_workers=0, router_args=("--heartbeat-ms", "100", "--worker-timeout-ms", "30000"))
        try:
            code, body = http_get(c.metrics_url + "/health")
            self.assertEqual((code, body), (503, "not ready: no worker is ready\n"))
            self.assertEqual(http_get(c.metrics_url + "/live"), (200, "live\n"))
            rc, h = ctl_json(c, "health")
            self.assertEqual((rc, h["ready"], h["status"], h["workers_ready"]), (1, False, 503, 0))
            # a worker whose warm-up lasts until the test ends it (the file): registered,
            # "starting", still not ready - however long the checks take on a loaded machine
            warmed_up = os.path.join(c.dir, "slow-warmed-up")
            c.add_worker("slow", fake=True, args=("--starting-until", warmed_up))
            wait_for("slow to show as starting",
                     lambda: any(w["name"] == "slow" for w in ctl_json(c, "status")[1]["workers"]))
            self.assertEqual(state_of(c, "slow"), "starting")
            self.assertEqual(http_get(c.metrics_url + "/health")[0], 503)
            self.assertEqual(c.ctl("health")[0], 1)
            time.sleep(0.5)  # heartbeats (every 100 ms) keep saying "starting": it stays so
            self.assertEqual(state_of(c, "slow"), "starting")
            self.assertEqual(http_get(c.metrics_url + "/health")[0], 503)
            t0 = time.monotonic()
            with open(warmed_up, "w"):
                pass
            wait_for("slow to be ready", lambda: state_of(c, "slow") == "ready")
            starting_s = time.monotonic() - t0
            self.assertEqual(http_get(c.metrics_url + "/health"), (200, "ready\n"))
            rc, out, _ = c.ctl("health")
            self.assertEqual(rc, 0, out)
            # deras-worker: ready only after its warm-up step, which its log reports first
            c.add_worker("w0")
            wait_for("w0 ready", lambda: any(w["name"] == "w0" and w["state"] == "ready"
                                             for w in ctl_json(c, "status")[1]["workers"]))
            with open(os.path.join(c.dir, "w0.log")) as f:
                self.assertIn("warm-up step done", f.read())
            r = c.client.complete("hello", max_tokens=4, temperature=0)
            self.assertEqual(len(r.token_ids[0]), 4)
            print("health: 503 with no worker; a worker warming up shown starting (health 503) "
                  "until its warm-up ended, ready %.2f s later (health 200); deras-worker ready "
                  "after its warm-up step" % starting_s)
        finally:
            codes = c.stop()
        self.assertEqual(codes[-1], 0, "router exit status")


class Drain(unittest.TestCase):
    def test_drain_under_steady_load_fails_nothing_and_the_worker_gets_nothing_new(self):
        c = Cluster(n_workers=2)
        stop, lock = threading.Event(), threading.Lock()
        done, failures = [0], []

        def load(i):
            cl = Client(c.address, timeout=60)
            k = 0
            while not stop.is_set():
                try:
                    if k % 2:
                        r = cl.complete("client %d request %d" % (i, k), max_tokens=400,
                                        ignore_eos=True)
                        reasons = r.finish_reasons
                    else:
                        reasons = [ev.finish_reason for ev in cl.stream(
                            "client %d stream %d" % (i, k), max_tokens=400, ignore_eos=True)
                            if not isinstance(ev, Chunk)]
                    if reasons != ["length"]:
                        raise AssertionError("finish reasons %r" % reasons)
                    with lock:
                        done[0] += 1
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    with lock:
                        failures.append(repr(e))
                k += 1
            cl.close()

        threads = [threading.Thread(target=load, args=(i,)) for i in range(8)]
        codes = None
        try:
            for t in threads:
                t.start()
            wait_for("both workers busy", lambda: all(
                w["requests"] > 0 for w in ctl_json(c, "status")[1]["workers"]))
            # the moment the drain begins: what w0 had been given so far. A drain that found
            # w0 idle (between two requests) would be moot: undone and tried again
            for attempt in range(50):
                rc, first = ctl_json(c, "drain", "w0", "--no-wait")
                self.assertEqual(rc, 0)
                at_drain = worker_row(first, "w0")
                if at_drain["requests"] > 0:
                    break
                self.assertEqual(c.ctl("undrain", "w0")[0], 0)
                time.sleep(0.05)
            self.assertGreater(at_drain["requests"], 0, "w0 idle when the drain began: moot")
            t0 = time.monotonic()
            rc, rep = ctl_json(c, "drain", "w0", "--timeout", "60")
            drain_s = time.monotonic() - t0
            self.assertEqual(rc, 0, rep)
            self.assertEqual((rep["drained"], rep["timed_out"], rep["aborted"]), (True, False, 0))
            # the load goes on: w1 takes several new requests, w0 none
            w1_before = worker_row(ctl_json(c, "status")[1], "w1")["served"]
            wait_for("w1 to take 4 new requests", lambda: worker_row(
                ctl_json(c, "status")[1], "w1")["served"] >= w1_before + 4, timeout=60, every=0.2)
            rc, st = ctl_json(c, "status")
            w0 = worker_row(st, "w0")
            self.assertEqual(w0["state"], "drained")
            self.assertEqual((w0["requests"], w0["running"], w0["waiting"]), (0, 0, 0))
            self.assertEqual(w0["served"], at_drain["served"], "w0 got requests after the drain")
            rc, table, _ = c.ctl("status")
            self.assertTrue(any(line.split()[:2] == ["w0", "drained"] for line in table.splitlines()),
                            table)
            metrics = samples(http_get(c.metrics_url + "/metrics")[1])
            self.assertEqual(metrics[("deras_worker_requests_running", (("worker", "w0"),))], 0)
            # undrain: w0 takes requests again
            rc, out, err = c.ctl("undrain", "w0")
            self.assertEqual(rc, 0, err)
            wait_for("w0 to get requests again",
                     lambda: worker_row(ctl_json(c, "status")[1], "w0")["served"] > at_drain["served"])
            # the load lasts until more than 20 requests completed, however slow the machine
            wait_for("21 completed requests", lambda: done[0] > 20 or failures, timeout=300)
        finally:
            stop.set()
            for t in threads:
                t.join(120)
            codes = c.stop()
        self.assertEqual(failures, [])
        self.assertGreater(done[0], 20)
        self.assertEqual(codes, [0, 0, 0])
        print("drain under load (8 clients, %d requests completed, 0 failed): w0 had %d requests "
              "in flight, drained in %.2f s, then got nothing new (served stayed %d) while w1 "
              "took new ones; undrain put it back to work"
              % (done[0], at_drain["requests"], drain_s, at_drain["served"]))

    def test_a_drain_timeout_ends_what_is_left_with_abort(self):
        # every step takes 20 ms more (the test-only knob): 3500 tokens take over 70 s, so the
        # streams are surely running when the 0.5 s drain timeout ends them
        c = Cluster(n_workers=1, worker_env={STEP_DELAY: "20"})
        try:
            streams = [c.client.stream("long %d" % i, max_tokens=3500, ignore_eos=True)
                       for i in range(3)]
            for s in streams:
                next(iter(s))  # each has started streaming
            t0 = time.monotonic()
            rc, rep = ctl_json(c, "drain", "--all", "--timeout", "0.5")
            dt = time.monotonic() - t0
            self.assertEqual(rc, 0, rep)
            self.assertEqual((rep["drained"], rep["timed_out"], rep["aborted"]), (True, True, 3))
            # the streams would run for 70 s more: an answer this soon is the timeout's (the
            # bound leaves room for derasctl's start on a loaded machine)
            self.assertLess(dt, 30.0)
            finals = [ev for s in streams for ev in s if not isinstance(ev, Chunk)]
            self.assertEqual([(f.finish_reason, f.abort_reason) for f in finals],
                             [("abort", "drain_timeout")] * 3)
            # drained: new requests find no worker
            with self.assertRaises(DerasError) as e:
                c.client.complete("anyone?", max_tokens=2)
            self.assertEqual(e.exception.code, "no_workers")
            self.assertEqual(c.ctl("undrain", "--all")[0], 0)
            self.assertEqual(len(c.client.complete("again", max_tokens=2, ignore_eos=True)
                                 .token_ids[0]), 2)
            print("drain --all --timeout 0.5 with 3 streams running: answered after %.2f s, "
                  "3 aborted with drain_timeout; undrain --all serves again" % dt)
        finally:
            codes = c.stop()
        self.assertEqual(codes, [0, 0])


class Metrics(unittest.TestCase):
    def test_metrics_parse_and_their_counters_match_the_requests_sent(self):
        c = Cluster(n_workers=2)
        try:
            prompt_tokens = completion_tokens = 0
            for i in range(6):
                r = c.client.complete("count me %d" % i, max_tokens=7, ignore_eos=True)
                prompt_tokens += r.usage.prompt_tokens
                completion_tokens += r.usage.completion_tokens
            for i in range(3):
                finals = [ev for ev in c.client.stream("stream me %d" % i, n=2, max_tokens=5,
                                                        ignore_eos=True)
                          if not isinstance(ev, Chunk)]
                self.assertEqual(len(finals), 2)
                prompt_tokens += finals[0].usage.prompt_tokens
                completion_tokens += sum(f.usage.completion_tokens for f in finals)
            with self.assertRaises(DerasError) as e:
                c.client.complete(prompt_ids=[5, VOCAB], max_tokens=3)
            self.assertEqual(e.exception.code, "token_out_of_range")
            s = zmq.Context.instance().socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(c.address)
            s.send(b"\xc1 not msgpack")
            self.assertTrue(s.poll(60000))
            self.assertEqual(msgpack.unpackb(s.recv(), raw=False)["code"], "malformed")
            s.close()

            code, text = http_get(c.metrics_url + "/metrics")
            self.assertEqual(code, 200)
            m = samples(text)
            rc, ctl_text, _ = c.ctl("metrics")
            self.assertEqual(rc, 0)
            m2 = samples(ctl_text)

            def v(name, **labels):
                return m[(name, tuple(sorted(labels.items())))]

            want = {
                ("deras_requests_total", "length"): 6 + 3 * 2,
                ("deras_requests_total", "stop"): 0,
                ("deras_requests_total", "abort"): 0,
                ("deras_requests_total", "error"): 1,
            }
            for (name, reason), n in want.items():
                self.assertEqual(v(name, finish_reason=reason), n, reason)
            self.assertEqual(v("deras_requests_received_total"), 10)
            self.assertEqual(v("deras_generation_tokens_total"), completion_tokens)
            self.assertEqual(completion_tokens, 6 * 7 + 3 * 2 * 5)
            self.assertEqual(v("deras_prompt_tokens_total"), prompt_tokens)
            self.assertEqual(v("deras_errors_total", code="token_out_of_range"), 1)
            self.assertEqual(v("deras_errors_total", code="malformed"), 1)
            self.assertEqual(v("deras_errors_total", code="busy"), 0)
            for h, n in (("deras_time_to_first_token_seconds", 12),
                         ("deras_time_per_output_token_seconds", 12),
                         ("deras_e2e_request_latency_seconds", 12),
                         ("deras_request_queue_time_seconds", 9)):
                self.assertEqual(v(h + "_count"), n, h)
                self.assertEqual(v(h + "_bucket", le="+Inf"), n, h)
                if h != "deras_request_queue_time_seconds":  # dispatched at once: may sum to 0
                    self.assertGreater(v(h + "_sum"), 0, h)
            self.assertEqual(v("deras_requests_running"), 0)
            self.assertEqual(v("deras_requests_waiting"), 0)
            self.assertEqual(v("deras_workers", state="ready"), 2)
            self.assertEqual(v("deras_router_ready"), 1)
            dispatched = sum(v("deras_worker_requests_dispatched_total", worker=w) for w in ("w0", "w1"))
            self.assertEqual(dispatched, 9)
            for w in ("w0", "w1"):
                self.assertTrue(0 <= v("deras_kv_cache_usage_ratio", worker=w) <= 1)
                self.assertEqual(v("deras_preemptions_total", worker=w), 0)
            # the admin socket serves the same counters
            for key, val in m.items():
                if key[0].endswith(("_total", "_count", "_bucket")):
                    self.assertEqual(m2.get(key), val, key)
            self.assertEqual(http_get(c.metrics_url + "/nothing")[0], 404)
            req = urllib.request.Request(c.metrics_url + "/metrics", method="POST", data=b"x")
            with self.assertRaises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=30)
            self.assertEqual(e.exception.code, 405)
            print("metrics: %d families parsed by prometheus_client; 12 sample finals (length), "
                  "1 error, %d prompt and %d generation tokens, 12 TTFT/TPOT/e2e and 9 queue "
                  "observations: all as sent; derasctl metrics agrees"
                  % (len(list(text_string_to_metric_families(text))), prompt_tokens,
                     completion_tokens))
        finally:
            codes = c.stop()
        self.assertEqual(codes, [0, 0, 0])


class Failures(unittest.TestCase):
    def test_a_sigstopped_worker_is_dead_within_3_s_and_nothing_hangs(self):
        # default timeouts: heartbeat 500 ms, dead after 3000 ms. w0 alone at first, each of
        # its steps 20 ms longer (the test-only knob): all 12 requests go to it and none can
        # end before it is stopped (3000 tokens take a minute); w1, at full speed, comes
        # once they run there and takes what w0's death sends elsewhere
        c = Cluster(n_workers=1, worker_env={STEP_DELAY: "20"})
        w0 = c.workers[0]
        results, lock = {}, threading.Lock()
        streaming = set()

        def run(i, stream):
            cl = Client(c.address, timeout=60)
            try:
                if stream:
                    n = 0
                    for ev in cl.stream("stream %d" % i, max_tokens=3000, ignore_eos=True):
                        n += isinstance(ev, Chunk)
                        with lock:
                            streaming.add(i)
                    out = ("final", n)
                else:
                    r = cl.complete("whole %d" % i, max_tokens=2000, ignore_eos=True)
                    out = ("final", len(r.token_ids[0]))
            except DerasError as e:
                out = (e.code, str(e))
            with lock:
                results[(i, stream)] = (out, time.monotonic())
            cl.close()

        threads = [threading.Thread(target=run, args=(i, i % 2 == 0)) for i in range(12)]
        try:
            for t in threads:
                t.start()
            # every stream has sent something (so its client has seen it), all 12 are on w0
            wait_for("6 streams streaming", lambda: len(streaming) == 6)
            wait_for("12 requests on w0", lambda: worker_row(
                ctl_json(c, "status")[1], "w0")["requests"] == 12)
            c.add_worker("w1")  # no step delay
            wait_for("w1 ready", lambda: state_of(c, "w1") == "ready")
            on_w0 = worker_row(ctl_json(c, "status")[1], "w0")["requests"]
            t0 = time.monotonic()
            w0.send_signal(signal.SIGSTOP)
            wait_for("w0 dead", lambda: state_of(c, "w0") == "dead", every=0.02)
            dead_s = time.monotonic() - t0
            # the bound, by the router's own clock (its log: "no message for N ms"), so the
            # test's polling on a loaded machine does not count: at least the 3 s timeout,
            # and at most 1 s more for the router's wake-up
            silent_ms = c.dead_silence_ms("w0")
            self.assertIsNotNone(silent_ms, c.router_log())
            self.assertGreaterEqual(silent_ms, 3000)
            self.assertLess(silent_ms, 4000)
            self.assertEqual(state_of(c, "w1"), "ready")
            for t in threads:
                t.join(120)
                self.assertFalse(t.is_alive(), "a request hangs")
            failed = {k: v for k, v in results.items() if v[0][0] != "final"}
            for (i, stream), ((code, msg), _) in failed.items():
                self.assertTrue(stream, "non-streaming request %d failed instead of re-running: %s"
                                % (i, msg))
                self.assertEqual(code, "worker_failed")
                self.assertIn("w0", msg)
            self.assertEqual(len(results), 12)
            self.assertEqual(len(failed), 6, "every stream was on w0 and had sent something")
            whole = [k for k, v in results.items() if not k[1] and v[0] == ("final", 2000)]
            self.assertEqual(len(whole), 6)
            # SIGCONT: the worker hears REFUSE "register" and comes back
            w0.send_signal(signal.SIGCONT)
            wait_for("w0 ready again", lambda: state_of(c, "w0") == "ready")
            self.assertEqual(len(c.client.complete("after", max_tokens=3, ignore_eos=True)
                                 .token_ids[0]), 3)
            print("SIGSTOP of w0 with %d requests on it: dead after %.2f s (the router heard "
                  "nothing for %d ms; bound 3 s + its wake-up); %d streams ended with "
                  "worker_failed naming w0, 6/6 non-streaming requests completed (re-run on "
                  "w1); SIGCONT: w0 registered again" % (on_w0, dead_s, silent_ms, len(failed)))
        finally:
            if w0.poll() is None:
                w0.send_signal(signal.SIGCONT)
            codes = c.stop()
        self.assertEqual(codes, [0, 0, 0])

    def test_a_worker_that_heartbeats_without_progress_is_stuck_then_dead(self):
        # the stuck timeout (3 s) is longer than the worker timeout (2 s): a worker whose main
        # socket went quiet is found stuck, not dead, only because its pulse (every 100 ms)
        # keeps it alive. A request re-dispatched while no other worker is ready waits for
        # one (--no-workers-wait-ms), so the real worker may come before or after that
        c = Cluster(n_workers=0, router_args=("--stuck-timeout-ms", "3000", "--heartbeat-ms", "100",
                                              "--worker-timeout-ms", "2000",
                                              "--no-workers-wait-ms", "600000"))
        try:
            # hangs (pulses only) once its second request arrived: when, the test decides
            fake = c.add_worker("hang", fake=True, args=("--stuck-after-requests", "2",
                                                         "--step-ms", "20"))
            c.wait_ready(1)
            cl = Client(c.address, timeout=60)
            stream = cl.stream("streams then hangs", max_tokens=3000, ignore_eos=True)
            first = next(iter(stream))
            self.assertIsInstance(first, Chunk)
            whole = {}

            def run_whole():
                wc = Client(c.address, timeout=120)
                try:
                    whole["r"] = wc.complete("sent nothing yet", max_tokens=40, ignore_eos=True)
                except DerasError as ex:
                    whole["r"] = ex
                wc.close()

            th = threading.Thread(target=run_whole)
            th.start()
            c.wait_log("hang", "stuck after")  # both requests reached it; it steps no more
            t0 = time.monotonic()
            c.add_worker("w1")  # a real worker to take over
            wait_for("w1 ready", lambda: state_of(c, "w1") == "ready")
            wait_for("hang stuck", lambda: state_of(c, "hang") == "stuck")
            stuck_s = time.monotonic() - t0
            with self.assertRaises(DerasError) as e:
                for _ in stream:
                    pass
            self.assertEqual(e.exception.code, "worker_failed")
            self.assertIn("no engine step completed", str(e.exception))
            th.join(120)
            r = whole.get("r")
            self.assertFalse(isinstance(r, Exception), repr(r))
            self.assertEqual((r.finish_reasons, len(r.token_ids[0])), (["length"], 40))
            time.sleep(2.5)  # past the 2 s worker timeout again: its pulses keep it stuck, not dead
            self.assertEqual(state_of(c, "hang"), "stuck")
            m = samples(http_get(c.metrics_url + "/metrics")[1])
            self.assertEqual(m[("deras_worker_stuck_total", ())], 1)
            self.assertEqual(m[("deras_requests_redispatched_total", ())], 1)
            fake.kill()
            wait_for("hang dead", lambda: state_of(c, "hang") == "dead")
            cl.close()
            print("a worker pulsing but stepping no more: stuck %.2f s after it hung (stuck "
                  "timeout 3 s), its stream ended with worker_failed, its request that had "
                  "sent nothing completed on w1; stayed stuck while pulsing, dead once silent"
                  % stuck_s)
        finally:
            codes = c.stop()
        self.assertEqual(codes[-1], 0)


class Speculation(unittest.TestCase):
    SPEC = ("proposer", "ngram"), ("worker", "w0")

    def spec_metrics(self, c):
        m = samples(http_get(c.metrics_url + "/metrics")[1])
        return [int(m[("deras_spec_%s_total" % k, self.SPEC)])
                for k in ("draft_tokens", "accepted_tokens", "verifications")]

    def test_speculation_counts_reach_usage_metrics_status_and_bench(self):
        c = Cluster(n_workers=1, worker_args=("--spec-proposer", "ngram"))
        try:
            # repeated text: the n-gram proposer finds earlier occurrences to copy from
            prompt = "one two three four five six seven eight nine ten " * 6
            params = dict(max_tokens=48, temperature=0, ignore_eos=True)
            plain = c.client.complete(prompt, num_speculative_tokens=0, **params)
            self.assertEqual((plain.usage.spec_proposed, plain.usage.spec_verifications), (0, 0))
            self.assertEqual(self.spec_metrics(c), [0, 0, 0])
            total = [0, 0, 0]
            for i in range(3):
                r = c.client.complete(prompt, **params)
                self.assertEqual(r.token_ids[0], plain.token_ids[0], "greedy output changed")
                u = r.usage
                self.assertLessEqual(u.spec_accepted, u.spec_proposed)
                self.assertLessEqual(u.spec_verifications, u.spec_proposed)
                total = [a + b for a, b in zip(total, (u.spec_proposed, u.spec_accepted,
                                                       u.spec_verifications))]
            finals = [ev for ev in c.client.stream(prompt, n=2, **params)
                      if not isinstance(ev, Chunk)]
            for f in finals:
                total = [a + b for a, b in zip(total, (f.usage.spec_proposed,
                                                       f.usage.spec_accepted,
                                                       f.usage.spec_verifications))]
            self.assertGreater(total[2], 0, "no sample speculated")
            # the STEP that carried each finish carried the worker's counters too
            self.assertEqual(self.spec_metrics(c), total)
            rc, st = ctl_json(c, "status")
            w = worker_row(st, "w0")
            self.assertEqual((w["spec"], w["spec_proposed"], w["spec_accepted"]),
                             ("ngram", total[0], total[1]))
            rc, text, _ = c.ctl("status")
            self.assertIn("ngram %.0f%%" % (100.0 * total[1] / total[0]), text)

            # deras complete: the flag reaches the worker, the summary shows the drafts
            cmd = [DERAS, "complete", "--address", c.address, "--max-tokens", "48",
                   "--temperature", "0", "--ignore-eos", prompt]
            on = subprocess.run(cmd, capture_output=True, timeout=120)
            off = subprocess.run(cmd[:2] + ["--num-speculative-tokens", "0"] + cmd[2:],
                                 capture_output=True, timeout=120)
            self.assertEqual((on.returncode, off.returncode), (0, 0), on.stderr + off.stderr)
            self.assertEqual(on.stdout, off.stdout)
            self.assertIn(b"speculation: ", on.stderr)
            self.assertNotIn(b"speculation: ", off.stderr)
            bad = subprocess.run(cmd[:2] + ["--num-speculative-tokens", "17"] + cmd[2:],
                                 capture_output=True, timeout=120)
            self.assertEqual(bad.returncode, 2)
            by_usage, total = total, self.spec_metrics(c)

            prompts = os.path.join(c.dir, "prompts.txt")
            with open(prompts, "w") as f:
                f.write(prompt + "\n" + "red green blue " * 8 + "\n")
            r = subprocess.run([DERAS, "bench", "--address", c.address, "--requests", "6",
                                "--prompts", prompts, "--max-tokens", "32", "--temperature",
                                "0", "--ignore-eos", "--json", "--quiet"], capture_output=True,
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            sp = json.loads(r.stdout)["speculation"]
            after = self.spec_metrics(c)
            self.assertEqual([sp["draft_tokens"], sp["accepted_tokens"], sp["verifications"]],
                             [a - b for a, b in zip(after, total)])
            self.assertEqual(sp["samples"], 6)
            self.assertAlmostEqual(sp["acceptance_rate"],
                                   sp["accepted_tokens"] / sp["draft_tokens"], places=5)
            print("n-gram speculation on tiny-chat, greedy output unchanged: 5 samples "
                  "verified %d drafts, accepted %d (%.0f%%) in %d verifications by their "
                  "usage; /metrics and derasctl status say the same; deras complete "
                  "--num-speculative-tokens 0 prints the same text without drafts; deras "
                  "bench (6 requests) reports %d drafts, %.0f%% accepted, %.2f per "
                  "verification, equal to the counters' growth"
                  % (by_usage[0], by_usage[1], 100.0 * by_usage[1] / by_usage[0], by_usage[2],
                     sp["draft_tokens"], 100 * sp["acceptance_rate"],
                     sp["mean_accepted_length"]))
        finally:
            codes = c.stop()
        self.assertEqual(codes, [0, 0])


class AdminSocket(unittest.TestCase):
    def test_ipc_sockets_are_private_the_admin_socket_strict_and_tcp_only_with_curve(self):
        # under umask 000 (every file 0666 unless the router sees to it): every ipc socket
        # the router binds - admin, workers, clients - is still 0600, only this user's
        old_umask = os.umask(0)
        try:
            c = Cluster(n_workers=1)
        finally:
            os.umask(old_umask)
        try:
            for addr in (c.admin, c.wep, c.address):
                path = addr[len("ipc://"):]
                self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600, path)
            s = zmq.Context.instance().socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(c.admin)
            cases = [
                (b"\xc1", "malformed"),
                (msgpack.packb({"type": "reboot"}), "unknown_type"),
                (msgpack.packb({"type": "drain"}), "missing_field"),
                (msgpack.packb({"type": "drain", "worker": "w0", "all": True}), "invalid_field"),
                (msgpack.packb({"type": "status", "extra": 1}), "invalid_field"),
                (msgpack.packb({"type": "drain", "worker": "w0", "timeout_ms": -5}),
                 "value_out_of_range"),
                (msgpack.packb({"type": "drain", "worker": "nobody"}), "unknown_worker"),
                (msgpack.packb({"type": "status", "v": 9}), "unsupported_version"),
            ]
            for frame, code in cases:
                s.send(frame)
                self.assertTrue(s.poll(60000), code)
                m = msgpack.unpackb(s.recv(), raw=False)
                self.assertEqual((m["type"], m["code"]), ("error", code), m)
            s.send(msgpack.packb({"type": "health"}))
            self.assertTrue(s.poll(60000))
            self.assertEqual(msgpack.unpackb(s.recv(), raw=False)["ready"], True)
            s.close()
        finally:
            codes = c.stop()
        self.assertEqual(codes, [0, 0])
        # tcp: refused without CURVE keys for the admin socket
        d = tempfile.mkdtemp(prefix="deras-admin-")
        port = free_port()
        r = subprocess.run([ROUTER, "--model", TINY, "--admin", "tcp://127.0.0.1:%d" % port,
                            "--metrics-listen", "none"], env=dict(os.environ, DERAS_RUNTIME_DIR=d),
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("needs CURVE", r.stderr)
        # with CURVE: an operator's key opens it, a client's key does not
        server_pub, server_sec = zmq.curve_keypair()
        client_pub, client_sec = zmq.curve_keypair()
        ops_pub, ops_sec = zmq.curve_keypair()

        def write(name, text):
            p = os.path.join(d, name)
            with open(p, "w") as f:
                f.write(text)
            os.chmod(p, 0o600)
            return p

        args = ("--curve-secret-key", write("server.key", server_sec.decode() + "\n"),
                "--curve-allow", write("clients.txt", client_pub.decode() + "\n"),
                "--admin", "tcp://127.0.0.1:%d" % port,
                "--admin-curve-allow", write("ops.txt", ops_pub.decode() + "\n"))
        c = Cluster(n_workers=1, router_args=args,
                    client_args=dict(curve_server_key=server_pub,
                                     curve_client_keys=(client_pub, client_sec)))
        try:
            base = ["--admin", "tcp://127.0.0.1:%d" % port, "--curve-server-key",
                    server_pub.decode()]
            # served: a reply timeout no loaded machine reaches; refused: the wait is the
            # timeout itself, kept short
            rc, out, err = c.ctl(*base, "--reply-timeout", "60", "--curve-client-key",
                                 write("ops.key", ops_sec.decode()), "status")
            self.assertEqual(rc, 0, err)
            self.assertIn("w0", out)
            rc, out, err = c.ctl(*base, "--reply-timeout", "2", "--curve-client-key",
                                 write("client.key", client_sec.decode()), "status")
            self.assertEqual(rc, 1)
            self.assertIn("no reply", err)
            print("admin socket: mode 0600, 8 hostile frames each answered with its code; tcp "
                  "refused without CURVE; over CURVE an operator key is served, a client key "
                  "is not")
        finally:
            codes = c.stop()
            shutil.rmtree(d, ignore_errors=True)
        self.assertEqual(codes, [0, 0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
