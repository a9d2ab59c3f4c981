# SPDX-License-Identifier: Apache-2.0
"""test_failures.py - deras when processes fail or are stopped: the operations issue's
demonstrations, against the real binaries (cluster.py), each printing what it saw.

  - kill -9 of one of two workers under load (streaming clients, some of the killed
    worker's requests running, some still queued there): the router stays up, the worker
    is dead within the silence timeout (3 s), its queued requests run on the other worker
    (same text as alone), its streaming ones end with worker_failed naming it, every
    request is accounted for; the worker, started again, registers and serves;
  - a worker that stops heartbeating (SIGSTOP) is dead within the timeout, and comes back
    by itself when it runs again (SIGCONT: REFUSE "register", HELLO, ready);
  - router restarts, after a drain (SIGTERM) and after kill -9: the workers register again
    by themselves and serve; what the old router had running on them is dropped there;
  - SIGTERM on one worker under load: its requests finish, new requests go to the other
    worker, it exits 0; a second SIGTERM makes it exit at once, its queued requests going
    to the other worker and its streaming ones ending with worker_failed naming it;
  - a second SIGTERM on the router ends every live request at once with shutting_down
    (no client waits for its own timeout) and leaves no socket file.

Model: tests/data/tiny-chat (fast, deterministic). Each worker runs one sequence per step
(--max-seqs 1), so the router has at most 4 requests in flight per worker (max_seqs x 4):
on each worker one running (streaming) and three queued - the queued ones are what a
failure re-dispatches.

Timing is set by the tests, not by the machine: a worker whose requests must still run
when the test kills, stops or signals it gets the test-only step delay (cluster.STEP_DELAY,
docs/worker.md), so its requests last seconds on any CPU; the order of events is waited
for (a worker's "draining" state, the router's "stopping" log line) instead of slept for;
and the dead-worker bound is read from the router's own log, not from the test's polling.

    DERAS_BUILD_DIR=build python3 tests/integration/test_failures.py [Class.test ...]
Exit 77 (skipped) without pyzmq/msgpack or the built binaries.
"""

import os
import re
import signal
import threading
import time
import unittest

from cluster import STEP_DELAY, Chunk, Client, Cluster, DerasError

PROMPT = "Once upon a time, alpha beta gamma delta"
DEAD_TIMEOUT_S = 3.0  # the router's default --worker-timeout-ms
ONE_SEQ = ("--max-seqs", "1")
LONG = 300   # tokens of a request that runs to its end
CUT = 3000   # tokens of a request the test cuts short: still running when it is cut
# the step delays (ms) of a worker whose requests must outlast what the test does to them:
# SLOW for one that stops or dies (LONG tokens: 15 s a request, CUT: minutes), DRAIN for
# one that must still finish its four LONG requests, one after the other, within the 30 s
# drain timeout (1.5 s each)
SLOW = {STEP_DELAY: "50"}
DRAIN = {STEP_DELAY: "5"}


class Load:
    """n streaming requests, one client and one thread each. Every request ends as
    ("final", finish_reason, token ids) or ("error", code, message)."""

    def __init__(self, address, n, max_tokens, prompt=PROMPT, timeout=60):
        self.n = n
        self.outcome = [None] * n
        self.streaming = [False] * n
        self.threads = [threading.Thread(target=self._run, args=(i, address, prompt, max_tokens,
                                                                  timeout)) for i in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, i, address, prompt, max_tokens, timeout):
        cl = Client(address, timeout=timeout)
        ids, finals = [], []
        try:
            for ev in cl.stream(prompt, max_tokens=max_tokens, ignore_eos=True, temperature=0):
                if isinstance(ev, Chunk):
                    ids.extend(ev.token_ids)
                    self.streaming[i] = True
                else:
                    finals.append(ev.finish_reason)
            self.outcome[i] = ("final", finals[0] if len(finals) == 1 else finals, ids)
        except DerasError as e:
            self.outcome[i] = ("error", e.code, e.message)
        except Exception as e:  # noqa: BLE001 - an outcome the test reports
            self.outcome[i] = ("exception", repr(e), "")
        finally:
            cl.close()

    def wait_streaming(self, k, timeout=60):
        deadline = time.monotonic() + timeout
        while sum(self.streaming) < k:
            if time.monotonic() > deadline:
                raise AssertionError("only %d of %d requests streaming after %d s"
                                     % (sum(self.streaming), k, timeout))
            time.sleep(0.005)

    def join(self, timeout=120):
        """Wait for every request to end; none may hang."""
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        hung = [i for i, t in enumerate(self.threads) if t.is_alive()]
        if hung:
            raise AssertionError("requests %r still running after %d s" % (hung, timeout))
        return self.outcome

    def count(self):
        """{"final:length": k, "error:worker_failed": m, ...}"""
        out = {}
        for o in self.outcome:
            key = "%s:%s" % (o[0], o[1])
            out[key] = out.get(key, 0) + 1
        return out


