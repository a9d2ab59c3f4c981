#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make_synthetic_model.py - a Llama-family GGUF of a real model's shape with random weights,
for speed and memory benchmarks (never for correctness: the weights mean nothing).

    python3 bench/make_synthetic_model.py --preset llama-3-8b --out /tmp/llama3-8b.gguf
    python3 bench/make_synthetic_model.py --preset llama-3-8b --type q4_k_m \\
        --tokenizer-from ~/.cache/deras/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --out ~/.cache/deras/synthetic/llama-3-8b.q4_k_m.gguf
    python3 bench/make_synthetic_model.py --preset tiny --out /tmp/tiny.gguf   # a quick check

--type picks the tensor formats:
  f16     every matrix F16, drawn once from N(0, 0.02) into a 64 Mi-element pool and read
          from it at a random offset per tensor (a 16 GB file in seconds, not minutes)
  q4_k_m  llama-quantize's Q4_K_M mix: Q4_K everywhere except the LM head (Q6_K) and
          attn_v / ffn_down in the layers llama.cpp gives more bits (the first and last
          eighth, every third between: use_more_bits), Q6_K there
  q4_k, q4_0, q8_0   every matrix in that format
Quantized blocks are random bytes written directly (no float weights are ever made, so an
8B file takes about a minute): every code is a valid code, and the f16 scales are set to
finite values that give weights of about N(0, 0.02), so activations stay finite through
32 layers. Norm weights are F32 1 + N(0, 0.02).

The tokenizer is a minimal byte-level BPE vocabulary (printable ASCII, space and newline,
a few merges, padded with unused "[PAD<i>]" tokens to the preset's size: text tokenizes,
byte by byte), or, with --tokenizer-from GGUF, that file's
tokenizer (tokens, types, merges, special ids, chat template) padded with unused
"[PAD<i>]" tokens up to the preset's vocabulary: text prompts then tokenize for real, in
deras and in llama.cpp alike.

Tensors are written one at a time as they are made (GGUFWriter's tensor-info-first mode),
so memory stays at the largest tensor (the LM head: ~0.4 GB for Llama-3-8B in Q6_K).
Needs the PyPI package gguf and numpy. Progress goes to stderr, one line per layer.
"""
import argparse
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

PRESETS = {
    # name: layers, d_model, heads, kv heads, d_ff, vocab, rope theta, context
    "llama-3-8b": (32, 4096, 32, 8, 14336, 128256, 500000.0, 8192),
    "llama-2-7b": (32, 4096, 32, 32, 11008, 32000, 10000.0, 4096),
    "tiny": (2, 256, 4, 2, 512, 1024, 10000.0, 1024),
}
TYPES = ("f16", "q4_k_m", "q4_k", "q4_0", "q8_0")
FILE_TYPES = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M,
              "q4_k": gguf.LlamaFileType.MOSTLY_Q4_K_S, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
              "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
POOL = 64 << 20


def use_more_bits(i, n):
    """llama.cpp's llama_tensor_get_type: layers whose attn_v / ffn_down get Q6_K in Q4_K_M."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


class Blocks:
    """Random valid blocks of one format whose weights are about N(0, 0.02)."""

    def __init__(self, rng):
        self.rng = rng

    def f16(self, lo, hi, n):
        return self.rng.uniform(lo, hi, n).astype(np.float16).view(np.uint8).reshape(n, 2)

    def make(self, qt, n_blocks):
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qt]
        b = np.frombuffer(self.rng.bytes(n_blocks * block_bytes), dtype=np.uint8)
        b = b.reshape(n_blocks, block_bytes).copy()
        if qt == Q.Q4_K:    # d * sc * q - dmin * m, sc, m in 0..63, q in 0..15
            d = self.f16(0.7e-4, 2.1e-4, n_blocks)
            b[:, 0:2] = d
            b[:, 2:4] = (d.view(np.float16).astype(np.float32) * 7.5).astype(np.float16).view(np.uint8)
        elif qt == Q.Q6_K:  # d * scale * (q - 32), scale int8, q in 0..63: d at the end
            b[:, 208:210] = self.f16(0.8e-5, 2.2e-5, n_blocks)
        elif qt == Q.Q4_0:  # d * (q - 8)
            b[:, 0:2] = self.f16(2e-3, 6e-3, n_blocks)
        elif qt == Q.Q8_0:  # d * q, q int8
            b[:, 0:2] = self.f16(1.5e-4, 4e-4, n_blocks)
        else:
            raise ValueError(qt)
        return b


def minimal_vocab(n):
    """Byte-level BPE: 0 <|endoftext|> (control), printable ASCII, space (G-dot) and newline
    (C-dot), three merges, then unused [PADi] tokens up to n (tests/ref/make_tiny_models.py
    has the same idea)."""
    tokens = ["<|endoftext|>", "\u0120", "\u010a"] + [chr(c) for c in range(0x21, 0x7f)]
    types = [gguf.TokenType.CONTROL] + [gguf.TokenType.NORMAL] * (len(tokens) - 1)
    merges = ["\u0120 t", "h e", "\u0120t he"]
    tokens += ["\u0120t", "he", "\u0120the"]
    types += [gguf.TokenType.NORMAL] * 3
    tokens += ["[PAD%d]" % i for i in range(len(tokens), n)]
    types += [gguf.TokenType.UNUSED] * (n - len(types))
    return tokens, types, merges


