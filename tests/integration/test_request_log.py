#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_request_log - the router's per-request line and periodic stats line (issue 16).

Every request gets exactly one info line when it ends (its id, outcome, tokens and times)
or is refused (its id and error code), and no line carries prompt text, even with ids
that try to forge a line. While there is work, a stats line comes every --stats-interval
seconds with running, waiting, KV use and token rates. Ordering is by construction: the
test waits for each request's end, then for a stats line that follows it.
"""

import os
import re
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, DerasError  # noqa: E402

SECRET = "zebra-marmalade-%d" % os.getpid()   # in every prompt; must never be logged
STATS = re.compile(r"stats: (\d+) running, (\d+) waiting \((\d+) in the router's queue\), "
                   r"KV cache ([\d.]+)% used, (\d+) workers ready; prompt ([\d.]+) tokens/s, "
                   r"generation ([\d.]+) tokens/s; (\d+) requests ended in ([\d.]+) s")


class RequestLog(unittest.TestCase):
    def test_one_line_per_request_never_the_prompt_and_a_stats_line(self):
        c = Cluster(n_workers=1, router_args=("--stats-interval", "1"))
        try:
            ids = []
            for i in range(5):
                rid = "ok-%d" % i
                # ignore_eos: the prompt holds this process's pid, so where the model would
                # end its answer differs from run to run; the lengths must not
                r = c.client.complete("%s says %d" % (SECRET, i), max_tokens=3 + i,
                                      temperature=0, id=rid, ignore_eos=True)
                self.assertEqual(len(r.token_ids[0]), 3 + i)
                ids.append((rid, "ended: "))
            r = c.client.complete(SECRET + " twice", max_tokens=4, n=2, temperature=0.8,
                                  seed=3, id="two", ignore_eos=True)
            ids.append(("two", "ended: "))
            with self.assertRaises(DerasError) as e:
                c.client.complete(SECRET + " too long", max_tokens=5000, id="long")
            self.assertEqual(e.exception.code, "context_length_exceeded")
            ids.append(("long", "refused: "))
            # an id that tries to start a line of its own is shown with '?' for control
            # characters and quotes
            forged = 'x"\nstats: 0 running'
            c.client.complete(SECRET, max_tokens=2, temperature=0, id=forged, ignore_eos=True)
            ids.append(('x??stats: 0 running', "ended: "))
            deadline = time.monotonic() + 60
            log = c.router_log()
            while not any(int(m.group(8)) > 0 for m in STATS.finditer(log)):
                self.assertLess(time.monotonic(), deadline, "no stats line:\n" + log)
                time.sleep(0.1)
                log = c.router_log()
            self.assertNotIn(SECRET, log)
            for rid, what in ids:
                lines = [ln for ln in log.splitlines()
                         if ('request "%s" ' % rid) in ln]
                self.assertEqual(len(lines), 1, "request %r: %s" % (rid, lines))
                self.assertIn(what, lines[0])
            two = [ln for ln in log.splitlines() if 'request "two" ' in ln][0]
            self.assertRegex(two, r"prompt \d+ tokens, 8 generated \(n 2\), queue [\d.]+ ms, "
                                  r"first token [\d.]+ ms, total [\d.]+ ms, worker w0")
            m = [m for m in STATS.finditer(log) if int(m.group(8)) > 0][0]
            self.assertEqual(m.group(5), "1")        # one worker ready
            self.assertGreater(float(m.group(7)), 0)  # generation tokens/s
            print("request log: %d requests, one line each, no prompt text; stats line: %s"
                  % (len(ids), m.group(0)))
        finally:
            codes = c.stop()
        self.assertEqual(codes, [0, 0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
