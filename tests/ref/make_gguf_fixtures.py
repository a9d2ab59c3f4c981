# SPDX-License-Identifier: Apache-2.0
"""make_gguf_fixtures.py - small GGUF files for tests/unit/test_gguf.c, written by gguf-py.

  tests/data/gguf/fixture_v3.gguf   every metadata value type (scalars, strings incl. an
      embedded NUL and non-ASCII, arrays of every element type incl. strings), tensors of
      1 to 4 dimensions in F32, F16, BF16, Q8_0, Q4_K (each quantized tensor followed by an
      F32 "<name>.expected" tensor holding gguf-py's dequantization), and two types deras
      does not compute with (I32, Q2_K)
  tests/data/gguf/fixture_v2.gguf   a GGUF v2 file (same layout, version 2) with
      general.alignment = 64

Run once by hand: /tmp/refenv/bin/python tests/ref/make_gguf_fixtures.py
"""
import os
import struct

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFValueType as V, GGUFWriter
from gguf.quants import dequantize, quantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "gguf")
rng = np.random.default_rng(7)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def fixture_v3(path):
    w = GGUFWriter(path, "testarch")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_bool("t.bool_false", False)
    w.add_string("t.str", "h\u00e9llo")
    w.add_string("t.str_nul", "a\0b")
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_uint64("t.u64_small", 7)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 2.718281828459045)
    w.add_key_value("arr.u8", [1, 2, 255], V.ARRAY, V.UINT8)
    w.add_key_value("arr.i8", [-1, 2], V.ARRAY, V.INT8)
    w.add_key_value("arr.u16", [65535, 0], V.ARRAY, V.UINT16)
    w.add_key_value("arr.i16", [-32768, 5], V.ARRAY, V.INT16)
    w.add_key_value("arr.u32", [1, 4000000000], V.ARRAY, V.UINT32)
    w.add_key_value("arr.i32", [-5, 7, 2147483647], V.ARRAY, V.INT32)
    w.add_key_value("arr.f32", [0.5, -1.25], V.ARRAY, V.FLOAT32)
    w.add_key_value("arr.bool", [True, False, True], V.ARRAY, V.BOOL)
    w.add_key_value("arr.str", ["a", "", "tokens \u2713", "x" * 300], V.ARRAY, V.STRING)
    w.add_key_value("arr.u64", [1, 2], V.ARRAY, V.UINT64)
    w.add_key_value("arr.i64", [-3], V.ARRAY, V.INT64)
    w.add_key_value("arr.f64", [0.1, 1e300], V.ARRAY, V.FLOAT64)

    # shape (3, 4) in numpy order: GGUF ne = [4, 3]
    w.add_tensor("t.f32", (np.arange(12, dtype=np.float32) * 0.5).reshape(3, 4))
    w.add_tensor("t.f16", np.array([1, -2, 0.5, 65504, -0.0, 3e-5, 7, 8], dtype=np.float16))
    bf = np.array([1.0, -3.5, 1e30, 2.0**-130], dtype=np.float32).view(np.uint32) >> 16
    w.add_tensor("t.bf16", bf.astype(np.uint16).view(np.uint8), raw_dtype=T.BF16)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    q = quantize(x, T.Q8_0)
    w.add_tensor("t.q8_0", q, raw_dtype=T.Q8_0)
    w.add_tensor("t.q8_0.expected", dequantize(q, T.Q8_0).astype(np.float32))
    k = rng.integers(0, 256, size=(1, 144), dtype=np.uint32).astype(np.uint8)
    k[0, 0:4] = np.array([0x3C00, 0x2E00], dtype=np.uint16).view(np.uint8)  # d = 1, dmin = 0.09375
    w.add_tensor("t.q4_k", k, raw_dtype=T.Q4_K)
    w.add_tensor("t.q4_k.expected", dequantize(k, T.Q4_K).astype(np.float32))
    w.add_tensor("t.i32", np.array([1, 2, 3, 4, 5], dtype=np.int32))
    w.add_tensor("t.q2_k", rng.integers(0, 256, size=(1, 84), dtype=np.uint32).astype(np.uint8),
                 raw_dtype=T.Q2_K)
    w.add_tensor("t.3d", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    w.add_tensor("t.4d", np.arange(12, dtype=np.float32).reshape(2, 1, 3, 2))
    finish(w)


def fixture_v2(path):
    w = GGUFWriter(path, "testarch")
    w.add_custom_alignment(64)
    w.add_string("general.name", "v2 fixture")
    w.add_uint32("t.u32", 42)
    w.add_tensor("a", np.arange(3, dtype=np.float32))
    w.add_tensor("b", np.arange(5, dtype=np.float32) + 100)
    finish(w)
    with open(path, "r+b") as f:  # v2 and v3 share the little-endian layout
        f.seek(4)
        f.write(struct.pack("<I", 2))


def main():
    os.makedirs(OUT, exist_ok=True)
    fixture_v3(os.path.join(OUT, "fixture_v3.gguf"))
    fixture_v2(os.path.join(OUT, "fixture_v2.gguf"))
    for n in sorted(os.listdir(OUT)):
        print(n, os.path.getsize(os.path.join(OUT, n)))


if __name__ == "__main__":
    main()
