# SPDX-License-Identifier: Apache-2.0
"""test_systemd.py - the units in systemd/ without root and without systemd running them.

Verify: `systemd-analyze verify` accepts deras-router.service, an instance of
deras-worker@.service and deras.target, printing nothing (it only warns about unknown keys
or bad values, so any output fails the test). ExecStart must name an executable file, so
the units are checked in a copy whose /usr/local/bin paths point into the build tree.
Without systemd-analyze the test reports SKIP (exit 77), never a pass.

Notify: the router and worker 0 are started from the units' own ExecStart lines, expanded
as systemd does (the units' Environment=, then the EnvironmentFile - the shipped
systemd/deras.env with the model, the runtime directory and the device rewritten for this
machine - specifiers %i, ${VAR} as one word, $VAR split into words). Each process gets its
own fake NOTIFY_SOCKET (an AF_UNIX datagram socket, as systemd's) and WATCHDOG_USEC: the
router must say READY=1 (its sockets bound), the worker READY=1 once registered, both
WATCHDOG=1 at about half of WATCHDOG_USEC, and STOPPING=1 at SIGTERM, then exit 0 and
leave no socket file.

    DERAS_BUILD_DIR=build python3 tests/integration/test_systemd.py [Verify|Notify]
"""

import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

from cluster import ROOT, ROUTER, TINY, WORKER, Client

UNITS = os.path.join(ROOT, "systemd")
INSTALLED = {"/usr/local/bin/deras-router": ROUTER, "/usr/local/bin/deras-worker": WORKER}


def read_unit(path):
    """{section: [(key, value), ...]} of a unit file (continuation lines joined)."""
    out, section, pending = {}, None, ""
    with open(path) as f:
        for raw in f:
            line = pending + raw.rstrip("\n")
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            if s.startswith("["):
                section = s.strip("[]")
                out.setdefault(section, [])
                continue
            k, _, v = s.partition("=")
            out[section].append((k.strip(), v.strip()))
    return out


def specifiers(text, instance):
    """The unit specifiers the deras units use: %i, %I (the instance) and %%."""
    def one(m):
        c = m.group(1)
        if c in "iI":
            return instance
        if c == "%":
            return "%"
        raise ValueError("specifier %%%s is not handled by this test" % c)
    return re.sub(r"%(.)", one, text)


def read_env_file(path):
    """VAR=value lines as systemd reads an EnvironmentFile (comments: # or ; first)."""
    env = {}
    with open(path) as f:
        for raw in f:
            s = raw.strip()
            if not s or s[0] in "#;":
                continue
            k, _, v = s.partition("=")
            v = v.strip()
            if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
                v = v[1:-1]
            env[k.strip()] = v
    return env


def expand_exec(line, env):
    """ExecStart words: ${VAR} is one word (its exact value), a word that is exactly $VAR
    becomes its value split on whitespace (zero or more words)."""
    words = []
    for w in shlex.split(line):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", w)
        if m:
            words.extend(env.get(m.group(1), "").split())
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                                lambda m: env.get(m.group(1), ""), w))
    return words


def unit_command(unit, instance, env_file):
    """(argv, environment) of a unit's ExecStart as systemd would run it, its
    EnvironmentFile= replaced by env_file and /usr/local/bin by the build tree."""
    service = read_unit(os.path.join(UNITS, unit))["Service"]
    env, exec_start, files = {}, None, []
    for k, v in service:
        v = specifiers(v, instance)
        if k == "Environment":
            for assignment in shlex.split(v):
                name, _, value = assignment.partition("=")
                env[name] = value
        elif k == "EnvironmentFile":
            files.append(v)
        elif k == "ExecStart":
            exec_start = v
    assert files == ["/etc/deras/deras.env"], files
    env.update(read_env_file(env_file))  # the file overrides Environment=
    argv = expand_exec(exec_start, env)
    argv[0] = INSTALLED[argv[0]]
    return argv, env


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; SCM_TIMESTAMPNS is the same


