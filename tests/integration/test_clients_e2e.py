# SPDX-License-Identifier: Apache-2.0
"""test_clients_e2e.py - the clients against real processes: deras-router + deras-worker.

Starts deras-router and one deras-worker (CPU, one thread) on the tiny servable model
tests/data/tiny-chat (random Llama weights, real tokenizer: gibberish text, but
deterministic and fast), both on ipc:// sockets in a temporary directory, then checks
what the Python client, `deras complete` and `deras bench` get from them: greedy text that
streams and non-streams the same and agrees between the C and Python clients, seeded
sampling that repeats, the router's errors with their codes, cancel, several requests in
flight, min_tokens and logit_bias from the clients to the engine and back, and a bench report
whose counts add up.

    DERAS_BUILD_DIR=build python3 tests/integration/test_clients_e2e.py
Exit 77 (skipped) without pyzmq/msgpack or the built binaries.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# cluster checks pyzmq/msgpack and the built binaries (exit 77 where they are missing)
from cluster import DERAS, ROUTER, STEP_DELAY, WORKER, Chunk, Client, DerasError  # noqa: E402
from cluster import TINY as MODEL  # noqa: E402
from deras_client import Final  # noqa: E402  (cluster put the client on the path)

import zmq  # noqa: E402


class Servers(unittest.TestCase):
    """Base: a router (with router_args(dir)) and one worker per test class."""

    worker_env = {}  # extra environment of the worker

    @classmethod
    def router_args(cls, d):
        return []

    @classmethod
    def make_client(cls, **kw):
        return Client(cls.address, timeout=30, **kw)

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="deras-e2e-")
        cls.address = "ipc://%s/clients.sock" % cls.dir
        workers = "ipc://%s/workers.sock" % cls.dir
        env = dict(os.environ, DERAS_RUNTIME_DIR=cls.dir)
        cls.logs = [open(os.path.join(cls.dir, n), "w+") for n in ("router.log", "worker.log")]
        cls.router = subprocess.Popen([ROUTER, "--model", MODEL, "--listen", cls.address,
                                       "--workers", workers, *cls.router_args(cls.dir)],
                                      env=env, stdout=cls.logs[0], stderr=subprocess.STDOUT)
        cls.worker = subprocess.Popen([WORKER, "--model", MODEL, "--router", workers,
                                       "--threads", "1", "--kv-cache-memory", "64MiB"],
                                      env=dict(env, **cls.worker_env),
                                      stdout=cls.logs[1], stderr=subprocess.STDOUT)
        cls.client = cls.make_client()
        deadline = time.monotonic() + 60
        while True:
            try:
                pong = cls.client.ping(timeout=1)
                if any(w["state"] == "ready" for w in pong["workers"]):
                    break
            except DerasError:
                pass
            if time.monotonic() > deadline or cls.router.poll() is not None \
                    or cls.worker.poll() is not None:
                cls.tearDownClass()
                raise RuntimeError("router + worker did not become ready:\n" + cls.log_text())
            time.sleep(0.1)

    @classmethod
    def log_text(cls):
        out = []
        for f in cls.logs:
            f.flush()
            f.seek(0)
            out.append(f.read())
        return "\n".join(out)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        for p in (cls.worker, cls.router):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (cls.worker, cls.router):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in cls.logs:
            f.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def deras(self, *args, timeout=120, env=None):
        return subprocess.run([DERAS, *args], capture_output=True, timeout=timeout,
                              env=dict(os.environ, **(env or {})))


class EndToEnd(Servers):
    # steps 3 ms longer (the test-only knob): the 4000-token stream that the cancel test
    # cuts would run 12 s, so it cannot end by itself before the cancel on any machine
    worker_env = {STEP_DELAY: "3"}

    # ---- Python client ----

    def test_greedy_text_is_the_same_streamed_or_not(self):
        whole = self.client.complete("Hello, how are you?", max_tokens=24, temperature=0)
        events = list(self.client.stream("Hello, how are you?", max_tokens=24, temperature=0))
        chunks = [e for e in events if isinstance(e, Chunk)]
        self.assertIsInstance(events[-1], Final)
        self.assertEqual("".join(c.text for c in chunks), whole.text)
        self.assertEqual([t for c in chunks for t in c.token_ids], whole.token_ids[0])
        self.assertIn(whole.finish_reasons[0], ("length", "stop"))
        self.assertGreater(whole.usage.prompt_tokens, 0)
        self.assertEqual(whole.usage.completion_tokens, len(whole.token_ids[0]))

    def test_seeded_sampling_repeats_and_n_gives_n_samples(self):
        a = self.client.complete("Once", max_tokens=16, seed=5, n=3, ignore_eos=True)
        b = self.client.complete("Once", max_tokens=16, seed=5, n=3, ignore_eos=True)
        self.assertEqual(a.token_ids, b.token_ids)
        self.assertEqual([len(t) for t in a.token_ids], [16, 16, 16])
        self.assertEqual(a.finish_reasons, ["length"] * 3)

    def test_prompt_ids_and_logprobs(self):
        c = self.client.complete(prompt_ids=[10, 20, 30], max_tokens=4, logprobs=2,
                                 ignore_eos=True)
        self.assertEqual(c.usage.prompt_tokens, 3)
        lps = c.choices[0].logprobs
        self.assertEqual(len(lps), 4)
        self.assertEqual(lps[0]["token_id"], c.token_ids[0][0])
        self.assertEqual(len(lps[0]["top"]), 2)

    def test_router_errors_come_back_with_their_codes(self):
        for params, code in ((dict(prompt="Hi", max_tokens=5000), "context_length_exceeded"),
                             (dict(prompt_ids=[99999], max_tokens=2), "token_out_of_range"),
                             (dict(prompt="Hi", n=17), "limit_exceeded")):
            with self.subTest(code=code):
                with self.assertRaises(DerasError) as cm:
                    self.client.complete(**params)
                self.assertEqual(cm.exception.code, code)
                self.assertTrue(cm.exception.message)

    def test_cancel_ends_a_stream_with_abort(self):
        s = self.client.stream("Hi", max_tokens=4000, ignore_eos=True)
        next(s)
        s.cancel()
        last = list(s)[-1]
        self.assertEqual(last.finish_reason, "abort")

    def test_several_requests_in_flight(self):
        streams = [self.client.stream("Tell me", max_tokens=12, seed=i, ignore_eos=True)
                   for i in range(6)]
        done = [s.collect() for s in reversed(streams)]
        self.assertEqual([len(d.token_ids[0]) for d in done], [12] * 6)
        self.assertEqual(self.client.in_flight, [])

    # ---- min_tokens and logit_bias, end to end ----

    def test_logit_bias_and_min_tokens_through_the_router(self):
        """A +100 bias makes token X every greedy choice and -100 bans the greedy first
        token; with X a stop token a sample ends at its first token, with min_tokens 3 at its
        fourth, and stop strings are looked for only after min_tokens tokens; the router
        refuses what it must, with the codes of docs/protocol.md."""
        plain = self.client.complete("Once upon", max_tokens=6, temperature=0, ignore_eos=True)
        first = plain.token_ids[0][0]
        banned = self.client.complete("Once upon", max_tokens=6, temperature=0, ignore_eos=True,
                                      logit_bias={first: -100})
        self.assertNotEqual(banned.token_ids[0][0], first)
        x = 300
        forced = self.client.complete("Once upon", max_tokens=6, temperature=0,
                                      ignore_eos=True, logit_bias={x: 100})
        self.assertEqual(forced.token_ids[0], [x] * 6)
        stopped = self.client.complete("Once upon", max_tokens=6, temperature=0,
                                       stop_token_ids=[x], logit_bias={x: 100})
        self.assertEqual((stopped.token_ids[0], stopped.finish_reasons[0]), ([x], "stop"))
        waited = self.client.complete("Once upon", max_tokens=6, temperature=0,
                                      stop_token_ids=[x], logit_bias={x: 100}, min_tokens=3)
        ids = waited.token_ids[0]
        self.assertEqual((len(ids), ids[3], waited.finish_reasons[0]), (4, x, "stop"))
        self.assertNotIn(x, ids[:3])
        self.assertEqual(waited.usage.completion_tokens, 4)
        # a stop string: the text of X, found only in the text after min_tokens tokens
        piece = forced.text[:len(forced.text) // 6]
        self.assertEqual(forced.text, piece * 6, "token %d must detokenize alone" % x)
        for min_tokens, text in ((0, ""), (3, piece * 3)):
            with self.subTest(min_tokens=min_tokens):
                c = self.client.complete("Once upon", max_tokens=6, temperature=0,
                                         ignore_eos=True, logit_bias={x: 100}, stop=piece,
                                         min_tokens=min_tokens)
                self.assertEqual((c.text, c.finish_reasons[0]), (text, "stop"))
        for params, code in ((dict(logit_bias={5000: 1.0}), "token_out_of_range"),
                             (dict(logit_bias={5: 101.0}), "value_out_of_range"),
                             (dict(max_tokens=4, min_tokens=5), "value_out_of_range")):
            with self.subTest(code=code):
                with self.assertRaises(DerasError) as cm:
                    self.client.complete("Hi", **params)
                self.assertEqual(cm.exception.code, code)
        # the same through `deras complete`'s flags
        r = self.deras("complete", "--address", self.address, "--max-tokens", "6",
                       "--temperature", "0", "--logit-bias", "%d:100" % x, "--stop-token-id",
                       str(x), "--min-tokens", "3", "--no-stream", "Once upon")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn(b"completion 4 tokens", r.stderr)

    # ---- deras complete ----

    def test_deras_complete_prints_what_the_python_client_gets(self):
        want = self.client.complete("The sea", max_tokens=20, temperature=0).text
        for extra in ([], ["--no-stream"]):
            with self.subTest(extra=extra):
                r = self.deras("complete", "--address", self.address, "--max-tokens", "20",
                               "--temperature", "0", *extra, "The sea")
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                self.assertEqual(r.stdout.decode(), want + ("\n" if want else ""))
                self.assertIn(b"completion 20 tokens", r.stderr)

    def test_deras_complete_server_error_exits_1(self):
        r = self.deras("complete", "--address", self.address, "--max-tokens", "5000", "Hi")
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"error context_length_exceeded", r.stderr)

    # ---- deras bench ----

    def test_deras_bench_reports_every_request_and_token(self):
        r = self.deras("bench", "--address", self.address, "--requests", "24", "--rate", "200",
                       "--concurrency", "8", "--max-tokens", "16", "--ignore-eos", "--seed", "1",
                       "--json", "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        rep = json.loads(r.stdout)
        self.assertEqual((rep["ok"], rep["failed"]), (24, 0))
        self.assertEqual(rep["output_tokens"], 24 * 16)
        self.assertEqual(rep["itl_ms"]["n"], 24 * 15)
        for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            self.assertLessEqual(rep[k]["p50"], rep[k]["p99"])
        self.assertGreater(rep["output_tokens_per_s"], 0)

    def test_deras_bench_random_prompt_ids(self):
        r = self.deras("bench", "--address", self.address, "--requests", "8",
                       "--random-prompt-tokens", "16:64", "--max-tokens", "4", "--ignore-eos",
                       "--json", "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        rep = json.loads(r.stdout)
        self.assertEqual(rep["ok"], 8)
        self.assertTrue(8 * 16 <= rep["input_tokens"] <= 8 * 64, rep["input_tokens"])


class CurveEndToEnd(Servers):
    """The router encrypts its client socket and admits only listed client keys."""

    @classmethod
    def router_args(cls, d):
        server_pub, server_sec = zmq.curve_keypair()
        cls.client_pub, cls.client_sec = zmq.curve_keypair()
        cls.server_pub = server_pub.decode()
        secret_file = os.path.join(d, "router.key")
        with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write('public-key = "%s"\nsecret-key = "%s"\n' % (server_pub.decode(),
                                                               server_sec.decode()))
        allow = os.path.join(d, "allow")
        with open(allow, "w") as f:
            f.write("# the test client\n%s\n" % cls.client_pub.decode())
        cls.client_key_file = os.path.join(d, "client.key")
        with open(os.open(cls.client_key_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write('public-key = "%s"\nsecret-key = "%s"\n' % (cls.client_pub.decode(),
                                                               cls.client_sec.decode()))
        return ["--curve-secret-key", secret_file, "--curve-allow", allow]

    @classmethod
    def make_client(cls, **kw):
        return Client(cls.address, timeout=30, curve_server_key=cls.server_pub,
                      curve_client_keys=(cls.client_pub, cls.client_sec), **kw)

    def test_python_client_with_an_allowed_key(self):
        self.assertEqual(len(self.client.complete("Hi", max_tokens=4, ignore_eos=True)
                             .token_ids[0]), 4)

    def test_python_client_with_another_key_is_refused_by_name(self):
        # the router's ZAP answer reaches the client's monitor: "unauthenticated" at once,
        # whatever the request timeout (60 s here, a hang guard)
        with Client(self.address, timeout=60, curve_server_key=self.server_pub) as c:
            t0 = time.monotonic()
            with self.assertRaises(DerasError) as cm:
                c.complete("Hi", max_tokens=4)
            self.assertEqual(cm.exception.code, "unauthenticated")
            self.assertIn("--curve-allow", cm.exception.message)
            self.assertLess(time.monotonic() - t0, 30.0)

    def test_deras_complete_and_bench_with_the_client_key(self):
        r = self.deras("complete", "--address", self.address, "--curve-server-key",
                       self.server_pub, "--curve-client-key", self.client_key_file,
                       "--max-tokens", "4", "--ignore-eos", "Hi")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn(b"completion 4 tokens", r.stderr)
        r = self.deras("bench", "--address", self.address, "--requests", "4", "--max-tokens",
                       "3", "--json", "--quiet",
                       env={"DERAS_CURVE_SERVER_KEY": self.server_pub,
                            "DERAS_CURVE_CLIENT_KEY": self.client_key_file})
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertEqual(json.loads(r.stdout)["ok"], 4)

    def test_deras_complete_without_an_allowed_key_times_out(self):
        r = self.deras("complete", "--address", self.address, "--curve-server-key",
                       self.server_pub, "--timeout", "0.5", "Hi")
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"timeout", r.stderr)
        os.chmod(self.client_key_file, 0o644)
        try:
            r = self.deras("complete", "--address", self.address, "--curve-server-key",
                           self.server_pub, "--curve-client-key", self.client_key_file, "Hi")
        finally:
            os.chmod(self.client_key_file, 0o600)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"chmod 600", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
