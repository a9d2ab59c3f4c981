#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_python_wheel - the Python client builds as a wheel from its pyproject.toml (issue
16): the wheel carries the package, its py.typed marker and its license metadata, installs
into an empty target with pip, and imports from there with both clients.

The source is copied to a temporary directory first, so the build leaves nothing in the
tree; --no-build-isolation uses the system's setuptools and wheel (Debian python3-pip
depends on both): nothing is downloaded.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "tools", "clients", "python")


class Wheel(unittest.TestCase):
    def test_wheel_builds_installs_and_imports(self):
        d = tempfile.mkdtemp(prefix="deras-wheel-")
        try:
            src = os.path.join(d, "src")
            shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                                "--no-build-isolation", "--no-index", "--wheel-dir",
                                os.path.join(d, "dist"), src],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            wheels = os.listdir(os.path.join(d, "dist"))
            self.assertEqual(len(wheels), 1, wheels)
            self.assertRegex(wheels[0], r"^deras_client-0\.1\.0-py3-none-any\.whl$")
            whl = os.path.join(d, "dist", wheels[0])
            with zipfile.ZipFile(whl) as z:
                names = z.namelist()
                meta = z.read([n for n in names if n.endswith(".dist-info/METADATA")][0]).decode()
            for f in ("__init__.py", "client.py", "aio.py", "link.py", "types.py", "py.typed"):
                self.assertIn("deras_client/" + f, names)
            self.assertIn("License: Apache-2.0", meta)
            self.assertIn("Classifier: License :: OSI Approved :: Apache Software License", meta)
            self.assertIn("Classifier: Typing :: Typed", meta)
            self.assertIn("Requires-Dist: pyzmq", meta)
            target = os.path.join(d, "target")
            r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                                "--target", target, whl], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = subprocess.run([sys.executable, "-c",
                                "import deras_client as d; print(d.__file__);"
                                "print(d.Client.__name__, d.AsyncClient.__name__)"],
                               env=dict(os.environ, PYTHONPATH=target), capture_output=True,
                               text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            where, names_line = r.stdout.splitlines()
            self.assertTrue(where.startswith(target), where)
            self.assertEqual(names_line, "Client AsyncClient")
            print("wheel: %s (%d files), license metadata and py.typed; installed and imported"
                  % (wheels[0], len(names)))
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
