# SPDX-License-Identifier: Apache-2.0
"""make_checkpoint_fixtures.py - tiny random Llama and Qwen2 checkpoints, each as GGUF and as HF dir.

Writes tests/data/ckpt/ (read by tests/unit/test_checkpoint.c):

  llama.gguf       llama.cpp layout: llama.* metadata, blk.N.* names, Q and K rows permuted
                   as convert_hf_to_gguf.py does, token_embd in F16, the rest F32, untied
  llama_hf/        transformers config.json (v5 rope_parameters form) + two shards and
                   model.safetensors.index.json; tensors in a mix of F32, F16 and BF16
  qwen2.gguf       qwen2 layout: Q/K/V biases, not permuted, tied (no output.weight), vocab
                   size only from tokenizer.ggml.tokens
  qwen2_hf/        written by transformers' save_pretrained (single F32 model.safetensors)

Every weight is a random value exactly representable in bf16 and f16 (|x| in [1/16, 1]),
so all files hold the same numbers whatever their dtype, and reading any row of any role
from the GGUF and from the HF dir must give identical floats. The script checks its own
output with transformers: the HF dirs load with from_pretrained, and the GGUF files load
with from_pretrained(gguf_file=...) to the same weights (so the permutation is llama.cpp's).

Run once by hand: /tmp/refenv/bin/python tests/ref/make_checkpoint_fixtures.py
"""
import json
import os
import shutil

import numpy as np
import torch
from gguf import GGUFWriter
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ckpt")
gen = torch.Generator().manual_seed(1234)

DIMS = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def rand(*shape):
    m = torch.rand(shape, generator=gen) * 0.9375 + 0.0625
    s = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0)
    return (m * s).to(torch.bfloat16).to(torch.float32)


