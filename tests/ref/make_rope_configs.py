# SPDX-License-Identifier: Apache-2.0
"""make_rope_configs.py - config.json variants and transformers' RoPE inverse frequencies.

Writes tests/data/config/<case>/config.json and <case>/inv_freq.f32 (float32, head_dim/2
values from transformers' rope initialisers, i.e. LlamaRotaryEmbedding(config).inv_freq),
for test_checkpoint.c's model_config tests:

  llama_default_v5    LlamaConfig saved by transformers 5 (rope_parameters form), theta 5e5
  llama_linear        classic form: rope_scaling {"type": "linear", "factor": 4.0}
  llama3_classic      Llama-3.1-8B's published config.json shape (rope_scaling llama3)
  llama3_v5           the same model re-saved by transformers 5 (rope_parameters llama3)
  mistral             Mistral-7B-v0.1 shape: sliding_window 4096
  qwen2               Qwen2-0.5B shape: tied, qkv bias, use_sliding_window false

and tests/data/config/llama3_factors.gguf: llama.* metadata of llama3_classic plus the
tensor rope_freqs.weight computed exactly as llama.cpp's convert_hf_to_gguf.py does for
Llama 3.1 (its expected inv_freq is llama3_classic's).

Every hand-written config is loaded back with AutoConfig so transformers accepts it.
Run once by hand: /tmp/refenv/bin/python tests/ref/make_rope_configs.py
"""
import json
import math
import os

import numpy as np
import torch
from gguf import GGUFWriter
from transformers import AutoConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "config")

LLAMA31 = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256,
}
LINEAR = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 32000,
    "max_position_embeddings": 16384, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "rope_scaling": {"type": "linear", "factor": 4.0}, "hidden_act": "silu",
    "tie_word_embeddings": False,
}
MISTRAL = {
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "vocab_size": 32000,
}
QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
    "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}


def inv_freq(cfg):
    cls = Qwen2RotaryEmbedding if cfg.model_type == "qwen2" else LlamaRotaryEmbedding
    return cls(cfg).inv_freq.to(torch.float32).numpy()


def write_case(name, cfg_dict=None, cfg=None):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    if cfg_dict is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg_dict, f, indent=2)
        cfg = AutoConfig.from_pretrained(d)
    else:
        cfg.save_pretrained(d)
        cfg = AutoConfig.from_pretrained(d)
    inv = inv_freq(cfg)
    inv.astype("<f4").tofile(os.path.join(d, "inv_freq.f32"))
    return cfg, inv


def llama3_factors_gguf(path, c):
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors for rope_type llama3."""
    rs = c["rope_scaling"]
    base, dim = c["rope_theta"], c["hidden_size"] // c["num_attention_heads"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high, old = (rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"],
                              rs["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old / low, old / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    w = GGUFWriter(path, "llama")
    w.add_uint32("llama.block_count", c["num_hidden_layers"])
    w.add_uint32("llama.context_length", c["max_position_embeddings"])
    w.add_uint32("llama.embedding_length", c["hidden_size"])
    w.add_uint32("llama.feed_forward_length", c["intermediate_size"])
    w.add_uint32("llama.attention.head_count", c["num_attention_heads"])
    w.add_uint32("llama.attention.head_count_kv", c["num_key_value_heads"])
    w.add_float32("llama.rope.freq_base", c["rope_theta"])
    w.add_float32("llama.attention.layer_norm_rms_epsilon", c["rms_norm_eps"])
    w.add_uint32("llama.rope.dimension_count", dim)
    w.add_uint32("llama.vocab_size", c["vocab_size"])
    w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    from transformers import LlamaConfig
    write_case("llama_default_v5", cfg=LlamaConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}))
    write_case("llama_linear", LINEAR)
    cfg31, inv31 = write_case("llama3_classic", LLAMA31)
    _, inv31b = write_case("llama3_v5", cfg=cfg31)
    assert np.array_equal(inv31, inv31b)
    write_case("mistral", MISTRAL)
    write_case("qwen2", QWEN2)
    llama3_factors_gguf(os.path.join(OUT, "llama3_factors.gguf"), LLAMA31)
    for root, _, files in os.walk(OUT):
        for n in sorted(files):
            print(os.path.relpath(os.path.join(root, n), OUT), os.path.getsize(os.path.join(root, n)))
    print(json.load(open(os.path.join(OUT, "llama3_v5", "config.json")))["rope_parameters"])


if __name__ == "__main__":
    main()
