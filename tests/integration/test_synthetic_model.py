# SPDX-License-Identifier: Apache-2.0
"""test_synthetic_model.py - bench/bench_synthetic.py end to end on a tiny synthetic model.

The Llama-3-8B run of bench/bench_synthetic.py is a benchmark (a 5 GB file: never in CI);
this runs the same script, the same format path, on its `tiny` preset in Q4_K_M
(llama-quantize's mix: layer 1's attn_v and ffn_down in Q6_K next to Q4_K, so a fused
Q/K/V holds two formats): bench/make_synthetic_model.py writes it with random weights,
`deras serve` loads it with the weights used in place from the file mapping, one text
completion and three streamed requests are served, and the worker's peak resident set
stays within the file x 1.25 + the KV budget + 64 MiB. Skipped (77) without the gguf and
numpy packages (tools/bootstrap installs them into .dev/pylib).

    DERAS_BUILD_DIR=build python3 tests/integration/test_synthetic_model.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("DERAS_BUILD_DIR", os.path.join(ROOT, "build"))
PYLIB = os.path.join(ROOT, ".dev", "pylib")


def run_bench():
    """bench_synthetic.py on the tiny preset: its CompletedProcess."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (PYLIB, os.environ.get("PYTHONPATH", "")) if p))
    with tempfile.TemporaryDirectory() as tmp:
        return subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_synthetic.py"),
                               "--build", BUILD, "--preset", "tiny", "--type", "q4_k_m",
                               "--out", os.path.join(tmp, "tiny.gguf"), "--kv-cache-memory",
                               "64MiB", "--requests", "3", "--max-tokens", "8", "--no-venv",
                               "--no-llama-cpp", "--json"], env=env, capture_output=True,
                              text=True, timeout=900)


RUN = None


class SyntheticModel(unittest.TestCase):
    def test_tiny_q4_k_m_serves_within_the_memory_bound(self):
        r = RUN
        self.assertEqual(r.returncode, 0, r.stderr[-4000:] + r.stdout[-2000:])
        res = json.loads(r.stdout)
        rss = res["rss_kib"]
        print("tiny Q4_K_M: %d bytes, %s; worker peak RSS %.1f MiB (file pages %.1f, anonymous "
              "%.1f), bound %.1f MiB; decode %s tok/s" % (
                  res["file_bytes"], "; ".join(res["worker_log"]), rss["VmHWM"] / 1024,
                  rss["RssFile"] / 1024, rss["RssAnon"] / 1024, res["bound_bytes"] / (1 << 20),
                  res["decode_tok_s"]))
        self.assertTrue(res["within_bound"])
        self.assertEqual((res["deras_bench"]["ok"], res["deras_bench"]["failed"]), (3, 0))
        self.assertEqual(res["deras_bench"]["output_tokens"], 3 * 8)
        self.assertTrue(res["completion"])
        self.assertGreater(res["decode_tok_s"], 0)
        self.assertTrue(any("used in place from the file mapping" in ln for ln in res["worker_log"]))


if __name__ == "__main__":
    RUN = run_bench()
    if RUN.returncode == 77:  # skipped: the script says why
        print(RUN.stdout.strip())
        sys.exit(77)
    unittest.main(verbosity=2)
