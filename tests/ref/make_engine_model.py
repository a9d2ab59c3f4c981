# SPDX-License-Identifier: Apache-2.0
"""make_engine_model.py - a small random Llama with a long context, for the engine tests.

Writes tests/data/engine-llama/ (config.json, generation_config.json, model.safetensors):
hidden 64, 4 heads / 2 kv heads (head_dim 16), 2 layers, intermediate 128, vocab 256,
max_position_embeddings 4096, tied embeddings, F32. Weights are drawn with a fixed seed
and a spread large enough that greedy decoding follows the logits rather than ties.

The engine tests compare the engine against itself (a request batched with others vs the
same request alone, with and without preemption and prefix caching), so no reference
logits are stored; the forward pass itself is checked against transformers elsewhere.

Run once by hand: /tmp/refenv/bin/python tests/ref/make_engine_model.py
"""
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "engine-llama")


def main():
    torch.manual_seed(20261121)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      vocab_size=256, max_position_embeddings=4096, rms_norm_eps=1e-5,
                      rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1,
                      eos_token_id=2)
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    model.save_pretrained(OUT, safe_serialization=True)
    ids = torch.randint(3, 256, (1, 40))
    print("sample greedy:", model.generate(ids, max_new_tokens=16, do_sample=False)[0, 40:].tolist())


if __name__ == "__main__":
    main()
