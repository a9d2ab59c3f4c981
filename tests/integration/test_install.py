#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_install - `cmake --install` into a temporary prefix, then everything from there
(issue 16).

The installed deras-router and deras-worker serve the tiny model on their default sockets
(in a private $DERAS_RUNTIME_DIR); the installed derasctl finds the admin socket without
--admin; a C program built against the installed header and library (pkg-config
deras-client) and the installed Python package (P/lib/python3/dist-packages) each complete
a request; `deras --version` runs from P/bin. Nothing from the build tree is on any path.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import BUILD, TINY  # noqa: E402

C_PROGRAM = r'''
#include <stdio.h>
#include <string.h>
#include <deras_client.h>

int main(int argc, char **argv)
{
    deras_client_t *c;
    if (deras_client_new(&(deras_client_opts){.address = argv[1]}, &c)) {
        fprintf(stderr, "client: %s\n", deras_errmsg());
        return 1;
    }
    proto_request r;
    deras_client_request_init(&r);
    r.prompt = "installed";
    r.prompt_len = strlen(r.prompt);
    r.params.max_tokens = 5;
    r.params.sp.temperature = 0;
    r.params.ignore_eos = true; /* 5 tokens on any CPU, whatever its greedy choices */
    if (deras_client_send(c, &r, NULL)) {
        fprintf(stderr, "send: %s\n", deras_errmsg());
        return 1;
    }
    deras_event ev;
    int rc;
    while ((rc = deras_client_recv(c, 60000, &ev)) == 0) {
        if (ev.msg.type == PROTO_ERROR) {
            fprintf(stderr, "error %s\n", proto_error_name(ev.msg.code));
            return 1;
        }
        if (ev.msg.type == PROTO_FINAL) {
            printf("%d tokens, %s\n", ev.msg.n_token_ids, finish_reason_name(ev.msg.finish));
            break;
        }
    }
    deras_client_destroy(&c);
    return rc;
}
'''


class Install(unittest.TestCase):
    def test_everything_runs_from_an_installed_prefix(self):
        d = tempfile.mkdtemp(prefix="deras-install-")
        prefix, run = os.path.join(d, "prefix"), os.path.join(d, "run")
        os.mkdir(run, 0o700)
        procs, logs = [], []
        try:
            r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            bindir = os.path.join(prefix, "bin")
            for exe in ("deras", "deras-router", "deras-worker", "derasctl"):
                self.assertTrue(os.access(os.path.join(bindir, exe), os.X_OK), exe)
            env = dict(os.environ, DERAS_RUNTIME_DIR=run,
                       PATH=bindir + os.pathsep + "/usr/bin:/bin",
                       PYTHONPATH=os.path.join(prefix, "lib", "python3", "dist-packages"),
                       PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"),
                       LD_LIBRARY_PATH=os.path.join(prefix, "lib"))
            for k in ("DERAS_ADMIN", "DERAS_BUILD_DIR"):
                env.pop(k, None)
            v = subprocess.run(["deras", "--version"], env=env, capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(v.returncode, 0, v.stderr)
            clients = "ipc://%s/clients.sock" % run

            def spawn(argv, name):
                f = open(os.path.join(d, name + ".log"), "w+")
                logs.append(f)
                p = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT)
                procs.append(p)
                return p

            spawn(["deras-router", "--model", TINY, "--listen", clients, "--metrics-listen",
                   "none"], "router")
            spawn(["deras-worker", "--model", TINY, "--threads", "1", "--kv-cache-memory",
                   "16MiB"], "worker")
            deadline = time.monotonic() + 120
            while True:  # derasctl, default admin socket: ready once the worker warmed up
                h = subprocess.run(["derasctl", "health"], env=env, capture_output=True,
                                   text=True, timeout=60)
                if h.returncode == 0:
                    break
                self.assertLess(time.monotonic(), deadline, h.stdout + h.stderr)
                time.sleep(0.2)
            st = subprocess.run(["derasctl", "status"], env=env, capture_output=True, text=True,
                                timeout=60)
            self.assertEqual(st.returncode, 0, st.stderr)
            self.assertIn("ready", st.stdout)
            # the C client, built against the installed header and library only
            src = os.path.join(d, "c_client.c")
            with open(src, "w") as f:
                f.write(C_PROGRAM)
            flags = subprocess.run(["pkg-config", "--cflags", "--libs", "deras-client"],
                                   env=env, capture_output=True, text=True, timeout=30)
            self.assertEqual(flags.returncode, 0, flags.stderr)
            exe = os.path.join(d, "c_client")
            cc = subprocess.run(["cc", "-std=c11", "-o", exe, src] + flags.stdout.split(),
                                env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(cc.returncode, 0, cc.stderr)
            out = subprocess.run([exe, clients], env=env, capture_output=True, text=True,
                                 timeout=120)
            self.assertEqual((out.returncode, out.stdout.strip()), (0, "5 tokens, length"),
                             out.stderr)
            # the Python client, from the installed package
            py = subprocess.run(
                [sys.executable, "-c",
                 "import deras_client, sys; c = deras_client.Client(sys.argv[1], timeout=60);"
                 "r = c.complete('installed', max_tokens=5, temperature=0, ignore_eos=True);"
                 "print(deras_client.__file__); print(len(r.token_ids[0]))", clients],
                env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(py.returncode, 0, py.stderr)
            where, n = py.stdout.split()
            self.assertTrue(where.startswith(prefix), where)
            self.assertEqual(n, "5")
            print("install: %s; router, worker, derasctl (default admin socket), the C client "
                  "(pkg-config deras-client) and the Python client all ran from the prefix"
                  % ", ".join(sorted(os.listdir(prefix))))
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
            for f in logs:
                f.close()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