def state_dict(cfg, bias):
    d, ff, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    hd = d // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    sd = {"model.embed_tokens.weight": rand(v, d), "model.norm.weight": rand(d)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = rand(d)
        sd[p + "self_attn.q_proj.weight"] = rand(q, d)
        sd[p + "self_attn.k_proj.weight"] = rand(kv, d)
        sd[p + "self_attn.v_proj.weight"] = rand(kv, d)
        if bias:
            sd[p + "self_attn.q_proj.bias"] = rand(q)
            sd[p + "self_attn.k_proj.bias"] = rand(kv)
            sd[p + "self_attn.v_proj.bias"] = rand(kv)
        sd[p + "self_attn.o_proj.weight"] = rand(d, q)
        sd[p + "post_attention_layernorm.weight"] = rand(d)
        sd[p + "mlp.gate_proj.weight"] = rand(ff, d)
        sd[p + "mlp.up_proj.weight"] = rand(ff, d)
        sd[p + "mlp.down_proj.weight"] = rand(d, ff)
    if not cfg.tie_word_embeddings:
        sd["lm_head.weight"] = rand(v, d)
    return sd


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute (n_head already the kv count for K)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def write_gguf(path, arch, cfg, sd, permute_qk, vocab_key):
    w = GGUFWriter(path, arch)
    w.add_uint32(f"{arch}.block_count", cfg.num_hidden_layers)
    w.add_uint32(f"{arch}.context_length", cfg.max_position_embeddings)
    w.add_uint32(f"{arch}.embedding_length", cfg.hidden_size)
    w.add_uint32(f"{arch}.feed_forward_length", cfg.intermediate_size)
    w.add_uint32(f"{arch}.attention.head_count", cfg.num_attention_heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", cfg.num_key_value_heads)
    w.add_float32(f"{arch}.rope.freq_base", cfg.rope_parameters["rope_theta"])
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", cfg.rms_norm_eps)
    w.add_uint32(f"{arch}.rope.dimension_count", cfg.hidden_size // cfg.num_attention_heads)
    w.add_uint32("general.file_type", 0)
    if vocab_key:
        w.add_uint32(f"{arch}.vocab_size", cfg.vocab_size)
    # a byte-level-ish vocabulary, enough for transformers' GGUF loader
    tokens = [f"<t{i}>" for i in range(cfg.vocab_size)]
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * cfg.vocab_size)
    w.add_array("tokenizer.ggml.merges", ["<t1> <t2>"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"].numpy().astype(np.float16))
    for name, t in sd.items():
        if not name.startswith("model.layers."):
            continue
        i, rest = name[len("model.layers."):].split(".", 1)
        x = t
        if permute_qk and rest == "self_attn.q_proj.weight":
            x = permute(t, nh)
        if permute_qk and rest == "self_attn.k_proj.weight":
            x = permute(t, nkv)
        w.add_tensor(f"blk.{i}.{GGUF_NAMES[rest]}", x.numpy().astype(np.float32))
    w.add_tensor("output_norm.weight", sd["model.norm.weight"].numpy())
    if "lm_head.weight" in sd:
        w.add_tensor("output.weight", sd["lm_head.weight"].numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_same(model, sd, what):
    got = model.state_dict()
    for k, v in sd.items():
        if not torch.equal(got[k].float(), v):
            raise SystemExit(f"{what}: {k} differs")


def llama():
    cfg = LlamaConfig(**DIMS, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    sd = state_dict(cfg, bias=False)
    model = LlamaForCausalLM(cfg)
    model.load_state_dict(sd, strict=True)
    d = os.path.join(OUT, "llama_hf")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cfg.save_pretrained(d)
    # two shards, three dtypes: layer 0 F16, layer 1 BF16, the rest F32 (lm_head BF16)
    shards = {"model-00001-of-00002.safetensors": {}, "model-00002-of-00002.safetensors": {}}
    names = list(shards)
    weight_map = {}
    for k, v in sd.items():
        if k.startswith("model.layers.0."):
            t, s = v.to(torch.float16), names[0]
        elif k.startswith("model.layers.1."):
            t, s = v.to(torch.bfloat16), names[1]
        elif k == "lm_head.weight":
            t, s = v.to(torch.bfloat16), names[1]
        else:
            t, s = v, names[0]
        shards[s][k] = t.contiguous()
        weight_map[k] = s
    total = 0
    for s, tensors in shards.items():
        save_file(tensors, os.path.join(d, s), metadata={"format": "pt"})
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    check_same(LlamaForCausalLM.from_pretrained(d, dtype=torch.float32), sd, "llama_hf")

    write_gguf(os.path.join(OUT, "llama.gguf"), "llama", cfg, sd, True, True)
    m = AutoModelForCausalLM.from_pretrained(OUT, gguf_file="llama.gguf", dtype=torch.float32)
    check_same(m, sd, "llama.gguf via transformers")


def qwen2():
    cfg = Qwen2Config(**DIMS, rms_norm_eps=1e-6, tie_word_embeddings=True,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    sd = state_dict(cfg, bias=True)
    model = Qwen2ForCausalLM(cfg)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    d = os.path.join(OUT, "qwen2_hf")
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    os.remove(os.path.join(d, "generation_config.json"))  # not part of the checkpoint
    check_same(Qwen2ForCausalLM.from_pretrained(d, dtype=torch.float32), sd, "qwen2_hf")
    write_gguf(os.path.join(OUT, "qwen2.gguf"), "qwen2", cfg, sd, False, False)
    m = AutoModelForCausalLM.from_pretrained(OUT, gguf_file="qwen2.gguf", dtype=torch.float32)
    check_same(m, sd, "qwen2.gguf via transformers")


def main():
    os.makedirs(OUT, exist_ok=True)
    llama()
    qwen2()
    for root, _, files in os.walk(OUT):
        for n in sorted(files):
            print(os.path.relpath(os.path.join(root, n), OUT), os.path.getsize(os.path.join(root, n)))


if __name__ == "__main__":
    main()
