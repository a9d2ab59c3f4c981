# SPDX-License-Identifier: Apache-2.0
"""cluster.py - deras-router and deras-workers as real processes, for the integration tests.

Imported by test_serving.py and test_failures.py. Importing it checks what every such test
needs and exits 77 (ctest: skipped, with the reason printed) when python3-zmq,
python3-msgpack or the built binaries are missing.

A Cluster is one router and n workers (w0, w1, ...) on ipc:// sockets in a private
temporary directory ($DERAS_RUNTIME_DIR points there too), each process logging to its own
file there. Processes can be killed, signalled and started again under the same name, and
the router restarted on the same endpoints, so failure tests drive the real binaries.

    DERAS_BUILD_DIR=build python3 tests/integration/test_serving.py
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "clients", "python"))

try:
    import msgpack  # noqa: F401
    import zmq  # noqa: F401
except ImportError as e:
    print("SKIPPED: %s (install python3-zmq and python3-msgpack)" % e)
    sys.exit(77)

from deras_client import Chunk, Client, DerasError  # noqa: E402

BUILD = os.environ.get("DERAS_BUILD_DIR", os.path.join(ROOT, "build"))
# deras-worker's test-only knob (docs/worker.md): every serving step sleeps this many ms more,
# so a test can make a request outlast whatever it does to it, on any machine
STEP_DELAY = "DERAS_TEST_STEP_DELAY_MS"
ROUTER = os.path.join(BUILD, "router", "deras-router")
WORKER = os.path.join(BUILD, "worker", "deras-worker")
DERAS = os.path.join(BUILD, "tools", "deras")
DERASCTL = os.path.join(BUILD, "tools", "derasctl")
FAKE_WORKER = os.path.join(HERE, "fake_worker.py")
DATA = os.environ.get("DERAS_TEST_DATA", os.path.join(ROOT, "tests", "data"))
TINY = os.path.join(DATA, "tiny-chat")
VOCAB = 1005

for exe in (ROUTER, WORKER, DERAS, DERASCTL):
    if not os.access(exe, os.X_OK):
        print("SKIPPED: %s not built" % exe)
        sys.exit(77)


def proc_status(pid, key):
    """A /proc/<pid>/status field in kB (VmRSS, VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def free_port():
    """A loopback TCP port free at the time of the call."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_nofile(need):
    """Raise this process's descriptor limit to need, or exit 77 (skipped) when the hard
    limit is lower."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        print("SKIPPED: this test needs %d descriptors; the hard limit is %d" % (need, hard))
        sys.exit(77)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


class Serve:
    """`deras serve` as a user runs it: a router and its CPU worker on free loopback ports
    (address: the client port; url: HTTP), the admin socket and the runtime directory in a
    private directory, one thread for the worker; ready (/health 200) when constructed."""

    def __init__(self, model=TINY, args=(), env=None, timeout=120):
        import urllib.request
        self.dir = tempfile.mkdtemp(prefix="deras-serve-")
        port, http = free_port(), free_port()
        self.address, self.url = "tcp://127.0.0.1:%d" % port, "http://127.0.0.1:%d" % http
        self.log = open(os.path.join(self.dir, "serve.log"), "w+")
        self.proc = subprocess.Popen(
            [DERAS, "serve", "--model", model, "--listen", self.address, "--admin",
             "ipc://%s/admin.sock" % self.dir, "--metrics-listen", "127.0.0.1:%d" % http,
             "--threads", "1", "--kv-cache-memory", "64MiB", *args],
            env=dict(os.environ, DERAS_RUNTIME_DIR=self.dir, **(env or {})), stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = self.log_text()
                self.stop()
                raise AssertionError("deras serve never became ready:\n" + text)
            time.sleep(0.1)

    def log_text(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-4000:]

    def stop(self):
        """Ctrl-C (SIGINT), as at a terminal; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return code


def collect_stream(client, prompt, **params):
    """Text and token ids of a streamed single-sample request; asserts one final."""
    text, ids, finals = [], [], []
    for ev in client.stream(prompt, **params):
        if isinstance(ev, Chunk):
            text.append(ev.text)
            ids.extend(ev.token_ids)
        else:
            finals.append(ev)
    assert len(finals) == 1, finals
    return "".join(text), ids, finals[0].finish_reason


class ProcessSet:
    """Processes started in a private directory (self.dir) with their logs (self.logs) and
    a client (self.client). A subclass lists its processes, workers first, in processes()."""

    log_tail = 4000  # bytes of each log that log_text() shows

    def processes(self):
        raise NotImplementedError

    def log_text(self):
        out = []
        for f in self.logs:
            f.flush()
            f.seek(0)
            out.append("---- %s\n%s" % (os.path.basename(f.name), f.read()[-self.log_tail:]))
        return "\n".join(out)

    def stop(self):
        """SIGTERM to every process still running; their exit codes, workers first."""
        self.client.close()
        procs = self.processes()
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = []
        for p in procs:
            try:
                codes.append(p.wait(30))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        for f in self.logs:
            f.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return codes


class Cluster(ProcessSet):
    """A router and n workers on ipc sockets in a private directory (the admin socket too:
    its default follows DERAS_RUNTIME_DIR), HTTP metrics on a free loopback port."""

    def __init__(self, model=TINY, n_workers=2, router_args=(), worker_args=(),
                 kv="64MiB", client_args=None, worker_env=None):
        self.dir = tempfile.mkdtemp(prefix="deras-serving-")
        self.address = "ipc://%s/clients.sock" % self.dir
        self.wep = "ipc://%s/workers.sock" % self.dir
        self.admin = "ipc://%s/admin.sock" % self.dir
        self.metrics_url = "http://127.0.0.1:%d" % free_port()
        self.env = dict(os.environ, DERAS_RUNTIME_DIR=self.dir)
        self.model, self.kv = model, kv
        self.router_args, self.worker_args = tuple(router_args), tuple(worker_args)
        # extra environment of the workers: one dict for all, or a list, one per worker
        self.worker_env = worker_env or {}
        self.logs = []
        self.n_starts = {}
        self.router = self.start_router()
        self.workers = [self.start_worker(i) for i in range(n_workers)]
        self.client = Client(self.address, timeout=60, **(client_args or {}))
        self.wait_ready(n_workers)

    def _spawn(self, argv, name, env=None):
        k = self.n_starts[name] = self.n_starts.get(name, 0) + 1
        log = "%s.log" % name if k == 1 else "%s.%d.log" % (name, k)
        f = open(os.path.join(self.dir, log), "w+")
        self.logs.append(f)
        return subprocess.Popen(argv, env=dict(self.env, **(env or {})), stdout=f,
                                stderr=subprocess.STDOUT)

    def start_router(self):
        """Start a router on the cluster's endpoints (also after the previous one ended)."""
        return self._spawn([ROUTER, "--model", self.model, "--listen", self.address,
                            "--workers", self.wep, "--metrics-listen",
                            self.metrics_url[len("http://"):], *self.router_args], "router")

    def start_worker(self, i, env=None):
        """Start worker w<i> (again, after it ended: the same name); env: its environment
        beyond the cluster's (default: the cluster's worker_env)."""
        if env is None:
            env = self.worker_env[i] if isinstance(self.worker_env, list) else self.worker_env
        return self._spawn([WORKER, "--model", self.model, "--router", self.wep, "--name",
                            "w%d" % i, "--threads", "1", "--kv-cache-memory", self.kv,
                            *self.worker_args], "w%d" % i, env)

    def add_worker(self, name, args=(), fake=False, env=None):
        """Start one more worker: deras-worker, or fake_worker.py (no model)."""
        if fake:
            argv = [sys.executable, FAKE_WORKER, "--router", self.wep, "--name", name,
                    "--model", os.path.basename(self.model.rstrip("/")), *args]
        else:
            argv = [WORKER, "--model", self.model, "--router", self.wep, "--name", name,
                    "--threads", "1", "--kv-cache-memory", self.kv, *args]
        p = self._spawn(argv, name, env)
        self.workers.append(p)
        return p

    def ctl(self, *args, timeout=120):
        """Run derasctl against this router: (exit status, stdout, stderr)."""
        r = subprocess.run([DERASCTL, *args], env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        return r.returncode, r.stdout, r.stderr

    def processes(self):
        return self.workers + [self.router]

    def router_log(self):
        """Everything the routers of this cluster logged so far."""
        out = []
        for f in self.logs:
            if os.path.basename(f.name).startswith("router"):
                f.flush()
                with open(f.name) as g:
                    out.append(g.read())
        return "".join(out)

    def pong(self):
        return self.client.ping(timeout=30)["workers"]  # 30 s: a hang guard

    def states(self):
        """{worker name: state} from the router's pong."""
        return {w["name"]: w["state"] for w in self.pong()}

    def wait_states(self, want, timeout=60):
        """Seconds until the pong shows every worker of `want` ({name: state}) so."""
        t0 = time.monotonic()
        got = None
        while time.monotonic() - t0 < timeout:
            try:
                got = self.states()
                if all(got.get(k) == v for k, v in want.items()):
                    return time.monotonic() - t0
            except DerasError:
                pass
            time.sleep(0.02)
        raise AssertionError("waited %.0f s for worker states %r, last pong %r\n%s"
                             % (timeout, want, got, self.log_text()))

    def wait_ready(self, n, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if sum(w["state"] == "ready" for w in self.pong()) >= n:
                    return
            except DerasError:
                pass
            if self.router.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError("cluster not ready:\n" + self.log_text())

    def alive(self):
        return self.router.poll() is None and all(w.poll() is None for w in self.workers)

    def log_of(self, name):
        """Everything process `name` logged so far (all its starts)."""
        out = []
        for f in self.logs:
            base = os.path.basename(f.name)
            if base == name + ".log" or (base.startswith(name + ".") and
                                         base[len(name) + 1:-len(".log")].isdigit()):
                f.flush()
                with open(f.name) as g:
                    out.append(g.read())
        return "".join(out)

    def dead_silence_ms(self, name):
        """How long the router had heard nothing from worker `name` when it declared it
        dead, by the router's own clock (its log), or None. A bound on this excludes the
        test's own polling, which a loaded machine can delay."""
        m = re.search(r"worker %s \(pid \d+\) is dead: no message for (\d+) ms"
                      % re.escape(name), self.router_log())
        return int(m.group(1)) if m else None

    def wait_log(self, name, text, timeout=60):
        """Wait until process `name` logged `text` (an event the test must see happen
        before its next step, instead of sleeping and hoping it did)."""
        deadline = time.monotonic() + timeout
        while text not in self.log_of(name):
            if time.monotonic() > deadline:
                raise AssertionError("waited %.0f s for %r in %s's log\n%s"
                                     % (timeout, text, name, self.log_text()))
            time.sleep(0.02)

    def wait_kv_baseline(self, timeout=60):
        """Seconds until every worker reports nothing running and every KV block free."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            ws = self.pong()
            if all(w["running"] == 0 and w["waiting"] == 0 and
                   w["kv_blocks_free"] == w["kv_blocks_total"] for w in ws):
                return time.monotonic() - t0
            time.sleep(0.05)
        raise AssertionError("KV usage did not return to baseline: %r" % (self.pong(),))

