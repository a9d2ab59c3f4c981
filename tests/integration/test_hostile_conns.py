#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_hostile_conns - connection floods against deras-router (issue 14, items 1 and 5).

The router runs with a descriptor limit of 256 (set on its process, as a small LimitNOFILE
would), clients on tcp, workers and admin on ipc, HTTP on a loopback port.

  descriptors  1,000 raw TCP connections to the client port that never speak ZMTP: the
               router stays below its descriptor limit by construction (its open fds,
               read from /proc, never reach 256), shuts the oldest silent ones down, and
               keeps serving: derasctl answers on the admin socket, a worker that is
               killed and replaced registers again over ipc, a new client over tcp is
               served during the flood and after it.
  slowloris    2 x 1,000 HTTP connections that send half a request head and stall:
               /live and /metrics answer during and after (each probe's latency printed;
               the bound asserted is 10 s, a hang guard: before this, /live stayed dead
               for 52 s to minutes), the router's memory stays bounded (printed).

Ordering is by construction: each flood is fully opened before the probes run, probes
wait for their answer with a generous timeout, and the descriptor bound is read while the
flood's connections are still open.
"""

import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import (DERASCTL, ROUTER, TINY, WORKER, Client, free_port,  # noqa: E402
                     proc_status, raise_nofile)

ROUTER_NOFILE = 256
FLOOD = 1000


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def http_probe(url, timeout=10):
    """(status, seconds) of one GET on a fresh connection."""
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        r.read()
        return r.status, time.monotonic() - t0


def flood(port, n, payload=b""):
    """n connections to the loopback port, each sending payload; the open sockets."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        socks.append(s)
    if payload:
        deadline = time.monotonic() + 30
        pending = list(socks)
        while pending and time.monotonic() < deadline:
            left = []
            for s in pending:
                try:
                    s.send(payload)
                except (BlockingIOError, InterruptedError):
                    left.append(s)  # not connected yet: try again
                except OSError:
                    pass            # refused or shut down by the router: that is the point
            pending = left
            if pending:
                time.sleep(0.01)
    return socks


