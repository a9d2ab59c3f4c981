# SPDX-License-Identifier: Apache-2.0
"""make_misaligned_gguf.py - GGUF files whose tensors lie at odd offsets.

Writes, next to each source in tests/data/tiny/, a copy with general.alignment = 1 and an
I8 tensor "deras.pad" of a few bytes written first, so every tensor after it
starts at an odd file offset (checked after writing: the pad length is changed until the
first model tensor's absolute offset is odd):

  llama-gqa-align1.gguf        from llama-gqa.gguf       (F32: OpenBLAS needs 4-byte
                                                          alignment, so deras copies them)
  llama-gqa-q8_0-align1.gguf   from llama-gqa-q8_0.gguf  (Q8_0: read in place, unaligned)

Same metadata and tensor bytes otherwise, so a model loaded from either must give logits
bit-identical to its source's (tests/unit/test_model_reference.c). Run once by hand (gguf
and numpy only):

    /tmp/qenv/bin/python tests/ref/make_misaligned_gguf.py
"""
import os

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

TINY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tiny")
SKIP = {"general.architecture", "general.alignment"}


def copy(src, dst, pad):
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    w.add_custom_alignment(1)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name in SKIP:
            continue
        vtype = GGUFValueType(f.types[0])
        sub = GGUFValueType(f.types[-1]) if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(name, f.contents(), vtype, sub)
    w.add_tensor("deras.pad", np.arange(pad, dtype=np.int8))
    for t in r.tensors:
        data = np.array(t.data)
        if t.tensor_type.name in ("F32", "F16", "BF16"):
            w.add_tensor(t.name, data.reshape([int(x) for x in reversed(t.shape)]))
        else:
            w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    back = GGUFReader(dst)
    return [t.data_offset for t in back.tensors if t.name != "deras.pad"]


def main():
    for src, dst in [("llama-gqa.gguf", "llama-gqa-align1.gguf"),
                     ("llama-gqa-q8_0.gguf", "llama-gqa-q8_0-align1.gguf")]:
        for pad in (1, 2, 3, 4, 5, 6, 7):
            offsets = copy(os.path.join(TINY, src), os.path.join(TINY, dst), pad)
            if offsets[0] % 2:
                break
        odd = sum(o % 2 for o in offsets)
        print("%s: %d of %d tensors at odd offsets (pad %d)" % (dst, odd, len(offsets), pad))


if __name__ == "__main__":
    main()