class FakeSystemd:
    """A NOTIFY_SOCKET: every datagram received, with its arrival time - the kernel's
    (SO_TIMESTAMPNS, wall clock: time.time()), so the gaps between pings are the sender's,
    not how late this process, on a loaded machine, got around to reading them."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.bind(path)
        self.sock.settimeout(0.05)
        self.msgs = []  # (arrival time, {key: value})

    def poll(self, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(16))
            except socket.timeout:
                continue
            t = time.time()
            for level, kind, blob in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(blob) >= 16:
                    sec, nsec = struct.unpack("qq", blob[:16])
                    t = sec + nsec * 1e-9
            fields = dict(line.partition("=")[::2] for line in data.decode().split("\n") if line)
            self.msgs.append((t, fields))

    def wait_for(self, key, value, timeout):
        """Poll until a message with key=value arrived; that message's time."""
        end = time.monotonic() + timeout
        while True:
            for t, m in self.msgs:
                if m.get(key) == value:
                    return t, m
            if time.monotonic() > end:
                raise AssertionError("no %s=%s on %s within %.0f s; got %r"
                                     % (key, value, self.path, timeout, self.msgs))
            self.poll(0.05)

    def count(self, key, value, since=0.0):
        return [t for t, m in self.msgs if m.get(key) == value and t >= since]

    def close(self):
        self.sock.close()


class Verify(unittest.TestCase):
    def test_units_pass_systemd_analyze_verify(self):
        d = tempfile.mkdtemp(prefix="deras-units-")
        try:
            for name in ("deras-router.service", "deras-worker@.service", "deras.target"):
                with open(os.path.join(UNITS, name)) as f:
                    text = f.read()
                for installed, built in INSTALLED.items():
                    text = text.replace(installed, built)
                with open(os.path.join(d, name), "w") as f:
                    f.write(text)
            r = subprocess.run(["systemd-analyze", "verify", "deras-router.service",
                                "deras-worker@0.service", "deras.target"], cwd=d,
                               capture_output=True, text=True, timeout=60)
            out = (r.stdout + r.stderr).strip()
            self.assertEqual((r.returncode, out), (0, ""), "systemd-analyze verify")
            print("systemd-analyze verify: deras-router.service, deras-worker@0.service, "
                  "deras.target: no error, no warning")
        finally:
            shutil.rmtree(d, ignore_errors=True)


