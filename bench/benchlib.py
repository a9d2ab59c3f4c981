# SPDX-License-Identifier: Apache-2.0
"""benchlib.py - what the Python benchmark drivers in bench/ share: a free TCP port, waiting
for a server's /health, stopping a server, and the machine's description for the records.

Standard library only (the drivers run with the system interpreter). Scripts in bench/
import it directly; bench/llamacpp/ puts bench/ on sys.path first.
"""
import os
import platform
import re
import signal
import socket
import subprocess
import time
import urllib.request

# CPU features worth recording next to a CPU benchmark (what the kernels dispatch on).
FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
         "avx512_bf16", "avx_vnni", "amx_int8")


def free_port():
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url, proc, timeout=300, what="server"):
    """Poll url + /health until it answers 200; RuntimeError when proc exits first or the
    timeout passes (a benchmark has nothing to measure then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %d" % (what, proc.returncode))
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("%s not healthy after %d s" % (what, timeout))


def stop(proc, sig=signal.SIGTERM, timeout=60):
    """Ask proc to end (sig), then kill it after timeout seconds."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def machine():
    """{"cpu": model name, "flags": the FLAGS this CPU has, "cores": n} from /proc/cpuinfo."""
    info = {"cpu": platform.processor() or "unknown", "flags": "", "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            txt = f.read()
        info["cpu"] = re.search(r"model name\s*:\s*(.*)", txt).group(1)
        flags = re.search(r"flags\s*:\s*(.*)", txt).group(1).split()
        info["flags"] = " ".join(f for f in FLAGS if f in flags)
    except (OSError, AttributeError):
        pass
    return info
