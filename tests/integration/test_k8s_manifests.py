#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_k8s_manifests - k8s/ against what deras serves (issue 13, scope 4).

The manifests were never applied to a cluster (docs/operations.md says so); this checks what
can be checked here:

  parse      every document of every k8s/*.yaml parses (python3-yaml), has apiVersion,
             kind and a name, and is one of the kinds the section describes
  wiring     the pool selects the Deployment's pods, targets the container's port, names
             the picker; the objective and the route name the pool; the Service and the
             probes name a port the container declares; the port is the one
             --metrics-listen binds; the picker's configuration (the ConfigMap's nested
             YAML) reads an engine it defines
  serving    the Deployment's own command runs here (the model, the key file and the port
             swapped for the tiny model, a temporary file and a free port; the
             environment as the manifest sets it): every flag is accepted; the readiness
             path answers 200 once a worker is ready and the liveness path 200, both
             without a key; /metrics (no key either: the picker scrapes it) has every
             metric the picker's configuration reads, typed gauge, labelled with the
             served model's name, the KV fraction within 0..1 and the cache info's labels
             numbers; /v1/models with the key names the model by its directory's name
             (what the gateway's clients put in "model"), without it is 401; a
             completion through the port works; SIGTERM (what the kubelet sends) stops it
             with status 0 within the pod's terminationGracePeriodSeconds.

Exit 77 (skipped) without python3-yaml or prometheus_client.
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import DERAS, ROOT, TINY, free_port  # noqa: E402

try:
    import yaml
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:
    print("SKIPPED: %s (install python3-yaml and python3-prometheus-client)" % e)
    sys.exit(77)

KINDS = {"Deployment", "Service", "InferencePool", "InferenceObjective", "HTTPRoute",
         "ConfigMap"}
KEY = "sk-k8s-0123456789"


def load():
    docs = []
    for path in sorted(glob.glob(os.path.join(ROOT, "k8s", "*.yaml"))):
        with open(path) as f:
            docs += [(os.path.basename(path), d) for d in yaml.safe_load_all(f) if d]
    return docs


def get(url, key=None):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Manifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load()
        cls.by_kind = {}
        for _, d in cls.docs:
            cls.by_kind.setdefault(d["kind"], []).append(d)

    def one(self, kind):
        self.assertEqual(len(self.by_kind.get(kind, [])), 1, kind)
        return self.by_kind[kind][0]

    def container(self):
        spec = self.one("Deployment")["spec"]["template"]["spec"]
        self.assertEqual(len(spec["containers"]), 1)
        return spec["containers"][0]

    def port(self):
        ports = {p["name"]: p["containerPort"] for p in self.container()["ports"]}
        return ports, ports["http"]

    def epp_config(self):
        cm = self.one("ConfigMap")
        return yaml.safe_load(cm["data"]["config.yaml"])

    def epp_metrics(self):
        cfg = self.epp_config()
        plugin = next(p for p in cfg["plugins"] if p["type"] == "model-server-protocol-metrics")
        params = plugin["parameters"]
        engine = next(e for e in params["engineConfigs"] if e["name"] == params["defaultEngine"])
        return {k: v for k, v in engine.items() if k.endswith("Spec")}

    def test_parse(self):
        self.assertGreaterEqual(len(glob.glob(os.path.join(ROOT, "k8s", "*.yaml"))), 2)
        for path, d in self.docs:
            self.assertIn("apiVersion", d, path)
            self.assertIn(d.get("kind"), KINDS, path)
            self.assertTrue(d["metadata"]["name"], path)
        self.assertEqual(set(self.by_kind), KINDS)

    def test_wiring(self):
        dep, svc = self.one("Deployment"), self.one("Service")
        pool, obj = self.one("InferencePool"), self.one("InferenceObjective")
        route = self.one("HTTPRoute")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        ports, port = self.port()
        c = self.container()
        self.assertEqual(c["command"][:2], ["deras", "serve"])
        self.assertIn("--metrics-listen=0.0.0.0:%d" % port, c["command"])
        # probes: readiness on /health, liveness on /live, both on the API's port
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/health")
        self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/live")
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertIn(c[probe]["httpGet"]["port"], ports)
        # the Service and the pool reach that port on those pods
        self.assertIn(svc["spec"]["ports"][0]["targetPort"], ports)
        self.assertLessEqual(svc["spec"]["selector"].items(), labels.items())
        self.assertEqual(pool["apiVersion"], "inference.networking.k8s.io/v1")
        self.assertLessEqual(pool["spec"]["selector"]["matchLabels"].items(), labels.items())
        self.assertEqual([p["number"] for p in pool["spec"]["targetPorts"]], [port])
        self.assertTrue(pool["spec"]["endpointPickerRef"]["name"])
        self.assertEqual(obj["spec"]["poolRef"]["name"], pool["metadata"]["name"])
        backends = [b for r in route["spec"]["rules"] for b in r["backendRefs"]]
        self.assertEqual(backends, [{"group": "inference.networking.k8s.io",
                                     "kind": "InferencePool", "name": pool["metadata"]["name"]}])
        # the drain fits in the grace period
        grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        drain = next(int(a.split("=")[1]) for a in c["command"] if a.startswith("--drain-timeout="))
        self.assertGreater(grace, drain)
        self.assertEqual(set(self.epp_metrics()), {"queuedRequestsSpec", "runningRequestsSpec",
                                                    "kvUsageSpec", "cacheInfoSpec"})

    def test_serving(self):
        c = self.container()
        _, port = self.port()
        d = tempfile.mkdtemp(prefix="deras-k8s-")
        keys = os.path.join(d, "api-keys")
        with open(keys, "w") as f:
            f.write(KEY + "\n")
        here = free_port()
        model_arg = next(a for a in c["command"] if a.startswith("--model="))
        cmd = [DERAS]
        for a in c["command"][1:]:
            a = a.replace(model_arg, "--model=" + TINY)
            a = a.replace(":%d" % port, ":%d" % here)
            a = a.replace("/etc/deras/api-keys", keys)
            cmd.append(a)
        cmd += ["--listen", "tcp://127.0.0.1:%d" % free_port(), "--threads", "1",
                "--kv-cache-memory", "64MiB", "--device", "cpu"]  # this machine, not a GPU node
        env = dict(os.environ, **{e["name"]: e["value"] for e in c.get("env", [])})
        env["DERAS_RUNTIME_DIR"] = d
        log = open(os.path.join(d, "serve.log"), "w+")
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = "http://127.0.0.1:%d" % here
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if get(base + c["readinessProbe"]["httpGet"]["path"])[0] == 200:
                        break
                except OSError:
                    pass
                if p.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    self.fail("the Deployment's command never became ready:\n" + log.read())
                time.sleep(0.1)
            self.assertEqual(get(base + c["livenessProbe"]["httpGet"]["path"])[0], 200)
            # the model's id is its directory's name
            st, body = get(base + "/v1/models", KEY)
            self.assertEqual(st, 200, body)
            model = json.loads(body)["data"][0]["id"]
            self.assertEqual(model, os.path.basename(TINY))
            self.assertEqual(os.path.basename(model_arg.split("=", 1)[1]),
                             "Llama-3.1-8B-Instruct")
            self.assertEqual(get(base + "/v1/models")[0], 401)
            # what the picker reads, scraped as it scrapes (no key)
            st, text = get(base + "/metrics")
            self.assertEqual(st, 200)
            families = {f.name: f for f in text_string_to_metric_families(text)}
            for spec, name in self.epp_metrics().items():
                self.assertIn(name, families, spec)
                fam = families[name]
                self.assertEqual(fam.type, "gauge", name)
                self.assertEqual(len(fam.samples), 1, name)
                self.assertEqual(fam.samples[0].labels["model_name"], model, name)
            kv = families["vllm:kv_cache_usage_perc"].samples[0].value
            self.assertTrue(0.0 <= kv <= 1.0, kv)
            info = families["vllm:cache_config_info"].samples[0].labels
            self.assertGreater(int(info["block_size"]), 0)
            self.assertGreater(int(info["num_gpu_blocks"]), 0)
            # an API call through the port
            req = urllib.request.Request(
                base + "/v1/completions", method="POST",
                data=json.dumps({"model": model, "prompt": "hi", "max_tokens": 3,
                                 "ignore_eos": True}).encode(),
                headers={"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                self.assertEqual(json.loads(r.read())["usage"]["completion_tokens"], 3)
            # the kubelet's stop
            p.send_signal(signal.SIGTERM)
            grace = self.one("Deployment")["spec"]["template"]["spec"][
                "terminationGracePeriodSeconds"]
            self.assertEqual(p.wait(grace), 0)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
