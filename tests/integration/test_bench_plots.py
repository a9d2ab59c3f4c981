#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_bench_plots - `deras bench --samples` and bench/plot_bench.py (issue 16).

Three short bench runs against a cluster on the tiny model (all at once, and Poisson at
10 and 20 requests/s) write their samples; the file has the run line and one line per request,
consistent with the run's own totals; the plot script turns both into the two PNGs.
"""

import json
import os
import subprocess
import sys
import tempfile
import shutil
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import DERAS, ROOT, Cluster  # noqa: E402

PLOT = os.path.join(ROOT, "bench", "plot_bench.py")


class BenchPlots(unittest.TestCase):
    def test_samples_and_pictures(self):
        d = tempfile.mkdtemp(prefix="deras-plots-")
        c = Cluster(n_workers=1)
        try:
            files = []
            for rate in ("0", "10", "20"):
                path = os.path.join(d, "rate-%s.jsonl" % rate)
                r = subprocess.run([DERAS, "bench", "--address", c.address, "--requests", "12",
                                    "--rate", rate, "--max-tokens", "4:8", "--seed", "1",
                                    "--ignore-eos",
                                    "--quiet", "--json", "--samples", path],
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr)
                report = json.loads(r.stdout)
                with open(path) as f:
                    lines = [json.loads(x) for x in f]
                self.assertEqual(len(lines), 13)
                run, samples = lines[0]["run"], lines[1:]
                self.assertEqual(run["ok"], report["ok"])
                self.assertEqual(run["config"]["rate"], float(rate))
                self.assertRegex(run["date"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
                self.assertEqual([s["i"] for s in samples], list(range(12)))
                self.assertEqual(sum(s["ok"] for s in samples), report["ok"])
                self.assertEqual(sum(s["output_tokens"] for s in samples),
                                 report["output_tokens"])
                for s in samples:
                    if s["ok"]:
                        self.assertTrue(4 <= s["output_tokens"] <= 8)
                        self.assertLessEqual(s["ttft_ms"], s["e2e_ms"])
                        self.assertGreaterEqual(s["send_s"], s["arrival_s"])
                files.append(path)
            out = os.path.join(d, "png")
            p = subprocess.run([sys.executable, PLOT, "--out", out] + files,
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            for name in ("latency_cdf.png", "throughput_vs_load.png"):
                with open(os.path.join(out, name), "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)
            print("bench plots: 3 runs x 12 requests sampled; %s" % ", ".join(sorted(os.listdir(out))))
        finally:
            codes = c.stop()
            shutil.rmtree(d, ignore_errors=True)
        self.assertEqual(codes, [0, 0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