def death_line(cluster, name):
    """(re-dispatched, failed) from the router's log line about worker `name`'s death."""
    m = re.search(r"worker %s: (\d+) requests go to another worker, (\d+) end with "
                  r"worker_failed" % re.escape(name), cluster.router_log())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def served(cluster):
    return {w["name"]: w["served"] for w in cluster.pong()}


def serve_eight(cluster, max_tokens=50):
    """8 requests sent together must all complete; {worker: how many of them it served}."""
    before = served(cluster)
    load = Load(cluster.address, 8, max_tokens)
    load.join()
    after = served(cluster)
    if load.count() != {"final:length": 8}:
        raise AssertionError("8 requests ended %r, expected 8 final:length" % load.count())
    return {k: after[k] - before.get(k, 0) for k in after}


def load_of(cluster, name):
    """The pong entry of worker `name` (running, waiting, served, ...)."""
    return next(w for w in cluster.pong() if w["name"] == name)


def wait_until(cond, timeout, what):
    """Seconds until cond() holds."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("waited %.0f s for %s" % (timeout, what))
        time.sleep(0.01)
    return time.monotonic() - t0


def reference(cluster, max_tokens):
    """The greedy token ids of PROMPT alone."""
    return cluster.client.complete(PROMPT, max_tokens=max_tokens, ignore_eos=True,
                                   temperature=0).token_ids[0]


def eight_on_w0(c, max_tokens):
    """8 requests while a slowed w0 is the only worker: it takes 4 (one running and
    streaming, three queued there), the router queues the rest (for w1, started next).
    Returns the Load once w0 holds its 1 + 3."""
    load = Load(c.address, 8, max_tokens)
    load.wait_streaming(1)
    wait_until(lambda: load_of(c, "w0")["running"] == 1 and load_of(c, "w0")["waiting"] == 3,
               60, "1 request running and 3 queued at w0")
    return load


def start_w1(c):
    """Start w1 at full speed (no step delay) and wait until it is ready."""
    c.workers.append(c.start_worker(1, env={}))
    c.wait_states({"w1": "ready"}, timeout=60)


def check_dead_bound(test, c, name):
    """Dead after the silence timeout and not much later, by the router's own clock: at
    least the 3 s timeout, at most 1 s more for the router's wake-up on a loaded machine."""
    silent_ms = c.dead_silence_ms(name)
    test.assertIsNotNone(silent_ms, "no death of %s in the router's log" % name)
    test.assertGreaterEqual(silent_ms, DEAD_TIMEOUT_S * 1000)
    test.assertLess(silent_ms, DEAD_TIMEOUT_S * 1000 + 1000)
    return silent_ms


