#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_worker_curve - the worker link across hosts, with CURVE (issue 14, item 7).

A worker in a network namespace of its own (made here, with a veth pair and addresses of
its own: another host, as far as the network is concerned) joins a router over tcp with
CURVE and serves; the router binds its worker socket beyond loopback without
--allow-insecure-bind, which it refuses without CURVE. A worker with a key the router does
not list, and one without CURVE at all, are refused at their handshake: each gives up after
its handshake timeout (exit 1) and never shows in the router's status.

Needs root (network namespaces) and iproute2; elsewhere it is skipped (exit 77).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import DERASCTL, ROUTER, TINY, WORKER, Client, free_port  # noqa: E402
import zmq  # noqa: E402  (after cluster, which skips (exit 77) where it is missing)

IP = shutil.which("ip") or "/usr/sbin/ip"
if os.geteuid() != 0 or not os.access(IP, os.X_OK):
    print("SKIPPED: needs root and iproute2 to make a network namespace")
    sys.exit(77)

NS = "deras-t%d" % os.getpid()
HOST_IF, NS_IF = "dh%d" % (os.getpid() % 100000), "dn%d" % (os.getpid() % 100000)
NET = 10 + os.getpid() % 200
HOST_ADDR, NS_ADDR = "10.231.%d.1" % NET, "10.231.%d.2" % NET


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def make_namespace():
    sh(IP, "netns", "add", NS)
    sh(IP, "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
    sh(IP, "link", "set", NS_IF, "netns", NS)
    sh(IP, "addr", "add", HOST_ADDR + "/24", "dev", HOST_IF)
    sh(IP, "link", "set", HOST_IF, "up")
    sh(IP, "netns", "exec", NS, IP, "addr", "add", NS_ADDR + "/24", "dev", NS_IF)
    sh(IP, "netns", "exec", NS, IP, "link", "set", NS_IF, "up")
    sh(IP, "netns", "exec", NS, IP, "link", "set", "lo", "up")


def remove_namespace():
    subprocess.run([IP, "link", "del", HOST_IF], capture_output=True, timeout=30)
    subprocess.run([IP, "netns", "del", NS], capture_output=True, timeout=30)


class WorkerCurve(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="deras-wcurve-")
        self.env = dict(os.environ, DERAS_RUNTIME_DIR=self.dir)
        for k in ("DERAS_WORKER_CURVE_SERVER_KEY", "DERAS_WORKER_CURVE_CLIENT_KEY"):
            self.env.pop(k, None)
        self.procs, self.files = [], []
        remove_namespace()
        make_namespace()

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for f in self.files:
            f.close()
        remove_namespace()
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        return path

    def spawn(self, argv, name, netns=False):
        log = open(os.path.join(self.dir, name + ".log"), "w+")
        self.files.append(log)
        if netns:
            argv = [IP, "netns", "exec", NS] + argv
        p = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p, log

    def text(self, log):
        log.flush()
        log.seek(0)
        return log.read()[-4000:]

    def status(self):
        r = subprocess.run([DERASCTL, "status"], env=self.env, capture_output=True, text=True,
                           timeout=60)
        return r.stdout

    def test_a_worker_on_another_network_joins_over_curve_and_others_are_refused(self):
        server_pub, server_sec = zmq.curve_keypair()
        good_pub, good_sec = zmq.curve_keypair()
        _, bad_sec = zmq.curve_keypair()
        port = free_port()
        wep = "tcp://%s:%d" % (HOST_ADDR, port)
        clients = "ipc://%s/clients.sock" % self.dir
        base = [ROUTER, "--model", TINY, "--listen", clients, "--workers", wep,
                "--metrics-listen", "none"]
        # beyond loopback without CURVE: refused (exit 2), naming the way out
        r = subprocess.run(base, env=self.env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("without CURVE", r.stderr)
        router, rlog = self.spawn(
            base + ["--curve-secret-key", self.write("server.key", server_sec.decode() + "\n"),
                    "--worker-curve-allow", self.write("workers.txt", good_pub.decode() + "\n")],
            "router")
        worker = [WORKER, "--model", TINY, "--router", wep, "--threads", "1",
                  "--kv-cache-memory", "16MiB", "--handshake-timeout", "3"]
        good, glog = self.spawn(worker + [
            "--name", "far", "--curve-server-key", server_pub.decode(),
            "--curve-client-key", self.write("good.key", good_sec.decode() + "\n")],
            "far", netns=True)
        client = Client(clients, timeout=120)
        try:
            deadline = time.monotonic() + 120
            while not any(w["name"] == "far" and w["state"] == "ready"
                          for w in client.ping(timeout=30)["workers"]):
                self.assertLess(time.monotonic(), deadline,
                                "far never ready:\n%s\n%s" % (self.text(rlog), self.text(glog)))
                self.assertIsNone(good.poll(), self.text(glog))
                time.sleep(0.1)
            res = client.complete("across the network", max_tokens=6, temperature=0,
                                  ignore_eos=True)
            self.assertEqual(len(res.token_ids[0]), 6)
            # a key the router does not list, and no CURVE at all: refused at the handshake
            bad, blog = self.spawn(worker + [
                "--name", "intruder", "--curve-server-key", server_pub.decode(),
                "--curve-client-key", self.write("bad.key", bad_sec.decode() + "\n")],
                "intruder", netns=True)
            plain, plog = self.spawn(worker + ["--name", "plain"], "plain", netns=True)
            self.assertEqual(bad.wait(120), 1, self.text(blog))
            self.assertEqual(plain.wait(120), 1, self.text(plog))
            self.assertIn("is deras-router running", self.text(blog))
            names = [w["name"] for w in client.ping(timeout=30)["workers"]]
            self.assertEqual(names, ["far"])
            self.assertIn("far", self.status())
            res = client.complete("still served", max_tokens=4, temperature=0,
                                  ignore_eos=True)
            self.assertEqual(len(res.token_ids[0]), 4)
        finally:
            client.close()
        router.terminate()
        self.assertEqual(router.wait(60), 0, self.text(rlog))
        print("worker link: a worker in network namespace %s (%s) joined the router at %s over "
              "CURVE without --allow-insecure-bind and served; a worker with an unlisted key "
              "and one without CURVE were refused (exit 1); plain tcp beyond loopback refused "
              "at start" % (NS, NS_ADDR, wep))


if __name__ == "__main__":
    unittest.main(verbosity=2)
