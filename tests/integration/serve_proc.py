# SPDX-License-Identifier: Apache-2.0
"""serve_proc.py - one `deras serve` (router + worker) as a test fixture on free ports.

Used by the structured-output and tool-calling tests (test_structured_output.py,
test_tool_calls.py) on the test model: tcp client port, HTTP port and admin socket of its
own in a private directory, started with extra options, ready when /health answers, stopped
with SIGINT (its exit status must be 0).
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from cluster import DERAS, free_port


class Serve:
    def __init__(self, model, *args, timeout=300):
        self.dir = tempfile.mkdtemp(prefix="deras-serve-")
        self.address = "tcp://127.0.0.1:%d" % free_port()
        self.url = "http://127.0.0.1:%d" % free_port()
        self.log = open(os.path.join(self.dir, "serve.log"), "w+")
        self.proc = subprocess.Popen(
            [DERAS, "serve", "--model", model, "--listen", self.address, "--admin",
             "ipc://%s/admin.sock" % self.dir, "--metrics-listen", self.url[len("http://"):],
             *args],
            env=dict(os.environ, DERAS_RUNTIME_DIR=self.dir), stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("deras serve never became ready:\n" + self.text())
            time.sleep(0.2)

    def text(self):
        """The last 6000 characters of everything it logged."""
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-6000:]

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        """SIGINT, then its exit status (killed after 60 s)."""
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return code