class WorkerDeath(unittest.TestCase):
    """A worker that vanishes (kill -9) or stops answering (SIGSTOP)."""

    def test_kill_9_of_a_worker_under_load_reruns_or_fails_its_requests_and_it_comes_back(self):
        c = Cluster(n_workers=1, worker_args=ONE_SEQ, worker_env=SLOW)
        try:
            pid0 = c.workers[0].pid
            load = eight_on_w0(c, LONG)
            start_w1(c)
            t0 = time.monotonic()
            c.workers[0].kill()
            c.workers[0].wait()
            dead_s = c.wait_states({"w0": "dead"}, timeout=60)
            outcome = load.join()
            self.assertTrue(c.router.poll() is None and c.workers[1].poll() is None,
                            "the router or w1 went down")
            requeued, failed = death_line(c, "w0")
            counts = load.count()
            want = reference(c, LONG)  # on w1, the only worker left
            for i, o in enumerate(outcome):
                if o[0] == "final":
                    self.assertEqual((o[1], o[2]), ("length", want),
                                     "request %d completed with other tokens than alone" % i)
                else:
                    self.assertEqual(o[:2], ("error", "worker_failed"), "request %d: %r" % (i, o))
                    self.assertIn("worker w0 failed", o[2])
            self.assertEqual(counts.get("error:worker_failed", 0), failed, counts)
            self.assertEqual(requeued, 3, "w0's three queued requests re-dispatched")
            self.assertEqual(failed, 1, "w0 streamed one request at a time")
            self.assertEqual(counts.get("final:length", 0) + failed, 8, counts)
            silent_ms = check_dead_bound(self, c, "w0")
            # w0 again, same name, at full speed: registers and gets work
            c.workers[0] = c.start_worker(0, env={})
            back_s = c.wait_states({"w0": "ready"}, timeout=60)
            w0_got = serve_eight(c)["w0"]
            self.assertGreater(w0_got, 0, "the restarted w0 got no request")
            print("kill -9 of w0 (pid %d) with 4 of 8 requests on it (1 streaming, 3 queued): "
                  "w0 dead %.2f s after the kill (the router heard nothing for %d ms; timeout "
                  "%.0f s), router and w1 up; 8/8 accounted: %d completed with the same tokens "
                  "as alone (%d of them re-run from w0's queue), %d ended worker_failed naming "
                  "w0, 0 hung (all in %.1f s); w0 restarted: ready in %.2f s, served %d of 8 new "
                  "requests" % (pid0, dead_s, silent_ms, DEAD_TIMEOUT_S,
                                counts.get("final:length", 0), requeued, failed,
                                time.monotonic() - t0, back_s, w0_got))
        finally:
            c.stop()

    def test_a_worker_that_stops_heartbeating_is_dead_in_time_and_comes_back_by_itself(self):
        c = Cluster(n_workers=1, worker_args=ONE_SEQ, worker_env=SLOW)
        try:
            load = eight_on_w0(c, LONG)
            start_w1(c)
            os.kill(c.workers[0].pid, signal.SIGSTOP)
            dead_s = c.wait_states({"w0": "dead"}, timeout=60)
            load.join()
            counts = load.count()
            requeued, failed = death_line(c, "w0")
            self.assertEqual(failed, 1, counts)
            self.assertEqual(requeued, 3, counts)
            self.assertEqual(counts, {"final:length": 7, "error:worker_failed": 1})
            os.kill(c.workers[0].pid, signal.SIGCONT)
            back_s = c.wait_states({"w0": "ready"}, timeout=60)
            w0_got = serve_eight(c, max_tokens=10)["w0"]  # w0 still steps slowly
            self.assertGreater(w0_got, 0, "w0 got no request after SIGCONT")
            c.wait_kv_baseline()  # what w0 ran before it stopped was dropped there
            silent_ms = check_dead_bound(self, c, "w0")
            self.assertTrue(c.alive())
            print("SIGSTOP of w0 with 4 of 8 requests on it: dead %.2f s later (the router heard "
                  "nothing for %d ms; timeout %.0f s); its streaming request ended "
                  "worker_failed, %d queued ones re-ran on w1, 7/8 completed; SIGCONT: w0 "
                  "registered again by itself in %.2f s, served %d of 8 new requests, KV back "
                  "to baseline" % (dead_s, silent_ms, DEAD_TIMEOUT_S, requeued, back_s, w0_got))
        finally:
            if c.workers[0].poll() is None:
                os.kill(c.workers[0].pid, signal.SIGCONT)
            c.stop()


