#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_readme - every example in README.md's ```sh blocks runs as written (issue 16).

The test serves the test model the way `tools/bootstrap serve` does (`deras serve` on
tcp://127.0.0.1:5555, HTTP on 127.0.0.1:9400, the admin socket in a private
$DERAS_RUNTIME_DIR), then runs each command line of the README from the repository root
with bash, and requires exit status 0. Three substitutions stand for what a reader fills
in: /path/to/model.gguf is the test model, /path/to/hf-model-dir the tiny Hugging Face
model of tests/data, and the two `tools/bootstrap` lines are not run (they are the set-up
this suite itself runs under). Every other line runs exactly as printed.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import ROOT, TINY  # noqa: E402

MODEL = os.environ.get("DERAS_TEST_MODEL", "")
DERAS = os.path.join(ROOT, "build", "tools", "deras")
DERASCTL = os.path.join(ROOT, "build", "tools", "derasctl")


def commands(readme):
    """The command lines of the ```sh blocks: continuations joined, comments dropped."""
    out, block = [], None
    for line in open(readme).read().splitlines():
        if line.startswith("```"):
            block = [] if block is None and line.strip() == "```sh" else None
            continue
        if block is None:
            continue
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + " " + line.strip()
            continue
        out.append(line)
    # a trailing comment starts at "  #" (two spaces): keep what comes before
    return [re.split(r"\s{2,}#", c)[0].strip() for c in out if c.strip()
            and not c.lstrip().startswith("#")]


def port_free(port):
    with socket.socket() as s:
        # as the router binds: connections of an earlier run in TIME_WAIT do not count
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class Readme(unittest.TestCase):
    def test_every_example_runs_as_written(self):
        if not os.path.isfile(MODEL):
            self.fail("DERAS_TEST_MODEL is not a file: %r (tools/bootstrap model)" % MODEL)
        for port in (5555, 9400):
            self.assertTrue(port_free(port), "port %d is taken: the README's examples use it"
                            % port)
        cmds = commands(os.path.join(ROOT, "README.md"))
        self.assertGreater(len(cmds), 10)
        d = tempfile.mkdtemp(prefix="deras-readme-")
        os.chmod(d, 0o700)
        env = dict(os.environ, DERAS_RUNTIME_DIR=d)
        for k in ("DERAS_ADDRESS", "DERAS_ADMIN", "DERAS_LISTEN"):
            env.pop(k, None)
        log = open(os.path.join(d, "serve.log"), "w+")
        serve = subprocess.Popen([DERAS, "serve", "--model", MODEL, "--listen",
                                  "tcp://127.0.0.1:5555"], cwd=ROOT, env=env, stdout=log,
                                 stderr=subprocess.STDOUT)
        ran = []
        try:
            deadline = time.monotonic() + 180
            while subprocess.run([DERASCTL, "health"], env=env, capture_output=True,
                                 timeout=60).returncode != 0:
                self.assertIsNone(serve.poll(), "deras serve exited")
                self.assertLess(time.monotonic(), deadline, "deras serve never ready")
                time.sleep(0.2)
            for c in cmds:
                if c.startswith("tools/bootstrap "):
                    continue
                run = c.replace("/path/to/model.gguf", MODEL).replace("/path/to/hf-model-dir",
                                                                      TINY)
                t0 = time.monotonic()
                r = subprocess.run(["bash", "-c", run], cwd=ROOT, env=env, capture_output=True,
                                   text=True, timeout=600)
                self.assertEqual(r.returncode, 0, "README example failed: %s\n%s%s"
                                 % (c, r.stdout[-2000:], r.stderr[-2000:]))
                ran.append((c, time.monotonic() - t0))
        finally:
            serve.send_signal(2)
            try:
                serve.wait(60)
            except subprocess.TimeoutExpired:
                serve.kill()
            log.close()
            shutil.rmtree(d, ignore_errors=True)
        print("README: %d examples ran as written (%s)" % (
            len(ran), "; ".join("%s %.1f s" % (c.split()[0].split("/")[-1] + " " +
                                               (c.split()[1] if len(c.split()) > 1 else ""), t)
                                for c, t in ran)))


if __name__ == "__main__":
    unittest.main(verbosity=2)
