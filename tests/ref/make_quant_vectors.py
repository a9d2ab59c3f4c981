# SPDX-License-Identifier: Apache-2.0
"""make_quant_vectors.py - reference dequantization and half/bfloat16 conversion vectors.

Writes tests/data/quant/ (read by tests/unit/test_dtype.c):

  <type>.blocks  raw blocks: random bytes, except that every f16 scale field is forced to a
                 finite value (the first blocks get the extremes: largest finite, smallest
                 subnormal, negative, zero), several blocks per type
  <type>.f32     gguf-py's gguf.quants.dequantize() of those bytes, little-endian float32
  fpconv.bin     records of (u32 f32 bits, u16 numpy float16 bits, u16 torch bfloat16 bits)
                 for ties, subnormals, overflow boundaries and random finite values

Run once by hand: /tmp/refenv/bin/python tests/ref/make_quant_vectors.py
"""
import os

import numpy as np
import torch
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant")
rng = np.random.default_rng(20261121)

# Byte offsets of the f16 scale fields inside one block of each type.
SCALE_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
EXTREME_SCALES = [0x7BFF, 0x0001, 0xFBFF, 0x0000, 0x8001, 0x3C00]


def finite_f16(n):
    """n random f16 bit patterns, all finite (exponent field != 31)."""
    v = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    bad = (v & 0x7C00) == 0x7C00
    while bad.any():
        v[bad] = rng.integers(0, 1 << 16, size=int(bad.sum()), dtype=np.uint32).astype(np.uint16)
        bad = (v & 0x7C00) == 0x7C00
    return v


def make_blocks(qtype, n_blocks):
    _, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint32).astype(np.uint8)
    for off in SCALE_FIELDS[qtype]:
        s = finite_f16(n_blocks)
        for i, e in enumerate(EXTREME_SCALES[:n_blocks - 2]):
            s[i] = e if off == SCALE_FIELDS[qtype][0] else EXTREME_SCALES[(i + 1) % len(EXTREME_SCALES)]
        raw[:, off:off + 2] = s.view(np.uint8).reshape(n_blocks, 2)
    # one block of all-ones quant bits and one of all-zeros (scales kept finite)
    keep = {o for off in SCALE_FIELDS[qtype] for o in (off, off + 1)}
    for j in range(type_size):
        if j not in keep:
            raw[-1, j] = 0xFF
            raw[-2, j] = 0x00
    return raw


def write(name, blocks, values):
    with open(os.path.join(OUT, name + ".blocks"), "wb") as f:
        f.write(blocks.tobytes())
    with open(os.path.join(OUT, name + ".f32"), "wb") as f:
        f.write(np.ascontiguousarray(values, dtype="<f4").tobytes())


def main():
    os.makedirs(OUT, exist_ok=True)
    for qtype, n_blocks in [(T.Q4_0, 8), (T.Q4_1, 8), (T.Q5_0, 8), (T.Q5_1, 8), (T.Q8_0, 8),
                            (T.Q4_K, 4), (T.Q5_K, 4), (T.Q6_K, 4)]:
        blocks = make_blocks(qtype, n_blocks)
        values = dequantize(blocks.reshape(-1), qtype)
        assert values.size == n_blocks * GGML_QUANT_SIZES[qtype][0]
        assert np.isfinite(values).all()
        write(qtype.name.lower(), blocks, values)

    # F16 and BF16 elements: random non-NaN bit patterns (NaN payload handling is tested in C)
    h = rng.integers(0, 1 << 16, size=256, dtype=np.uint32).astype(np.uint16)
    h[(h & 0x7C00) == 0x7C00] &= 0xFC00   # NaN -> inf of the same sign
    write("f16", h.view(np.uint8), dequantize(h.view(np.uint8), T.F16))
    b = rng.integers(0, 1 << 16, size=256, dtype=np.uint32).astype(np.uint16)
    b[(b & 0x7F80) == 0x7F80] &= 0xFF80
    write("bf16", b.view(np.uint8), dequantize(b.view(np.uint8), T.BF16))

    # f32 -> f16 / bf16 rounding expectations
    vals = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65519.99, 65520.0, 65536.0, 1e30, -1e30,
            np.inf, -np.inf, 2.0**-14, 2.0**-24, 2.0**-25, 2.0**-25 * 1.5, 2.0**-26, 2.0**-24 * 1.5,
            2.0**-24 * 2.5, 2.0**-14 - 2.0**-25, 2.0**-14 - 2.0**-26, 1e-8, 1e-45, -1e-45,
            1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-11 + 2.0**-23, 1 + 2.0**-8, 1 + 3 * 2.0**-8,
            1 + 2.0**-8 + 2.0**-23, 3.3895314e38, 3.4028235e38, 1.17549435e-38, 5.877472e-39,
            0.1, 0.2, 0.3, 1 / 3, 2 / 3, 3.14159265, 6.1035156e-05]
    f = np.array(vals, dtype=np.float32)
    bits = rng.integers(0, 1 << 32, size=3000, dtype=np.uint64).astype(np.uint32)
    bits = bits[(bits & 0x7F800000) != 0x7F800000]          # no NaN/inf from random bits
    small = (rng.integers(0x33000000, 0x38800000, size=500, dtype=np.uint64)).astype(np.uint32)
    f = np.concatenate([f, bits.view(np.float32), small.view(np.float32)])
    f16 = f.astype(np.float16).view(np.uint16)
    bf16 = torch.from_numpy(f.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    rec = np.zeros(f.size, dtype=[("f", "<u4"), ("h", "<u2"), ("b", "<u2")])
    rec["f"] = f.view(np.uint32)
    rec["h"] = f16
    rec["b"] = bf16
    with open(os.path.join(OUT, "fpconv.bin"), "wb") as fo:
        fo.write(rec.tobytes())
    print("wrote", OUT)


if __name__ == "__main__":
    main()
