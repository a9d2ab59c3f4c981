# SPDX-License-Identifier: Apache-2.0
"""test_openai_api.py - the router's OpenAI-compatible HTTP API (docs/http_api.md) end to end.

A Cluster (tests/integration/cluster.py) on the tiny model (tests/data/tiny-chat, which has
a chat template) with one worker; the API is on the cluster's HTTP port. Two halves:

  Raw:    plain HTTP with urllib: every route, every error status with its OpenAI error
          object (400 naming the field, 401, 404, 405, 413), server-sent events ending in
          [DONE] with include_usage, a client that disconnects mid-stream has its request
          aborted (the router's metrics count the abort; no timing is assumed).
  OpenAI: the official `openai` package (PyPI): models.list, chat.completions.create
          streaming and not, n=2, stop, seed reproducibility, logprobs, completions.create,
          an error parsed as openai.BadRequestError, and an API key required when the
          router has --api-key-file.

The openai package is looked for on sys.path, then in $DERAS_PYLIB or .dev/pylib (where
tools/bootstrap's test stage installs it with pip --target); without it the OpenAI half is
skipped, the raw half still runs.

    DERAS_BUILD_DIR=build python3 tests/integration/test_openai_api.py
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cluster import ROOT, ROUTER, STEP_DELAY, TINY, Cluster, free_port  # noqa: E402

sys.path.append(os.environ.get("DERAS_PYLIB", os.path.join(ROOT, ".dev", "pylib")))
try:
    import openai  # noqa: E402
except ImportError:
    openai = None

KEY = "sk-test-0123456789"


def http(base, method, path, body=None, headers=None, raw=None):
    """(status, parsed JSON or text) of one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers=dict({"Content-Type": "application/json"},
                                              **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def sse_events(text):
    """The data payloads of a server-sent-event body."""
    return [block[len("data: "):] for block in text.split("\n\n") if block.startswith("data: ")]


class Raw(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Cluster(n_workers=1)
        cls.base = cls.c.metrics_url
        cls.model = http(cls.base, "GET", "/v1/models")[1]["data"][0]["id"]

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def error(self, status, body, want_status, want_code, want_param=None, **kw):
        self.assertEqual(status, want_status, body)
        err = body["error"]
        self.assertEqual(err["code"], want_code, body)
        self.assertTrue(err["message"])
        self.assertIn(err["type"], ("invalid_request_error", "authentication_error",
                                    "rate_limit_error", "server_error"))
        if want_param is not None:
            self.assertEqual(err["param"], want_param, body)

    def test_models_and_health(self):
        s, b = http(self.base, "GET", "/v1/models")
        self.assertEqual(s, 200)
        self.assertEqual(b["object"], "list")
        self.assertEqual(b["data"][0]["id"], "tiny-chat")
        self.assertEqual(http(self.base, "GET", "/health")[0], 200)
        self.assertEqual(http(self.base, "GET", "/live")[0], 200)

    def test_completion_and_chat(self):
        s, b = http(self.base, "POST", "/v1/completions",
                    {"model": self.model, "prompt": "hello", "max_tokens": 5, "temperature": 0,
                     "ignore_eos": True})
        self.assertEqual(s, 200, b)
        self.assertEqual(b["object"], "text_completion")
        self.assertEqual(b["usage"]["completion_tokens"], 5)
        self.assertEqual(b["usage"]["total_tokens"],
                         b["usage"]["prompt_tokens"] + b["usage"]["completion_tokens"])
        self.assertEqual(b["choices"][0]["finish_reason"], "length")
        s, b = http(self.base, "POST", "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        self.assertEqual(s, 200, b)
        self.assertEqual(b["object"], "chat.completion")
        self.assertEqual(b["choices"][0]["message"]["role"], "assistant")

    def test_stream_with_usage(self):
        s, text = http(self.base, "POST", "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
                        "min_tokens": 6,  # the turn cannot end early: 6 tokens each
                        "stream": True, "stream_options": {"include_usage": True}, "n": 2})
        self.assertEqual(s, 200)
        events = sse_events(text)
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        usage = chunks[-1]
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["completion_tokens"], 12)
        finishes = {c["choices"][0]["index"]: c["choices"][0]["finish_reason"]
                    for c in chunks[:-1] if c["choices"][0]["finish_reason"]}
        self.assertEqual(set(finishes), {0, 1})
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")

    def test_tokenize_roundtrip(self):
        s, b = http(self.base, "POST", "/tokenize", {"prompt": "hello world"})
        self.assertEqual(s, 200, b)
        self.assertEqual(b["count"], len(b["tokens"]))
        s2, b2 = http(self.base, "POST", "/detokenize", {"tokens": b["tokens"]})
        self.assertEqual(s2, 200, b2)
        self.assertIn("hello world", b2["prompt"])
        s, b = http(self.base, "POST", "/tokenize", {"prompt": "messages"})
        self.assertEqual(s, 200, b)
        s, b = http(self.base, "POST", "/tokenize",
                    {"messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual(s, 200, b)
        self.assertGreater(b["count"], 1)

    def test_errors(self):
        p = "/v1/completions"
        self.error(*http(self.base, "POST", p, raw=b"{not json"), 400, "malformed")
        self.error(*http(self.base, "POST", p, {"prompt": "a", "temperature": "hot"}), 400,
                   "invalid_field", "temperature")
        self.error(*http(self.base, "POST", p, {"prompt": "a", "n": 100000}), 400,
                   "limit_exceeded", "n")
        self.error(*http(self.base, "POST", p, {"prompt": "a", "frobnicate": 1}), 400,
                   "invalid_field", "frobnicate")
        self.error(*http(self.base, "POST", p, {"prompt": "a", "echo": True}), 400,
                   "invalid_field", "echo")
        self.error(*http(self.base, "POST", p, {"prompt": "a", "model": "gpt-4"}), 404,
                   "model_not_found", "model")
        self.error(*http(self.base, "POST", p, {"prompt": [5000000]}), 400,
                   "token_out_of_range")
        self.error(*http(self.base, "POST", p, {"prompt": "a", "max_tokens": 30000}), 400,
                   "context_length_exceeded")
        self.error(*http(self.base, "GET", p), 405, "method_not_allowed")
        self.error(*http(self.base, "GET", "/v1/nothing"), 404, "not_found")
        big = b'{"prompt": "' + b"a" * (5 << 20) + b'"}'
        self.error(*http(self.base, "POST", p, raw=big), 413, "message_too_large")
        self.error(*http(self.base, "POST", p, raw=b'{"prompt": "a", "top_p": NaN}'), 400,
                   "malformed")
        self.error(*http(self.base, "POST", "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
                   400, "invalid_field", "messages[0].content")
        # a 1 MiB header: libmicrohttpd answers 431 once its 32 KiB per connection are full
        # and closes; the client may still be sending then, and see the reset instead
        try:
            status, _ = http(self.base, "POST", p, {"prompt": "a"},
                             headers={"X-Big": "b" * (1 << 20)})
        except OSError:  # ConnectionResetError, BrokenPipeError
            status = 431
        self.assertEqual(status, 431)
        # the router still serves
        self.assertEqual(http(self.base, "POST", p, {"prompt": "a", "max_tokens": 1})[0], 200)

    def test_disconnect_aborts(self):
        def aborts():
            _, text = http(self.base, "GET", "/metrics")
            for line in text.splitlines():
                if line.startswith('deras_requests_total{finish_reason="abort"}'):
                    return float(line.split()[-1])
            return 0.0
        before = aborts()
        body = json.dumps({"prompt": "hello", "max_tokens": 200, "ignore_eos": True,
                           "stream": True}).encode()
        port = int(self.base.rsplit(":", 1)[1])
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while b"data: " not in got:  # the stream has begun
            chunk = s.recv(4096)
            self.assertTrue(chunk, "the stream ended before its first event")
            got += chunk
        s.close()
        deadline = time.monotonic() + 60
        while aborts() <= before:
            self.assertLess(time.monotonic(), deadline, "the disconnect never aborted it")
            time.sleep(0.1)


class NoWorkers(unittest.TestCase):
    """A router without workers: a request waits --no-workers-wait-ms, then 503 no_workers;
    while it stops, 503 shutting_down."""

    def test_503(self):
        d = tempfile.mkdtemp(prefix="deras-openai-nw-")
        port = free_port()
        base = "http://127.0.0.1:%d" % port
        p = subprocess.Popen([ROUTER, "--model", TINY, "--listen", "ipc://%s/c.sock" % d,
                              "--workers", "ipc://%s/w.sock" % d, "--metrics-listen",
                              "127.0.0.1:%d" % port, "--no-workers-wait-ms", "200"],
                             env=dict(os.environ, DERAS_RUNTIME_DIR=d),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if http(base, "GET", "/live")[0] == 200:
                        break
                except OSError:
                    pass
                self.assertLess(time.monotonic(), deadline, "the router never answered /live")
                time.sleep(0.05)
            for stream in (False, True):
                s, b = http(base, "POST", "/v1/completions", {"prompt": "a", "stream": stream})
                self.assertEqual(s, 503, b)
                self.assertEqual(b["error"]["code"], "no_workers")
                self.assertEqual(b["error"]["type"], "server_error")
        finally:
            p.terminate()
            self.assertEqual(p.wait(timeout=60), 0)


    def test_bad_key_files_stop_the_router(self):
        d = tempfile.mkdtemp(prefix="deras-openai-kf-")
        empty = os.path.join(d, "empty")
        with open(empty, "w") as f:
            f.write("# no key here\n\n")
        for path, words in ((empty, "holds no key"), (os.path.join(d, "absent"), "cannot open"),
                            (d, "cannot read")):
            r = subprocess.run([ROUTER, "--model", TINY, "--listen", "ipc://%s/c.sock" % d,
                                "--workers", "ipc://%s/w.sock" % d, "--metrics-listen",
                                "127.0.0.1:%d" % free_port(), "--api-key-file", path],
                               env=dict(os.environ, DERAS_RUNTIME_DIR=d), capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(words, r.stderr)


class Drain(unittest.TestCase):
    """SIGTERM while a call streams: the request finishes, its stream ends with [DONE], and
    only then does the router exit (0). The worker's steps are slowed (a test-only knob), so
    the stream is still running when the signal comes, on any machine."""

    def test_stream_outlives_sigterm(self):
        c = Cluster(n_workers=1, worker_env={STEP_DELAY: "20"})
        try:
            port = int(c.metrics_url.rsplit(":", 1)[1])
            body = json.dumps({"prompt": "hello", "max_tokens": 40, "ignore_eos": True,
                               "stream": True}).encode()
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                      % len(body) + body)
            got = b""
            while b"data: " not in got:
                chunk = s.recv(4096)
                self.assertTrue(chunk, "the stream ended before its first event")
                got += chunk
            c.router.send_signal(signal.SIGTERM)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
            s.close()
            self.assertIn(b"data: [DONE]", got)
            self.assertIn(b'"finish_reason":"length"', got)
            self.assertEqual(c.router.wait(timeout=60), 0)
        finally:
            c.stop()


@unittest.skipIf(openai is None, "the openai package is not installed (pip install openai)")
class OpenAI(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="deras-openai-")
        keys = os.path.join(cls.dir, "keys")
        with open(keys, "w") as f:
            f.write("# test keys\n%s\n" % KEY)
        cls.c = Cluster(n_workers=1, router_args=("--api-key-file", keys))
        cls.client = openai.OpenAI(base_url=cls.c.metrics_url + "/v1", api_key=KEY,
                                   max_retries=0)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def chat(self, **kw):
        return self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "Tell me a story."}], **kw)

    def test_models_list(self):
        self.assertEqual([m.id for m in self.client.models.list().data], ["tiny-chat"])

    def test_chat(self):
        r = self.chat(max_tokens=8)
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_chat_stream_matches(self):
        whole = self.chat(max_tokens=10, temperature=0).choices[0].message.content
        parts = []
        usage = None
        for chunk in self.chat(max_tokens=10, temperature=0, stream=True,
                               stream_options={"include_usage": True}):
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                parts.append(ch.delta.content or "")
        self.assertEqual("".join(parts), whole)
        self.assertIsNotNone(usage)

    def test_n_and_seed(self):
        a = self.chat(max_tokens=8, n=2, seed=7, temperature=1.0)
        b = self.chat(max_tokens=8, n=2, seed=7, temperature=1.0)
        self.assertEqual(sorted(c.index for c in a.choices), [0, 1])
        self.assertEqual({c.index: c.message.content for c in a.choices},
                         {c.index: c.message.content for c in b.choices})

    def test_stop(self):
        whole = self.chat(max_tokens=12, temperature=0).choices[0].message.content
        if len(whole) < 3:
            self.skipTest("answer too short to cut")
        stop = whole[1:3]
        r = self.chat(max_tokens=12, temperature=0, stop=[stop])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].message.content, whole[:whole.index(stop)])

    def test_logprobs(self):
        r = self.chat(max_tokens=4, logprobs=True, top_logprobs=2, temperature=0)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for t in content:
            self.assertLessEqual(t.logprob, 0.0)
            self.assertEqual(len(t.top_logprobs), 2)
            self.assertAlmostEqual(t.top_logprobs[0].logprob, t.logprob, places=4)  # greedy

    def test_completions(self):
        r = self.client.completions.create(model=self.model, prompt="Once upon", max_tokens=5,
                                           logprobs=1, extra_body={"ignore_eos": True})
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(len(r.choices[0].logprobs.tokens), 5)
        self.assertEqual(r.usage.completion_tokens, 5)

    def test_bad_request(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.chat(max_tokens=4, temperature=250)
        self.assertEqual(cm.exception.body["code"], "value_out_of_range")
        self.assertEqual(cm.exception.body["param"], "temperature")
        with self.assertRaises(openai.BadRequestError) as cm:  # a schema that cannot be enforced
            self.chat(response_format={"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "object", "not": {}}}})
        self.assertEqual(cm.exception.body["code"], "invalid_grammar")

    def test_key_required(self):
        bad = openai.OpenAI(base_url=self.c.metrics_url + "/v1", api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            bad.models.list()
        # probes need none
        self.assertEqual(http(self.c.metrics_url, "GET", "/health")[0], 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