class Router:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="deras-hostile-")
        self.env = dict(os.environ, DERAS_RUNTIME_DIR=self.dir)
        self.port, self.http_port = free_port(), free_port()
        self.wep = "ipc://%s/workers.sock" % self.dir
        self.log = open(os.path.join(self.dir, "router.log"), "w+")
        lim = ROUTER_NOFILE
        self.p = subprocess.Popen(
            [ROUTER, "--model", TINY, "--listen", "tcp://127.0.0.1:%d" % self.port,
             "--workers", self.wep, "--metrics-listen", "127.0.0.1:%d" % self.http_port,
             "--heartbeat-ms", "200"],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (lim, lim)))
        self.workers = []
        self.files = [self.log]
        self.url = "http://127.0.0.1:%d" % self.http_port

    def start_worker(self, name):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        self.files.append(log)
        w = subprocess.Popen([WORKER, "--model", TINY, "--router", self.wep, "--name", name,
                              "--threads", "1", "--kv-cache-memory", "16MiB"],
                             env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.workers.append(w)
        return w

    def ctl(self, *args):
        r = subprocess.run([DERASCTL, *args], env=self.env, capture_output=True, text=True,
                           timeout=60)
        return r.returncode, r.stdout + r.stderr

    def wait_ready_worker(self, name, timeout=120):
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            rc, out = self.ctl("status")
            if rc == 0 and any(line.split()[:2] == [name, "ready"] for line in out.splitlines()
                               if line.strip()):
                return
            time.sleep(0.1)
        raise AssertionError("worker %s not ready: %s\n%s" % (name, out, self.text()))

    def text(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-6000:]

    def stop(self):
        for w in self.workers:
            if w.poll() is None:
                w.terminate()
        for w in self.workers:
            try:
                w.wait(30)
            except subprocess.TimeoutExpired:
                w.kill()
        self.p.terminate()
        try:
            code = self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            code = self.p.wait()
        for f in self.files:
            f.close()
        return code


class Floods(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise_nofile(2 * FLOOD + 512)

    def setUp(self):
        self.r = Router()
        self.r.start_worker("w0")
        self.r.wait_ready_worker("w0")
        self.client = Client("tcp://127.0.0.1:%d" % self.r.port, timeout=120)

    def tearDown(self):
        self.client.close()
        text = self.r.text()
        code = self.r.stop()
        shutil.rmtree(self.r.dir, ignore_errors=True)
        self.assertEqual(code, 0, text)

    def test_descriptor_flood_on_the_client_port(self):
        r = self.r
        base = open_fds(r.p.pid)
        socks = flood(r.port, FLOOD)
        try:
            # every connection reached the router's accept queue: wait until the router
            # has seen (and capped) them, then check the bound while they are open
            deadline = time.monotonic() + 60
            while "client connections at the cap" not in r.text():
                self.assertLess(time.monotonic(), deadline, r.text())
                time.sleep(0.05)
            peak = open_fds(r.p.pid)
            self.assertLess(peak, ROUTER_NOFILE, "the router reached its descriptor limit")
            rc, out = r.ctl("status")
            self.assertEqual(rc, 0, out)
            # a worker dies and another takes its place, over ipc, during the flood
            r.workers[0].kill()
            r.workers[0].wait()
            r.start_worker("w1")
            r.wait_ready_worker("w1")
            # a new client over tcp is served during the flood
            res = self.client.complete("during the flood", max_tokens=4, temperature=0,
                                     ignore_eos=True)
            self.assertEqual(len(res.token_ids[0]), 4)
            peak = max(peak, open_fds(r.p.pid))
            self.assertLess(peak, ROUTER_NOFILE)
            self.assertIsNone(r.p.poll(), r.text())
        finally:
            for s in socks:
                s.close()
        res = self.client.complete("after the flood", max_tokens=4, temperature=0,
                                   ignore_eos=True)
        self.assertEqual(len(res.token_ids[0]), 4)
        print("descriptors: %d raw connections against a limit of %d: the router peaked at %d "
              "open descriptors (%d at rest), derasctl answered, a replacement worker "
              "registered, a tcp client was served during and after"
              % (FLOOD, ROUTER_NOFILE, peak, base))

    def test_slowloris_on_the_http_port(self):
        r = self.r
        pid = r.p.pid
        rss0 = proc_status(pid, "VmRSS")
        lat = {"before": [], "during": [], "after": []}
        for path in ("/live", "/metrics"):
            lat["before"].append(http_probe(r.url + path)[1])
        half = b"GET /metrics HTTP/1.1\r\nHost: deras\r\nX-Slow: "
        socks = []
        rss_peak = rss0
        try:
            for wave in range(2):
                socks += flood(r.http_port, FLOOD, half)
                for i in range(4):
                    for path in ("/live", "/metrics", "/health"):
                        status, dt = http_probe(r.url + path)
                        self.assertEqual(status, 200, path)
                        lat["during"].append(dt)
                rss_peak = max(rss_peak, proc_status(pid, "VmRSS"))
                self.assertLess(open_fds(pid), ROUTER_NOFILE)
        finally:
            for s in socks:
                s.close()
        for i in range(4):
            for path in ("/live", "/metrics"):
                status, dt = http_probe(r.url + path)
                self.assertEqual(status, 200)
                lat["after"].append(dt)
        rss1 = proc_status(pid, "VmRSS")
        self.assertLess(rss_peak - rss0, 64 * 1024, "router memory grew by more than 64 MiB")
        self.assertIsNone(r.p.poll(), r.text())
        print("slowloris: 2 x %d half-open HTTP requests; probe latency max %.3f s before, "
              "%.3f s during (%d probes), %.3f s after; router RSS %d KiB before, %d KiB peak, "
              "%d KiB after" % (FLOOD, max(lat["before"]), max(lat["during"]),
                                len(lat["during"]), max(lat["after"]), rss0, rss_peak, rss1))


if __name__ == "__main__":
    unittest.main(verbosity=2)