class RouterRestart(unittest.TestCase):
    """Workers outlive their router and register with the next one by themselves."""

    def test_workers_register_again_after_a_drained_and_a_killed_router(self):
        # DRAIN's step delay: the CUT requests below run for 15 s, so none can end before
        # the router is killed
        c = Cluster(n_workers=2, worker_args=ONE_SEQ, worker_env=DRAIN)
        try:
            serve_eight(c)
            # drained restart: the workers get DRAIN from the stopping router
            c.router.send_signal(signal.SIGTERM)
            self.assertEqual(c.router.wait(60), 0)
            t0 = time.monotonic()
            c.router = c.start_router()
            c.wait_states({"w0": "ready", "w1": "ready"}, timeout=60)
            drained_s = time.monotonic() - t0
            per_worker = serve_eight(c)
            self.assertTrue(all(n > 0 for n in per_worker.values()),
                            "after the drained router's restart: %r (a worker kept its DRAIN?)"
                            % per_worker)
            # killed restart, with requests running on the workers; the clients' own timeout
            # (20 s of silence) ends them once their router is gone. Not shorter: the two
            # requests queued behind the running ones are silent until the kill, and must not
            # time out before the test has seen all 4 at the workers, however slow the machine
            load = Load(c.address, 4, CUT, timeout=20)
            load.wait_streaming(2)
            # all 4 at the workers first: a request still queued in its client's socket
            # would reach the next router and complete there, which is right but not this test
            wait_until(lambda: sum(w["running"] + w["waiting"] for w in c.pong()) == 4, 60,
                       "all 4 requests at the workers")
            c.router.kill()
            c.router.wait()
            t0 = time.monotonic()
            c.router = c.start_router()
            c.wait_states({"w0": "ready", "w1": "ready"}, timeout=60)
            killed_s = time.monotonic() - t0
            load.join()  # these clients lost their router: their own timeout ends them
            self.assertEqual(load.count(), {"error:timeout": 4})
            kv_s = c.wait_kv_baseline()
            per_worker2 = serve_eight(c)
            self.assertTrue(all(n > 0 for n in per_worker2.values()), per_worker2)
            self.assertTrue(c.alive())
            print("router restarts: after SIGTERM (drain) both workers registered again in %.2f s "
                  "and served %r; after kill -9 with 4 requests in flight, in %.2f s, the old "
                  "router's requests dropped at the workers (KV at baseline %.2f s later), "
                  "served %r" % (drained_s, per_worker, killed_s, kv_s, per_worker2))
        finally:
            codes = c.stop()
        self.assertEqual(codes, [0, 0, 0])


