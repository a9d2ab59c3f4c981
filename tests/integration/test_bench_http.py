#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_bench_http - `deras bench --http` against `deras serve` (issue 13): its counts, not
its speed.

`deras serve` on the tiny model (tests/data/tiny-chat) with an API key file; then short
bench runs, each a fixed workload from --seed with --ignore-eos, so every request generates
exactly its max_tokens on any machine:

  counts    the same 12 completions over HTTP and over ZeroMQ: all ok, every request's
            output and prompt tokens the same over both doors (the HTTP mode counts tokens
            as the ZeroMQ mode does), totals consistent with the --samples lines
  chat      --chat over both doors: the same prompt tokens (one chat template) and outputs
  keys      a wrong key: the bench stops at GET /v1/models, exit 1, naming invalid_api_key;
            no key file at all: the same
  errors    max_tokens over the router's cap: every request fails with limit_exceeded,
            counted by that code over both doors, exit 1
  script    bench/http_vs_zmq.py runs both doors back to back and reports its summary

Nothing here times anything; the timeouts are hang guards.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import BUILD, DERAS, ROOT, Serve  # noqa: E402

KEY = "sk-bench-0123456789"


class BenchHttp(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="deras-bench-http-")
        cls.keys = os.path.join(cls.dir, "keys")
        with open(cls.keys, "w") as f:
            f.write("# bench\n%s\n" % KEY)
        cls.bad_keys = os.path.join(cls.dir, "bad-keys")
        with open(cls.bad_keys, "w") as f:
            f.write("sk-wrong\n")
        cls.s = Serve(args=("--router-arg=--api-key-file=%s" % cls.keys,))
        cls.address, cls.url = cls.s.address, cls.s.url

    @classmethod
    def tearDownClass(cls):
        code = cls.s.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert code == 0, "deras serve exited with %d" % code

    def serve_log(self):
        return self.s.log_text()

    def bench(self, transport, *args, samples=None, want_rc=0):
        target = (["--http", self.url, "--api-key-file", self.keys] if transport == "http"
                  else ["--address", self.address])
        extra = ["--samples", samples] if samples else []
        r = subprocess.run([DERAS, "bench", *target, *args, "--json", "--quiet", *extra],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, want_rc, r.stderr + self.serve_log())
        return json.loads(r.stdout) if r.stdout.strip() else None, r.stderr

    def lines(self, path):
        with open(path) as f:
            rows = [json.loads(x) for x in f]
        return rows[0]["run"], rows[1:]

    def test_counts(self):
        args = ("--requests", "12", "--max-tokens", "4:8", "--seed", "3", "--ignore-eos",
                "--concurrency", "5")
        per = {}
        for t in ("http", "zmq"):
            path = os.path.join(self.dir, "%s.jsonl" % t)
            rep, _ = self.bench(t, *args, samples=path)
            self.assertEqual((rep["ok"], rep["failed"]), (12, 0), rep)
            self.assertEqual(rep["config"]["transport"], t)
            run, samples = self.lines(path)
            self.assertEqual(run["ok"], 12)
            self.assertEqual(len(samples), 12)
            self.assertEqual(sum(s["output_tokens"] for s in samples), rep["output_tokens"])
            self.assertEqual(sum(s["prompt_tokens"] for s in samples), rep["input_tokens"])
            for s in samples:
                self.assertTrue(s["ok"], s)
                self.assertTrue(4 <= s["output_tokens"] <= 8, s)
                self.assertGreater(s["prompt_tokens"], 0, s)
                self.assertLessEqual(s["ttft_ms"], s["e2e_ms"])
            self.assertEqual(rep["ttft_ms"]["n"], 12)
            # one inter-token latency per token after each request's first
            self.assertTrue(0 < rep["itl_ms"]["n"] <= rep["output_tokens"] - 12, rep)
            per[t] = [(s["output_tokens"], s["prompt_tokens"]) for s in samples]
        self.assertEqual(per["http"], per["zmq"])

    def test_chat(self):
        args = ("--chat", "--requests", "6", "--max-tokens", "3:5", "--seed", "5",
                "--ignore-eos")
        per = {}
        for t in ("http", "zmq"):
            path = os.path.join(self.dir, "chat-%s.jsonl" % t)
            rep, _ = self.bench(t, *args, samples=path)
            self.assertEqual((rep["ok"], rep["failed"]), (6, 0), rep)
            self.assertEqual(rep["config"]["endpoint"], "chat")
            per[t] = [(s["output_tokens"], s["prompt_tokens"]) for s in self.lines(path)[1]]
        self.assertEqual(per["http"], per["zmq"])

    def test_keys(self):
        for keys in (self.bad_keys, None):
            cmd = [DERAS, "bench", "--http", self.url, "--requests", "2", "--quiet"]
            if keys:
                cmd += ["--api-key-file", keys]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("401", r.stderr)
            self.assertIn("API key", r.stderr)

    def test_errors_by_code(self):
        for t in ("http", "zmq"):
            rep, _ = self.bench(t, "--requests", "4", "--max-tokens", "40000", want_rc=1)
            self.assertEqual(rep["ok"], 0)
            self.assertEqual(rep["failed_by_code"], {"limit_exceeded": 4}, rep)

    def test_script(self):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "http_vs_zmq.py"),
                            "--build", BUILD, "--repeats", "1", "--requests", "6",
                            "--max-tokens", "4"], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(sorted(x["transport"] for x in out["runs"]), ["http", "zmq"])
        for x in out["runs"]:
            self.assertEqual(x["report"]["ok"], 6)
            self.assertEqual(x["report"]["output_tokens"], 24)
        self.assertGreater(out["summary"]["ratio_median"], 0)
        self.assertIn("cpu", out)
        for x in out["runs"]:
            self.assertEqual(set(x["cpu_s"]), {"router", "worker", "client"})


if __name__ == "__main__":
    unittest.main(verbosity=2)
