# SPDX-License-Identifier: Apache-2.0
"""make_smollm2_rows.py - reference weight rows of the test model, as transformers reads them.

transformers loads the SmolLM2 Q4_1/Q8_0 GGUF (dequantized by gguf-py, Q/K un-permuted by
its own GGUF loader) into float32 HF layout. A few row ranges per role are stored, chosen to
cross head boundaries of the permuted Q/K tensors and to cover Q4_1 (layers), Q8_0
(token_embd) and F32 (norms) tensors:

  tests/data/smollm2/rows.json   [{"role": ..., "layer": ..., "row0": ..., "n_rows": ...,
                                  "cols": ..., "offset": <float index into rows.f32>}]
  tests/data/smollm2/rows.f32    the rows, little-endian float32, back to back

Run once by hand: /tmp/refenv/bin/python tests/ref/make_smollm2_rows.py
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm2_hf import load_model  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "smollm2")

# role names are checkpoint.h's enum ckpt_tensor without the CKPT_ prefix
PICKS = [
    ("TOK_EMBD", None, "model.embed_tokens.weight", 0, 2),
    ("TOK_EMBD", None, "model.embed_tokens.weight", 49150, 2),
    ("OUTPUT_NORM", None, "model.norm.weight", 0, 1),
    ("ATTN_NORM", 3, "model.layers.3.input_layernorm.weight", 0, 1),
    ("ATTN_Q", 0, "model.layers.0.self_attn.q_proj.weight", 28, 8),    # inside head 0
    ("ATTN_Q", 0, "model.layers.0.self_attn.q_proj.weight", 60, 8),    # across heads 0/1
    ("ATTN_Q", 29, "model.layers.29.self_attn.q_proj.weight", 570, 6), # last rows
    ("ATTN_K", 5, "model.layers.5.self_attn.k_proj.weight", 0, 3),
    ("ATTN_K", 5, "model.layers.5.self_attn.k_proj.weight", 125, 6),   # across heads 1/2
    ("ATTN_V", 2, "model.layers.2.self_attn.v_proj.weight", 30, 4),
    ("ATTN_OUT", 7, "model.layers.7.self_attn.o_proj.weight", 100, 2),
    ("FFN_NORM", 11, "model.layers.11.post_attention_layernorm.weight", 0, 1),
    ("FFN_GATE", 29, "model.layers.29.mlp.gate_proj.weight", 1534, 2),
    ("FFN_UP", 13, "model.layers.13.mlp.up_proj.weight", 7, 2),
    ("FFN_DOWN", 0, "model.layers.0.mlp.down_proj.weight", 575, 1),
]


def main():
    os.makedirs(OUT, exist_ok=True)
    sd = load_model().state_dict()
    manifest, blobs, offset = [], [], 0
    for role, layer, name, row0, n in PICKS:
        w = sd[name].float().numpy()
        rows = (w.reshape(1, -1) if w.ndim == 1 else w[row0:row0 + n]).astype(np.float32)
        manifest.append({"role": role, "layer": layer if layer is not None else 0, "row0": row0,
                         "n_rows": n, "cols": int(rows.shape[1]), "offset": offset,
                         "hf_name": name})
        blobs.append(rows.reshape(-1))
        offset += rows.size
    np.concatenate(blobs).astype("<f4").tofile(os.path.join(OUT, "rows.f32"))
    with open(os.path.join(OUT, "rows.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(offset * 4, "bytes of rows")


if __name__ == "__main__":
    main()