class Signals(unittest.TestCase):
    """SIGTERM drains; a second SIGTERM stops at once, and nobody hangs."""

    def test_sigterm_on_a_worker_under_load_finishes_its_requests_and_it_takes_nothing_new(self):
        # w0 alone first, stepping slowly (DRAIN): 4 of 8 requests on it (1 running, 3
        # queued there), surely in flight at the SIGTERM, and still done within its drain
        # timeout; then w1 at full speed takes the other 4 and everything after. Requests
        # the router holds while no worker is ready wait for one (--no-workers-wait-ms)
        c = Cluster(n_workers=1, worker_args=ONE_SEQ, worker_env=DRAIN,
                    router_args=("--no-workers-wait-ms", "600000"))
        try:
            want = reference(c, LONG)
            first = eight_on_w0(c, LONG)
            before = served(c)
            w0 = load_of(c, "w0")
            t0 = time.monotonic()
            c.workers[0].send_signal(signal.SIGTERM)
            # new requests only once the router knows w0 drains (instead of sleeping on it)
            c.wait_states({"w0": "draining"}, timeout=60)
            w0_served = served(c)["w0"]
            start_w1(c)
            later = Load(c.address, 8, 300)
            code = c.workers[0].wait(60)
            exit_s = time.monotonic() - t0
            first.join()
            later.join()
            after = served(c)
            self.assertEqual(code, 0)
            for i, o in enumerate(first.outcome):
                self.assertEqual(o, ("final", "length", want), "request %d started before the "
                                 "SIGTERM" % i)
            self.assertEqual(later.count(), {"final:length": 8})
            self.assertGreaterEqual(after["w1"] - before.get("w1", 0), 8,
                                    "the requests sent after the SIGTERM did not all run on w1")
            self.assertEqual(after["w0"], w0_served, "w0 took work while draining")
            with open(os.path.join(c.dir, "w0.log")) as f:
                log = f.read()
            self.assertIn("BYE to the router: stopped, nothing in flight", log)
            self.assertTrue(c.router.poll() is None and c.workers[1].poll() is None)
            print("SIGTERM on w0 with 8 requests in flight (%d on w0, %d of them queued): all 8 "
                  "finished their %d tokens identical to alone, 8 requests sent after the SIGTERM "
                  "all completed on w1, w0 exited 0 after %.3f s saying BYE with nothing in flight"
                  % (w0["running"] + w0["waiting"], w0["waiting"], LONG, exit_s))
        finally:
            c.stop()

    def test_second_sigterm_on_a_worker_exits_at_once_and_its_requests_end_or_move(self):
        # w0 alone first, stepping slowly (SLOW): 4 of 8 requests on it, 1 running and 3
        # queued; the drain the second SIGTERM cuts short would take a minute. w1, at full
        # speed, takes the other 4 and what w0 drops
        c = Cluster(n_workers=1, worker_args=ONE_SEQ, worker_env=SLOW)
        try:
            load = eight_on_w0(c, LONG)
            start_w1(c)
            c.workers[0].send_signal(signal.SIGTERM)
            # the second signal only once w0 handled the first: two pending together would be
            # delivered as one
            c.wait_log("w0", "stop requested (SIGTERM)")
            t0 = time.monotonic()
            c.workers[0].send_signal(signal.SIGTERM)
            code = c.workers[0].wait(60)
            exit_s = time.monotonic() - t0
            outcome = load.join()
            counts = load.count()
            requeued, failed = death_line(c, "w0")
            want = reference(c, LONG)
            self.assertEqual(code, 0)
            # its drain would take a minute: an exit this soon is the second signal's (room
            # for a loaded machine; it takes milliseconds)
            self.assertLess(exit_s, 10.0, "the second SIGTERM did not stop w0 at once")
            for i, o in enumerate(outcome):
                if o[0] == "final":
                    self.assertEqual((o[1], o[2]), ("length", want), "request %d" % i)
                else:
                    self.assertEqual(o[:2], ("error", "worker_failed"), "request %d: %r" % (i, o))
                    self.assertIn("worker w0 failed: it exited: stopped at once by a second "
                                  "SIGTERM", o[2])
            self.assertEqual(failed, 1, counts)
            self.assertEqual(requeued, 3, counts)
            self.assertEqual(counts, {"final:length": 7, "error:worker_failed": 1})
            self.assertEqual(c.states()["w0"], "dead")
            self.assertIsNone(c.dead_silence_ms("w0"), "w0 dead by its BYE, not by silence")
            print("second SIGTERM on w0 with %d requests on it (%d streaming, %d queued): w0 "
                  "exited 0 in %.3f s; the streaming ones ended worker_failed naming the second "
                  "SIGTERM, the queued ones re-ran on w1 with the same tokens as alone; 8/8 "
                  "accounted, none hung" % (failed + requeued, failed, requeued, exit_s))
        finally:
            c.stop()

    def test_second_sigterm_on_the_router_ends_every_request_at_once(self):
        # the workers step slowly (SLOW): the CUT requests would run a minute, so only the
        # second signal can end them
        c = Cluster(n_workers=2, router_args=("--drain-timeout", "60"), worker_env=SLOW)
        try:
            load = Load(c.address, 4, CUT, timeout=60)
            # all 4 admitted first: a request still on its way at the first signal is
            # refused by the drain ("shutting down"), not ended by the second signal
            load.wait_streaming(4)
            wsock = c.wep[len("ipc://"):]
            csock = c.address[len("ipc://"):]
            c.router.send_signal(signal.SIGTERM)
            # the second signal only once the router handled the first (two pending together
            # would be delivered as one)
            c.wait_log("router", "stopping:")
            t0 = time.monotonic()
            c.router.send_signal(signal.SIGTERM)
            code = c.router.wait(60)
            exit_s = time.monotonic() - t0
            load.join(timeout=30)  # well within the clients' 60 s timeout
            ended_s = time.monotonic() - t0
            counts = load.count()
            self.assertEqual(code, 1)
            # the drain would wait for the requests (a minute) or its 60 s timeout: an exit
            # this soon is the second signal's (room for a loaded machine)
            self.assertLess(exit_s, 10.0)
            self.assertEqual(counts, {"error:shutting_down": 4}, load.outcome)
            self.assertTrue(all("stopped at once" in o[2] for o in load.outcome), load.outcome)
            self.assertFalse(os.path.exists(wsock) or os.path.exists(csock),
                             "socket files left behind")
            print("second SIGTERM on the router with 4 requests streaming: exit 1 after %.3f s, "
                  "all 4 clients got shutting_down within %.3f s, socket files removed"
                  % (exit_s, ended_s))
        finally:
            c.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
