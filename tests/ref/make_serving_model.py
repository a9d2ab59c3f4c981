# SPDX-License-Identifier: Apache-2.0
"""make_serving_model.py - a tiny servable model: random Llama weights + a real tokenizer.

Writes tests/data/tiny-chat/: the byte-level BPE tokenizer of
tests/data/tokenizer/hf_qwen2_nfc (1,000 tokens + 5 added, NFC normalizer, ChatML special
tokens) with a ChatML chat template, and a random LlamaForCausalLM sized to its vocabulary
(hidden 64, 4/2 heads x 16, 2 layers, 4,096-token context, tied, F32). Its text is
gibberish, but it is deterministic and a forward pass takes well under a millisecond, so
the router/worker integration tests can run hundreds of requests through real processes.

Run once by hand: /tmp/refenv/bin/python tests/ref/make_serving_model.py
"""
import json
import os
import shutil

import torch
from transformers import LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "data", "tokenizer", "hf_qwen2_nfc")
OUT = os.path.join(HERE, "..", "data", "tiny-chat")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    tok = json.load(open(os.path.join(SRC, "tokenizer.json")))
    vocab = max(max(tok["model"]["vocab"].values()), max(a["id"] for a in tok["added_tokens"])) + 1
    ids = {a["content"]: a["id"] for a in tok["added_tokens"]}
    shutil.copy(os.path.join(SRC, "tokenizer.json"), OUT)
    cfg_tok = json.load(open(os.path.join(SRC, "tokenizer_config.json")))
    cfg_tok["chat_template"] = CHATML
    json.dump(cfg_tok, open(os.path.join(OUT, "tokenizer_config.json"), "w"), indent=1)

    torch.manual_seed(20261122)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=vocab,
                      max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
                      tie_word_embeddings=True, bos_token_id=None,
                      eos_token_id=ids["<|im_end|>"])
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if "norm" in name else 0.15 * torch.randn_like(p))
    model.save_pretrained(OUT, safe_serialization=True)
    json.dump({"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]]},
              open(os.path.join(OUT, "generation_config.json"), "w"), indent=1)
    print("vocab", vocab, "eos", ids["<|im_end|>"])


if __name__ == "__main__":
    main()