class Notify(unittest.TestCase):
    def test_router_and_worker_from_the_units_notify_ready_watchdog_and_stopping(self):
        d = tempfile.mkdtemp(prefix="deras-units-")
        procs, logs, fakes = [], [], []
        try:
            # the shipped EnvironmentFile with this machine's paths
            with open(os.path.join(UNITS, "deras.env")) as f:
                text = f.read()
            text = re.sub(r"(?m)^DERAS_MODEL=.*$", "DERAS_MODEL=" + TINY, text)
            text = re.sub(r"(?m)^DERAS_LISTEN=.*$", "DERAS_LISTEN=ipc://%s/clients.sock" % d, text)
            text = text.replace("/run/deras", d)
            text = re.sub(r"(?m)^DERAS_WORKER_DEVICE=.*$", "DERAS_WORKER_DEVICE=cpu", text)
            text = re.sub(r"(?m)^DERAS_WORKER_ARGS=.*$",
                          "DERAS_WORKER_ARGS=--threads 1 --kv-cache-memory 64MiB", text)
            env_file = os.path.join(d, "deras.env")
            with open(env_file, "w") as f:
                f.write(text)
            cmds = [unit_command("deras-router.service", "", env_file),
                    unit_command("deras-worker@.service", "0", env_file)]
            self.assertEqual(cmds[1][1]["CUDA_VISIBLE_DEVICES"], "0")
            self.assertIn("gpu0", cmds[1][0])
            self.assertEqual(cmds[1][0][cmds[1][0].index("--device") + 1], "cpu")
            # 4 s: pings every 2 s leave 2 s for a ping the scheduler makes late, however
            # loaded the machine (a sanitizer build on two shared cores)
            wd_usec = 4000000
            for name, (argv, unit_env) in zip(("router", "worker"), cmds):
                fake = FakeSystemd(os.path.join(d, name + ".notify"))
                fakes.append(fake)
                env = dict(os.environ)
                for k in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
                    env.pop(k, None)
                env.update(unit_env)
                env.update(NOTIFY_SOCKET=fake.path, WATCHDOG_USEC=str(wd_usec))
                log = open(os.path.join(d, name + ".log"), "w+")
                logs.append(log)
                procs.append(subprocess.Popen(argv, env=env, stdout=log,
                                              stderr=subprocess.STDOUT))
                if name == "router":  # Type=notify: the worker starts after READY
                    t_ready, m = fake.wait_for("READY", "1", 30)
                    router_status = m.get("STATUS", "")
                    self.assertIn("listening for clients on ipc://%s/clients.sock" % d,
                                  router_status)
            t_wready, m = fakes[1].wait_for("READY", "1", 60)
            worker_status = m.get("STATUS", "")
            self.assertIn("registered with the router", worker_status)
            # both ping the watchdog at about half of WATCHDOG_USEC: the next 4 pings of each
            # (by their arrival times; waiting for them is only bounded against a hang)
            for fake in fakes:
                fake.poll(0.1)
            t0 = time.time()
            deadline = time.monotonic() + 60
            while any(len(fake.count("WATCHDOG", "1", since=t0)) < 4 for fake in fakes):
                self.assertLess(time.monotonic(), deadline, "WATCHDOG=1 pings stopped")
                for fake in fakes:
                    fake.poll(0.05)
            pings = [fake.count("WATCHDOG", "1", since=t0)[:4] for fake in fakes]
            for name, p in zip(("router", "worker"), pings):
                gaps = [b - a for a, b in zip(p, p[1:])]
                # every gap within WATCHDOG_USEC (4 s: what systemd enforces, 2 s of room
                # for a ping the scheduler made late), and about half of it on average (the
                # sender's period: a ping at the full WATCHDOG_USEC would average 4 s)
                self.assertLess(max(gaps), wd_usec / 1e6, "%s: gaps between pings %r"
                                % (name, gaps))
                self.assertLess(sum(gaps) / len(gaps), 0.75 * wd_usec / 1e6,
                                "%s: gaps between pings %r" % (name, gaps))
            # the units' processes serve
            cl = Client("ipc://%s/clients.sock" % d, timeout=30)
            r = cl.complete("hello", max_tokens=5, temperature=0)
            cl.close()
            self.assertEqual(len(r.token_ids[0]), 5)
            # systemctl stop: SIGTERM, STOPPING=1, exit 0, no socket file left
            for p in reversed(procs):
                p.send_signal(signal.SIGTERM)
            codes = [p.wait(30) for p in procs]
            for fake in fakes:
                fake.poll(0.1)
                fake.wait_for("STOPPING", "1", 5)
            self.assertEqual(codes, [0, 0])
            left = [n for n in os.listdir(d) if n.endswith(".sock")]
            self.assertEqual(left, [], "socket files left behind")
            print("units' ExecStart with deras.env: router READY=1 (\"%s\"), worker READY=1 "
                  "(\"%s\", %.2f s later), WATCHDOG=1 every %.2f s (router) and %.2f s "
                  "(worker) with WATCHDOG_USEC=%d, a request served, STOPPING=1 at SIGTERM, "
                  "exit 0 0, no socket file left"
                  % (router_status, worker_status, t_wready - t_ready,
                     (pings[0][-1] - pings[0][0]) / (len(pings[0]) - 1),
                     (pings[1][-1] - pings[1][0]) / (len(pings[1]) - 1), wd_usec))
        except BaseException:
            for log in logs:
                log.flush()
                log.seek(0)
                print("---- %s\n%s" % (os.path.basename(log.name), log.read()[-3000:]))
            raise
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for f in fakes + logs:
                f.close()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    wanted = [a for a in sys.argv[1:] if not a.startswith("-")]
    if (not wanted or any(w.startswith("Verify") for w in wanted)) and \
            not shutil.which("systemd-analyze"):
        print("SKIPPED: systemd-analyze not found (install systemd to verify the units)")
        sys.exit(77)
    unittest.main(verbosity=2)