def tokenizer_keys(w, vocab, source):
    if source is None:
        tokens, types, merges = minimal_vocab(vocab)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(0)
        w.add_eos_token_id(0)
        w.add_add_bos_token(False)
        return
    r = gguf.GGUFReader(source)
    for name, f in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = gguf.GGUFValueType(f.types[0])
        sub = gguf.GGUFValueType(f.types[-1]) if vtype == gguf.GGUFValueType.ARRAY else None
        val = f.contents()
        if name == "tokenizer.ggml.tokens":
            if len(val) > vocab:
                sys.exit("make_synthetic_model: %s has %d tokens, more than the preset's %d"
                         % (source, len(val), vocab))
            val = list(val) + ["[PAD%d]" % i for i in range(len(val), vocab)]
        elif name == "tokenizer.ggml.token_type":
            val = list(val) + [int(gguf.TokenType.UNUSED)] * (vocab - len(val))
        elif name == "tokenizer.ggml.scores":
            val = list(val) + [0.0] * (vocab - len(val))
        w.add_key_value(name, val, vtype, sub)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("--type", choices=TYPES, default="f16")
    ap.add_argument("--tokenizer-from", metavar="GGUF",
                    help="take the tokenizer of this GGUF, padded to the preset's vocabulary")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    n_layers, d, n_head, n_kv, d_ff, vocab, theta, ctx = PRESETS[a.preset]
    hd = d // n_head
    rng = np.random.default_rng(a.seed)
    blocks = Blocks(rng)
    pool = None
    if a.type == "f16":
        pool = rng.normal(0.0, 0.02, POOL).astype(np.float16)
        pool[pool == 0] = np.float16(0.02)

    def qtype(name, layer):
        if a.type == "f16":
            return Q.F16
        if a.type == "q4_k_m":
            if name == "output.weight":
                return Q.Q6_K
            if name in ("attn_v.weight", "ffn_down.weight") and use_more_bits(layer, n_layers):
                return Q.Q6_K
            return Q.Q4_K
        return {"q4_k": Q.Q4_K, "q4_0": Q.Q4_0, "q8_0": Q.Q8_0}[a.type]

    def weight(qt, rows, cols):
        if qt == Q.F16:
            n = rows * cols
            off = int(rng.integers(0, POOL))
            idx = (np.arange(n, dtype=np.int64) + off) % POOL if n > POOL - off else None
            flat = pool[idx] if idx is not None else pool[off:off + n]
            return flat.reshape(rows, cols)
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qt]
        return blocks.make(qt, rows * cols // block_elems).reshape(rows, cols // block_elems * block_bytes)

    def norm(n):
        return (1.0 + rng.normal(0.0, 0.02, n)).astype(np.float32)

    # (name, qtype or None for an F32 norm, rows, cols) in file order
    plan = [("token_embd.weight", qtype("token_embd.weight", 0), vocab, d),
            ("output_norm.weight", None, 1, d), ("output.weight", qtype("output.weight", 0), vocab, d)]
    for layer in range(n_layers):
        p = "blk.%d." % layer
        for name, rows, cols in [("attn_norm.weight", 0, d), ("attn_q.weight", n_head * hd, d),
                                 ("attn_k.weight", n_kv * hd, d), ("attn_v.weight", n_kv * hd, d),
                                 ("attn_output.weight", d, n_head * hd), ("ffn_norm.weight", 0, d),
                                 ("ffn_gate.weight", d_ff, d), ("ffn_up.weight", d_ff, d),
                                 ("ffn_down.weight", d, d_ff)]:
            plan.append((p + name, None if rows == 0 else qtype(name, layer), rows or 1, cols))

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_type("model")
    w.add_name("synthetic-%s-%s" % (a.preset, a.type))
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
    w.add_file_type(FILE_TYPES[a.type])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokenizer_keys(w, vocab, a.tokenizer_from)
    for name, qt, rows, cols in plan:
        if qt is None:
            w.add_tensor_info(name, (cols,), np.dtype(np.float32), cols * 4)
        elif qt == Q.F16:
            w.add_tensor_info(name, (rows, cols), np.dtype(np.float16), rows * cols * 2)
        else:
            block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qt]
            nbytes = rows * cols // block_elems * block_bytes
            w.add_tensor_info(name, (rows, cols // block_elems * block_bytes), np.dtype(np.uint8),
                              nbytes, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, qt, rows, cols in plan:
        w.write_tensor_data(norm(cols) if qt is None else weight(qt, rows, cols))
        if name.endswith("ffn_down.weight"):
            print("make_synthetic_model: layer %d/%d" % (int(name.split(".")[1]) + 1, n_layers),
                  file=sys.stderr, flush=True)
    w.close()
    print("make_synthetic_model: wrote %s" % a.out, file=sys.stderr)


if __name__ == "__main__":
    main()
