# SPDX-License-Identifier: Apache-2.0
"""make_quantize_vectors.py - reference quantization vectors (f32 -> GGUF formats).

Writes tests/data/quant/from_f32/ (read by tests/unit/test_quantize.c):

  input.f32      N_BLOCKS x 32 little-endian float32 values: random normal and uniform
                 blocks at scales from 1e-6 to 1e3, then hand-made blocks: all zeros, one
                 constant, +a and -a both present (the first of largest magnitude picks
                 the sign of Q4_0/Q5_0's scale), exact halves at scale 1 (ties of Q8_0's
                 rounding and of Q4_x's truncation), a lone non-zero, values below f16's
                 normal range
  <type>.blocks  gguf.quants.quantize(input, type) for q8_0, q4_0, q4_1, q5_0, q5_1, f16
                 and bf16 (f16 by numpy's astype, as gguf-py writes it)

gguf-py's quantizers are ggml's reference ones in numpy (it has none for the K formats).
Run once by hand (needs only gguf and numpy):

    python3 -m venv /tmp/qenv && /tmp/qenv/bin/pip install gguf==0.19.0 numpy==2.4.6
    /tmp/qenv/bin/python tests/ref/make_quantize_vectors.py
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant", "from_f32")
rng = np.random.default_rng(20261127)
QK = 32


def hand_made():
    b = []
    b.append(np.zeros(QK))
    b.append(np.full(QK, 0.375))
    x = rng.normal(0, 1, QK)
    x[3], x[17] = 4.0, -4.0            # equal magnitudes: the first decides Q4_0's sign
    b.append(x)
    x = rng.normal(0, 1, QK)
    x[0], x[9] = -4.0, 4.0
    b.append(x)
    # amax 127 -> Q8_0 d = 1, id = 1: x = k + 0.5 are exact ties of round()
    x = np.array([127.0] + [k + 0.5 for k in range(-15, 16)])
    b.append(x)
    # max -8 -> Q4_0 d = 1: x + 8.5 exact; min 0, max 15 -> Q4_1 d = 1: halves tie in trunc
    b.append(np.array([-8.0] + [(k % 16) - 7.5 for k in range(31)]))
    b.append(np.array([0.0, 15.0] + [(k % 15) + 0.5 for k in range(30)]))
    x = np.zeros(QK)
    x[21] = -0.001
    b.append(x)
    b.append(rng.normal(0, 1e-6, QK))   # d below f16's normal range
    b.append(rng.uniform(-1, 1, QK) * 60000.0)
    return [np.asarray(v, dtype=np.float32) for v in b]


def main():
    os.makedirs(OUT, exist_ok=True)
    blocks = []
    for scale in [1e-6, 1e-3, 0.02, 1.0, 30.0, 1000.0]:
        for _ in range(6):
            blocks.append((rng.normal(0, scale, QK)).astype(np.float32))
            blocks.append((rng.uniform(-scale, scale, QK) + scale * 0.3).astype(np.float32))
    blocks += hand_made()
    x = np.concatenate(blocks).astype(np.float32)
    with open(os.path.join(OUT, "input.f32"), "wb") as f:
        f.write(x.astype("<f4").tobytes())
    for qt in [T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.F16, T.BF16]:
        q = quantize(x.reshape(-1, QK), qt)
        with open(os.path.join(OUT, qt.name.lower() + ".blocks"), "wb") as f:
            f.write(np.ascontiguousarray(q).tobytes())
    print("wrote %d blocks of %d to %s" % (x.size // QK, QK, OUT))


if __name__ == "__main__":
    main()
