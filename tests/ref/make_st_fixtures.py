# SPDX-License-Identifier: Apache-2.0
"""make_st_fixtures.py - a small safetensors file for tests/unit/test_safetensors.c.

  tests/data/st/fixture.safetensors   written by the safetensors library (torch API):
      F32 (2x3), F16, BF16, F64, I64, U8, BOOL, I8, I32, U16, F8_E4M3 tensors, a scalar
      (shape []), an empty tensor (0x3), a 4-D tensor, and __metadata__ {"format": "pt"}.
      Values are simple ramps, so the test knows them without a second file.

Run once by hand: /tmp/refenv/bin/python tests/ref/make_st_fixtures.py
"""
import os

import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "st")


def main():
    os.makedirs(OUT, exist_ok=True)
    t = {
        "a": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.25,
        "b": torch.tensor([1.0, -2.0, 0.5, 65504.0], dtype=torch.float16),
        "c": torch.tensor([[1.0, -3.5], [256.0, 0.0078125]], dtype=torch.bfloat16),
        "f64": torch.tensor([1.5, 2.5], dtype=torch.float64),
        "ids": torch.tensor([1, -2, 3], dtype=torch.int64),
        "mask": torch.tensor([0, 1, 2, 3, 255], dtype=torch.uint8),
        "flag": torch.tensor([True, False]),
        "i8": torch.tensor([-1, 1], dtype=torch.int8),
        "i32": torch.tensor([7], dtype=torch.int32),
        "u16": torch.tensor([9, 10], dtype=torch.uint16),
        "f8": torch.zeros(4, dtype=torch.float8_e4m3fn),
        "scalar": torch.tensor(3.0, dtype=torch.float32),
        "empty": torch.zeros((0, 3), dtype=torch.float32),
        "d4": torch.arange(24, dtype=torch.float32).reshape(1, 2, 3, 4),
    }
    path = os.path.join(OUT, "fixture.safetensors")
    save_file(t, path, metadata={"format": "pt"})
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        print(f.read(n).decode())
    print(os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
