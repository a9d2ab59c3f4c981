#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make_synthetic_model.py - a Llama-family GGUF of a real model's shape with random weights,
for speed and memory benchmarks (never for correctness: the weights mean nothing).

    python3 bench/make_synthetic_model.py --preset llama-3-8b --out /tmp/llama3-8b.gguf
    python3 bench/make_synthetic_model.py --preset tiny --out /tmp/tiny.gguf   # a quick check

Weights are F16 (the loader converts them to the backend's type: bf16 on a GPU), drawn once
from N(0, 0.02) into a 64 Mi-element pool and read from it at a random offset per tensor,
so a 16 GB file takes seconds, not the minutes that drawing 8 G values would. Norm weights
are 1 + N(0, 0.02). No value is zero. The tokenizer is a byte-level stub of the preset's
vocabulary size (tokens "t0".."tN", no merges): enough for the loader, not for text.

Needs the PyPI package gguf (and numpy). Progress goes to stderr, one line per layer.
"""
import argparse
import sys

import numpy as np
import gguf

PRESETS = {
    # name: layers, d_model, heads, kv heads, d_ff, vocab, rope theta, context
    "llama-3-8b": (32, 4096, 32, 8, 14336, 128256, 500000.0, 8192),
    "llama-2-7b": (32, 4096, 32, 32, 11008, 32000, 10000.0, 4096),
    "tiny": (2, 256, 4, 2, 512, 1024, 10000.0, 1024),
}

POOL = 64 << 20


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    n_layers, d, n_head, n_kv, d_ff, vocab, theta, ctx = PRESETS[a.preset]
    hd = d // n_head
    rng = np.random.default_rng(a.seed)
    pool = rng.normal(0.0, 0.02, POOL).astype(np.float16)
    pool[pool == 0] = np.float16(0.02)

    def weight(rows, cols):
        n = rows * cols
        off = int(rng.integers(0, POOL))
        idx = (np.arange(n, dtype=np.int64) + off) % POOL if n > POOL - off else None
        flat = pool[idx] if idx is not None else pool[off:off + n]
        return flat.reshape(rows, cols)

    def norm(n):
        return (1.0 + rng.normal(0.0, 0.02, n)).astype(np.float32)

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_type("model")
    w.add_name("synthetic-" + a.preset)
    w.add_block_count(n_layers)
    w.add_context_length(ctx)
    w.add_embedding_length(d)
    w.add_feed_forward_length(d_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(theta)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(["t%d" % i for i in range(vocab)])
    w.add_token_types([gguf.TokenType.NORMAL] * vocab)
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

    w.add_tensor("token_embd.weight", weight(vocab, d))
    w.add_tensor("output_norm.weight", norm(d))
    w.add_tensor("output.weight", weight(vocab, d))
    for layer in range(n_layers):
        p = "blk.%d." % layer
        w.add_tensor(p + "attn_norm.weight", norm(d))
        w.add_tensor(p + "attn_q.weight", weight(n_head * hd, d))
        w.add_tensor(p + "attn_k.weight", weight(n_kv * hd, d))
        w.add_tensor(p + "attn_v.weight", weight(n_kv * hd, d))
        w.add_tensor(p + "attn_output.weight", weight(d, n_head * hd))
        w.add_tensor(p + "ffn_norm.weight", norm(d))
        w.add_tensor(p + "ffn_gate.weight", weight(d_ff, d))
        w.add_tensor(p + "ffn_up.weight", weight(d_ff, d))
        w.add_tensor(p + "ffn_down.weight", weight(d, d_ff))
        print("make_synthetic_model: layer %d/%d" % (layer + 1, n_layers), file=sys.stderr,
              flush=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("make_synthetic_model: wrote %s" % a.out, file=sys.stderr)


if __name__ == "__main__":
    main()
