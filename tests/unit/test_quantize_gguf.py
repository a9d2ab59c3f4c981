#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test_quantize_gguf.py - deras' quantizers against gguf-py's on fresh random data.

    test_quantize_gguf.py PATH/TO/test_quantize [PYLIB]

Draws new random values every run (the seed is printed; DERAS_QUANT_SEED=N repeats one):
blocks of 32 at scales from 1e-5 to 1e3, some shifted off zero, some with a repeated
largest magnitude of both signs. Each format (q8_0, q4_0, q4_1, q5_0, q5_1, f16, bf16) is
written by `test_quantize dump` (common/base/quantize.c) and by gguf.quants.quantize, and
the bytes must be equal. Exits 77 (skipped) when numpy or gguf cannot be imported; PYLIB
(tools/bootstrap installs gguf there) is tried first.
"""
import os
import subprocess
import sys
import tempfile

if len(sys.argv) > 2 and os.path.isdir(sys.argv[2]):
    sys.path.insert(0, sys.argv[2])
try:
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize
except ImportError as e:
    print("SKIPPED: the gguf and numpy packages are not installed (%s)" % e)
    sys.exit(77)

FORMATS = {"q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1, "q5_0": T.Q5_0, "q5_1": T.Q5_1,
           "f16": T.F16, "bf16": T.BF16}


def values(rng, n_blocks):
    scale = 10.0 ** rng.uniform(-5, 3, size=(n_blocks, 1))
    x = rng.normal(0, 1, size=(n_blocks, 32)) * scale
    x[::3] += 1.5 * scale[::3]
    for b in range(1, n_blocks, 7):  # a largest magnitude held by two values of both signs
        i, j = rng.choice(32, size=2, replace=False)
        m = np.abs(x[b]).max() * 1.25
        x[b, i], x[b, j] = (m, -m) if b % 2 else (-m, m)
    return x.astype(np.float32)


def main():
    exe = sys.argv[1]
    seed = int(os.environ.get("DERAS_QUANT_SEED") or int.from_bytes(os.urandom(4), "little"))
    rng = np.random.default_rng(seed)
    x = values(rng, 4096)
    print("seed %d: %d blocks of 32" % (seed, x.shape[0]))
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "in.f32")
        x.astype("<f4").tofile(src)
        for name, qt in FORMATS.items():
            out = os.path.join(tmp, name + ".bin")
            subprocess.run([exe, "dump", name, src, out], check=True)
            got = np.fromfile(out, dtype=np.uint8)
            want = np.ascontiguousarray(quantize(x, qt)).view(np.uint8).reshape(-1)
            if got.size != want.size:
                print("%s: %d bytes, gguf-py %d" % (name, got.size, want.size))
                failed += 1
                continue
            diff = np.nonzero(got != want)[0]
            if diff.size:
                bb = want.size // x.shape[0]
                print("%s: %d bytes differ, first at byte %d (block %d): 0x%02x, gguf-py 0x%02x"
                      % (name, diff.size, diff[0], diff[0] // bb, got[diff[0]], want[diff[0]]))
                failed += 1
            else:
                print("%-5s %d bytes equal to gguf-py's" % (name, got.size))
    if failed:
        print("FAILED: %d formats differ from gguf-py (seed %d)" % (failed, seed))
        sys.exit(1)


if __name__ == "__main__":
    main()
