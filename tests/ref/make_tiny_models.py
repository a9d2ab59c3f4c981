# SPDX-License-Identifier: Apache-2.0
"""make_tiny_models.py - tiny random-weight models for every architecture feature, and their
reference logits.

Writes tests/data/tiny/:
  <name>/            Hugging Face checkpoint written by transformers' save_pretrained
                     (config.json, generation_config.json, model.safetensors or shards +
                     model.safetensors.index.json)
  <name>[-qtype].gguf  GGUF files written with gguf-py's GGUFWriter the way llama.cpp's
                     convert_hf_to_gguf.py writes them (tensor names, Q/K permutation for the
                     llama arch, metadata keys, rope_freqs for llama3 rope scaling, tensor
                     types per outtype); Q4_1 mirrors llama-quantize's layout for SmolLM2
                     (token_embd Q8_0, other matrices Q4_1)
  <name>.logits.f32  raw little-endian float32, (seq_len, vocab) logits at every position
  reference.json     models, their features, input ids, greedy continuations, the
                     GGUF-vs-safetensors agreement measured here

The reference is transformers in float32 (eager attention) on the checkpoint as saved: a
BF16/F16 directory is loaded back from disk and upcast to float32. A GGUF holding exactly
the directory's weights (F32, F16 or BF16 of weights already representable in that type)
shares the directory's logits file; a quantized GGUF gets its own, computed by transformers
from the GGUF itself.

Run: /tmp/refenv/bin/python tests/ref/make_tiny_models.py [--out DIR]
Deterministic: fixed seeds, same files on every run with the same versions.
"""
import argparse
import copy
import json
import math
import os
import platform
import shutil

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF reader progress bars
import torch  # noqa: E402

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter, LlamaFileType

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_GREEDY = 8
MIN_MARGIN = 0.02  # smallest top-1 minus top-2 logit allowed in a greedy step

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}

# config_format: "v5" = config.json exactly as transformers 5 saves it (rope_parameters);
# "legacy" = rewritten to the transformers 4 layout most hub checkpoints still have
# (top-level rope_theta, rope_scaling, torch_dtype), and read back by transformers to check
# it means the same model.
SPECS = [
    dict(name="llama-gqa", cls="llama", seed=101, vocab=128, hidden=64, heads=8, kv=2,
         head_dim=8, layers=2, ff=96, tied=True, theta=10000.0, rope=None, eps=1e-5,
         max_pos=128, dtype="float32", seq=32, config_format="v5",
         features=["GQA ratio 4", "tied embeddings", "no rope scaling"]),
    dict(name="llama3-mqa", cls="llama", seed=202, vocab=160, hidden=64, heads=4, kv=1,
         head_dim=16, layers=2, ff=128, tied=False, theta=50000.0, rope=LLAMA3_ROPE,
         eps=1e-5, max_pos=256, dtype="float32", seq=40, config_format="legacy",
         features=["MQA (1 kv head)", "untied lm_head",
                   "llama3 rope scaling, original_max_position_embeddings 32: dim pair 0 "
                   "high-freq (kept), pair 1 smoothed, pairs 2..7 low-freq (divided by 8)",
                   "legacy config.json (rope_theta + rope_scaling)"]),
    dict(name="llama-mha-linear", cls="llama", seed=303, vocab=128, hidden=48, heads=4, kv=4,
         head_dim=16, layers=3, ff=80, tied=False, theta=10000.0,
         rope={"rope_type": "linear", "factor": 2.0}, eps=1e-6, max_pos=64,
         dtype="bfloat16", seq=36, config_format="v5", shard="40KB",
         features=["MHA", "head_dim 16 * 4 heads = 64 != hidden 48", "linear rope factor 2",
                   "BF16 safetensors", "sharded with model.safetensors.index.json",
                   "3 layers", "untied lm_head"]),
    dict(name="qwen2-bias", cls="qwen2", seed=404, vocab=144, hidden=64, heads=4, kv=2,
         head_dim=16, layers=2, ff=96, tied=True, theta=1000000.0, rope=None, eps=1e-6,
         max_pos=512, dtype="float16", seq=28, config_format="legacy",
         features=["Qwen2 qkv bias (non-zero)", "GQA ratio 2", "tied embeddings",
                   "F16 safetensors", "legacy config.json with sliding_window 8 but "
                   "use_sliding_window false (as Qwen2.5 ships): NO window applies"]),
    dict(name="mistral-swa", cls="mistral", seed=505, vocab=128, hidden=64, heads=4, kv=2,
         head_dim=16, layers=2, ff=96, tied=False, theta=10000.0, rope=None, eps=1e-5,
         max_pos=256, dtype="float32", seq=24, config_format="v5", window=8,
         features=["Mistral sliding window 8 over a 24-token sequence", "GQA ratio 2",
                   "untied lm_head"]),
]

# GGUF files: (file, source model, outtype). "auto" = convert_hf_to_gguf's default for the
# checkpoint's dtype (bf16 -> BF16, f16 -> F16).
GGUFS = [
    ("llama-gqa.gguf", "llama-gqa", "f32"),
    ("llama-gqa-q8_0.gguf", "llama-gqa", "q8_0"),
    ("llama-gqa-q4_1.gguf", "llama-gqa", "q4_1"),
    ("llama3-mqa.gguf", "llama3-mqa", "f32"),
    ("llama-mha-linear-bf16.gguf", "llama-mha-linear", "bf16"),
    ("qwen2-bias.gguf", "qwen2-bias", "f32"),
    ("qwen2-bias-f16.gguf", "qwen2-bias", "f16"),
]
FTYPES = {"f32": LlamaFileType.ALL_F32, "f16": LlamaFileType.MOSTLY_F16,
          "bf16": LlamaFileType.MOSTLY_BF16, "q8_0": LlamaFileType.MOSTLY_Q8_0,
          "q4_1": LlamaFileType.MOSTLY_Q4_1}
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ---------------------------------------------------------------- models

def hf_config(s):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config
    rope = {"rope_theta": s["theta"], "rope_type": "default"}
    if s["rope"]:
        rope = {"rope_theta": s["theta"], **s["rope"]}
    common = dict(vocab_size=s["vocab"], hidden_size=s["hidden"], intermediate_size=s["ff"],
                  num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                  num_key_value_heads=s["kv"], max_position_embeddings=s["max_pos"],
                  rms_norm_eps=s["eps"], tie_word_embeddings=s["tied"], rope_parameters=rope,
                  bos_token_id=1, eos_token_id=2)
    if s["cls"] == "llama":
        return LlamaConfig(head_dim=s["head_dim"], **common)
    if s["cls"] == "mistral":
        return MistralConfig(head_dim=s["head_dim"], sliding_window=s.get("window"), **common)
    assert s["head_dim"] * s["heads"] == s["hidden"]  # Qwen2 has no head_dim setting
    return Qwen2Config(use_sliding_window=False, **common)


def model_class(cls):
    from transformers import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
    return {"llama": LlamaForCausalLM, "mistral": MistralForCausalLM,
            "qwen2": Qwen2ForCausalLM}[cls]


def init_weights(model, s):
    """Deterministic weights large enough that logits spread and positions matter."""
    g = torch.Generator().manual_seed(s["seed"])
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            n = torch.randn(p.shape, generator=g)
            if name.endswith("norm.weight"):
                v = 1.0 + 0.15 * n
            elif name.endswith("embed_tokens.weight"):
                v = 0.5 * n
            elif name == "lm_head.weight":
                v = 3.0 * n / math.sqrt(p.shape[1])
            elif name.endswith(".bias"):
                v = 0.5 * n
            else:  # (out, in) linear weights
                v = 1.6 * n / math.sqrt(p.shape[1])
            p.copy_(v)


def legacy_config(path, s):
    """Rewrite config.json in the transformers 4 layout (see SPECS)."""
    with open(path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters")
    out = {}
    for k, v in c.items():
        if k == "dtype":
            out["torch_dtype"] = v
        elif k == "layer_types":
            continue
        else:
            out[k] = v
    out["rope_theta"] = rp["rope_theta"]
    scaling = {k: v for k, v in rp.items() if k != "rope_theta"}
    out["rope_scaling"] = None if scaling.get("rope_type") == "default" else scaling
    if s["cls"] == "qwen2":
        out.update(sliding_window=8, use_sliding_window=False, max_window_layers=28)
    with open(path, "w") as f:
        json.dump(dict(sorted(out.items())), f, indent=2)
        f.write("\n")


def load_dir(path):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                             attn_implementation="eager")
    return m.eval()


def load_gguf(dirname, fname):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(dirname, gguf_file=fname, dtype=torch.float32,
                                             attn_implementation="eager")
    return m.eval()


@torch.no_grad()
def all_logits(model, ids):
    return model(torch.tensor([ids]), use_cache=False).logits[0].float()


@torch.no_grad()
def greedy(model, ids, n):
    """n greedy tokens using the KV cache, checked against one uncached pass."""
    out = model(torch.tensor([ids]), use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1]
    toks, margins = [], []
    for i in range(n):
        top = torch.topk(logits, 2)
        toks.append(int(top.indices[0]))
        margins.append(round(float(top.values[0] - top.values[1]), 6))
        if i + 1 < n:
            out = model(torch.tensor([[toks[-1]]]), past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[0, -1]
    full = all_logits(model, ids + toks)[len(ids) - 1:-1].argmax(-1).tolist()
    assert full == toks, f"cached greedy {toks} != uncached {full}"
    return toks, margins


# ---------------------------------------------------------------- GGUF

GGUF_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    assert parts[:2] == ["model", "layers"], hf
    return f"blk.{parts[2]}.{GGUF_NAMES['.'.join(parts[3:])]}"


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute: rotate-half -> interleaved row order."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(theta, dim, rope):
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors: per-pair frequency divisors."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    lo_wl, hi_wl = old / lo, old / hi
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < hi_wl:
            out.append(1)
        elif wl > lo_wl:
            out.append(factor)
        else:
            smooth = (old / wl - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def minimal_vocab(n):
    """A small valid byte-level BPE vocabulary of exactly n tokens (the tests feed ids; this
    is only so the file carries the tokenizer metadata every real GGUF has):
    0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|> (control), byte-level printable ASCII,
    space (G-dot) and newline (C-dot), tokens made by a few merges, then [PADi] (unused)."""
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [gguf.TokenType.CONTROL] * 3
    tokens += ["\u0120", "\u010a"] + [chr(c) for c in range(0x21, 0x7f)]
    types += [gguf.TokenType.NORMAL] * (len(tokens) - 3)
    pairs = [("\u0120", "t"), ("h", "e"), ("i", "n"), ("\u0120", "a"), ("e", "r"),
             ("o", "n"), ("r", "e"), ("\u0120t", "he"), ("\u0120", "s"), ("a", "t"),
             ("e", "n"), ("\u0120", "o"), ("\u0120", "w"), ("o", "u"), ("e", "s"),
             ("i", "s"), ("\u0120", "c"), ("in", "g"), ("\u0120", "b"), ("o", "r"),
             ("a", "n"), ("\u0120", "i"), ("\u0120", "f"), ("l", "l"), ("\u0120", "p"),
             ("a", "r"), ("e", "d"), ("\u0120", "m"), ("i", "t"), ("\u0120", "d")]
    merges = []
    for a, b in pairs:
        if len(tokens) == n:
            break
        assert a in tokens and b in tokens
        merges.append(f"{a} {b}")
        tokens.append(a + b)
        types.append(gguf.TokenType.NORMAL)
    while len(tokens) < n:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(gguf.TokenType.UNUSED)
    assert len(tokens) == n and len(set(tokens)) == n
    return tokens, types, merges


def tensor_qtype(gname, data, outtype):
    """convert_hf_to_gguf.py prepare_tensors: 1-D and *_norm.weight stay F32; matrices
    take the outtype; Q8_0 falls back to F16 when a row is not whole blocks. q4_1 is
    llama-quantize's layout for the test model (token_embd Q8_0)."""
    if data.ndim <= 1 or gname.endswith("_norm.weight") or not gname.endswith(".weight"):
        return QT.F32
    if outtype == "q4_1":
        qt = QT.Q8_0 if gname == "token_embd.weight" else QT.Q4_1
    else:
        qt = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0}[outtype]
    block = gguf.GGML_QUANT_SIZES[qt][0]
    if data.shape[-1] % block != 0:
        return QT.F16
    return qt


def write_gguf(path, name, model_dir, outtype):
    """Write the checkpoint in model_dir as convert_hf_to_gguf.py would (see module doc)."""
    from safetensors.torch import load_file
    with open(os.path.join(model_dir, "config.json")) as f:
        hp = json.load(f)
    arch = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2"}[hp["model_type"]]
    # rope parameters in either config layout
    rp = hp.get("rope_parameters") or dict(hp.get("rope_scaling") or {},
                                           rope_theta=hp.get("rope_theta", 10000.0))
    rope_type = rp.get("rope_type", rp.get("type", "default"))
    n_head, n_kv = hp["num_attention_heads"], hp["num_key_value_heads"]
    head_dim = hp.get("head_dim") or hp["hidden_size"] // n_head

    state = {}
    for fn in sorted(os.listdir(model_dir)):
        if fn.endswith(".safetensors"):
            state.update(load_file(os.path.join(model_dir, fn)))

    w = GGUFWriter(path, arch)
    w.add_type("model")
    w.add_name(name)
    w.add_block_count(hp["num_hidden_layers"])
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    if rope_type == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rp["factor"])
    else:
        assert rope_type in ("default", "llama3"), rope_type  # llama3: rope_freqs below
    w.add_rope_freq_base(rp["rope_theta"])
    w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    if hp.get("head_dim") is not None:
        w.add_key_length(hp["head_dim"])
        w.add_value_length(hp["head_dim"])
    w.add_file_type(FTYPES[outtype])
    if arch == "llama":  # LlamaModel.set_gguf_parameters; Qwen2Model writes neither
        w.add_vocab_size(hp["vocab_size"])
        w.add_rope_dimension_count(head_dim)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    tokens, types, merges = minimal_vocab(hp["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(0)
    w.add_add_bos_token(False)

    types_written = {}
    if arch == "llama" and rope_type == "llama3":
        rf = llama3_rope_factors(rp["rope_theta"], head_dim, rp)
        w.add_tensor("rope_freqs.weight", rf)
        types_written["rope_freqs.weight"] = "F32"
    for hf in sorted(state, key=tensor_order):
        data = state[hf].float()
        if arch == "llama" and hf.endswith(("q_proj.weight", "q_proj.bias")):
            data = permute(data, n_head, n_head)
        if arch == "llama" and hf.endswith(("k_proj.weight", "k_proj.bias")):
            data = permute(data, n_head, n_kv)
        data = data.numpy().astype(np.float32)
        gname = gguf_name(hf)
        qt = tensor_qtype(gname, data, outtype)
        if qt == QT.F32:
            w.add_tensor(gname, data)
        else:
            w.add_tensor(gname, gguf.quants.quantize(data, qt), raw_dtype=qt)
        types_written[gname] = qt.name
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types_written


def tensor_order(hf):
    """token_embd, then layers in order, then output_norm, output (as llama.cpp lists them)."""
    if hf == "model.embed_tokens.weight":
        return (0, 0, hf)
    if hf.startswith("model.layers."):
        return (1, int(hf.split(".")[2]), hf)
    return (2, 0 if hf == "model.norm.weight" else 1, hf)


# ---------------------------------------------------------------- checks

def check_spread(name, logits):
    """Logits must not be ~0, and positions must matter."""
    std = float(logits.std())
    pmax = float(torch.softmax(logits, -1).max(-1).values.mean())
    argmax_distinct = len(set(logits.argmax(-1).tolist()))
    print(f"  {name}: logits std {std:.2f}, mean top prob {pmax:.2f}, "
          f"{argmax_distinct} distinct argmaxes over {logits.shape[0]} positions")
    assert std > 1.0 and pmax < 0.95 and argmax_distinct >= 4, name


def check_gguf_config(fname, got, want):
    """transformers' reading of the GGUF metadata must give the checkpoint's hyperparameters
    (rope scaling aside: transformers does not read it from GGUF for llama)."""
    for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
              "num_key_value_heads", "vocab_size", "max_position_embeddings",
              "tie_word_embeddings"):
        assert getattr(got, k) == getattr(want, k), (fname, k, getattr(got, k), getattr(want, k))
    if got.model_type == "llama":
        assert got.head_dim == want.head_dim, (fname, got.head_dim, want.head_dim)
    assert abs(got.rms_norm_eps - want.rms_norm_eps) < 1e-6 * want.rms_norm_eps * 10
    assert got.rope_parameters["rope_theta"] == want.rope_parameters["rope_theta"]
    if want.rope_parameters.get("rope_type", "default") != "default":
        print(f"  transformers' config from the GGUF: rope_parameters {dict(got.rope_parameters)}")


def max_diff(a, b):
    return float((a - b).abs().max())


def versions():
    import safetensors
    import transformers
    from importlib.metadata import version
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "gguf": version("gguf"),
            "safetensors": safetensors.__version__, "numpy": np.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "tiny"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    out = args.out
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)

    entries, by_name = [], {}
    for s in SPECS:
        name = s["name"]
        print(f"[{name}]")
        torch.manual_seed(s["seed"])
        cfg = hf_config(s)
        model = model_class(s["cls"])(cfg)
        init_weights(model, s)
        dt = TORCH_DTYPES[s["dtype"]]
        with torch.no_grad():  # round to the saved dtype, keep computing in float32
            for p in model.parameters():
                p.copy_(p.to(dt).float())
        mdir = os.path.join(out, name)
        kw = {"max_shard_size": s["shard"]} if "shard" in s else {}
        # (a copy: .to(dtype) would also round the in-memory model's rope inv_freq buffer)
        copy.deepcopy(model).to(dt).save_pretrained(mdir, **kw)
        if s["config_format"] == "legacy":
            legacy_config(os.path.join(mdir, "config.json"), s)
        if "shard" in s:
            shards = [f for f in os.listdir(mdir) if f.endswith(".safetensors")]
            assert len(shards) >= 2 and os.path.exists(
                os.path.join(mdir, "model.safetensors.index.json")), shards
            print(f"  {len(shards)} shards")

        # the reference: the checkpoint as saved, read back, float32 compute
        ref = load_dir(mdir)
        mem = model.float().eval()
        mem.config._attn_implementation = "eager"
        rc = ref.config
        expect_rope = {"rope_theta": s["theta"], **(s["rope"] or {"rope_type": "default"})}
        got_rope = {k: v for k, v in dict(rc.rope_parameters).items() if k in expect_rope}
        assert got_rope == expect_rope, (got_rope, expect_rope)
        assert (getattr(rc, "sliding_window", None) or None) == s.get("window"), \
            rc.sliding_window
        # random ids; redrawn (deterministically) while a greedy step is a near-tie, so that
        # implementations differing by float rounding still agree on the continuation
        rng = np.random.default_rng(s["seed"])
        for _ in range(50):
            ids = [int(x) for x in rng.integers(0, s["vocab"], size=s["seq"])]
            g, margins = greedy(ref, ids, N_GREEDY)
            if min(margins) >= MIN_MARGIN:
                break
        else:
            raise SystemExit(f"{name}: no sequence without a greedy near-tie")
        logits = all_logits(ref, ids)
        d_mem = max_diff(logits, all_logits(mem, ids))
        print(f"  reloaded-from-disk vs in-memory model: max |dlogit| {d_mem:.2e}")
        assert d_mem < 1e-5, d_mem
        check_spread(name, logits)

        extra = {}
        if s["cls"] == "mistral":
            # the window must really apply: same weights without it differ at late positions
            nowin = copy.deepcopy(ref)
            nowin.config.sliding_window = None
            for layer in nowin.model.layers:
                layer.self_attn.sliding_window = None
            full = all_logits(nowin, ids)
            per_pos = (full - logits).abs().amax(-1)
            first = int((per_pos > 1e-6).nonzero()[0])
            print(f"  no-window vs window: first differing position {first}, "
                  f"max |dlogit| {float(per_pos.max()):.3f}")
            assert first == s["window"], first  # query q sees keys k with q - k < window
            sdpa = model_class(s["cls"]).from_pretrained(
                mdir, dtype=torch.float32, attn_implementation="sdpa").eval()
            d_sdpa = max_diff(all_logits(sdpa, ids), logits)
            print(f"  sdpa vs eager: {d_sdpa:.2e}")
            assert d_sdpa < 1e-4
            extra = {"sliding_window_semantics":
                     "query at position q attends to keys at positions k with "
                     "q - window < k <= q (window keys including itself)",
                     "first_position_window_matters": first,
                     "max_abs_diff_vs_no_window": round(float(per_pos.max()), 4)}
        if s["cls"] == "qwen2":
            # the legacy sliding_window field must be ignored (use_sliding_window false)
            assert rc.sliding_window is None
            extra = {"sliding_window_note": "config.json has sliding_window 8 with "
                     "use_sliding_window false: full attention"}

        lfile = f"{name}.logits.f32"
        logits.numpy().astype("<f4").tofile(os.path.join(out, lfile))
        e = {"name": name, "path": name, "arch": {"llama": "LlamaForCausalLM",
                                                  "mistral": "MistralForCausalLM",
                                                  "qwen2": "Qwen2ForCausalLM"}[s["cls"]],
             "dtype": {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}[s["dtype"]],
             "config_format": s["config_format"], "features": s["features"],
             "config": {"n_layers": s["layers"], "d_model": s["hidden"], "n_heads": s["heads"],
                        "n_kv_heads": s["kv"], "head_dim": s["head_dim"], "d_ff": s["ff"],
                        "vocab_size": s["vocab"], "max_seq_len": s["max_pos"],
                        "norm_eps": s["eps"], "rope_theta": s["theta"],
                        "rope_scaling": s["rope"], "sliding_window": s.get("window"),
                        "tied_embeddings": s["tied"], "qkv_bias": s["cls"] == "qwen2"},
             "input_ids": ids, "logits_file": lfile, "vocab_size": s["vocab"],
             "greedy": g, "greedy_margins": margins, "same_weights_as": None, **extra}
        entries.append(e)
        by_name[name] = (s, ref, logits, ids)

    for fname, src, outtype in GGUFS:
        s, ref, logits, ids = by_name[src]
        print(f"[{fname}]")
        types = write_gguf(os.path.join(out, fname), fname[:-len(".gguf")],
                           os.path.join(out, src), outtype)
        counts = {}
        for t in types.values():
            counts[t] = counts.get(t, 0) + 1
        m = load_gguf(out, fname)
        check_gguf_config(fname, m.config, ref.config)
        hf_sd, g_sd = ref.state_dict(), m.state_dict()
        assert set(hf_sd) == set(g_sd), set(hf_sd) ^ set(g_sd)
        w_diff = max(max_diff(hf_sd[k], g_sd[k]) for k in hf_sd)
        exact = outtype in ("f32", "f16", "bf16")
        notes = []
        glog = all_logits(m, ids)
        rope_ok = s["rope"] is None
        if not rope_ok:
            # transformers' GGUF reader ignores rope scaling (keys and rope_freqs), so its
            # own model from this file lacks the scaling; run the GGUF's weights under the
            # checkpoint's config instead, and check rope_freqs against transformers' own
            # llama3 frequencies.
            plain = max_diff(glog, logits)
            fixed = copy.deepcopy(ref)
            fixed.load_state_dict(g_sd)
            glog = all_logits(fixed, ids)
            notes.append(f"transformers loads the weights but not the rope scaling from "
                         f"GGUF (its own logits differ by {plain:.3f}); compared with the "
                         f"GGUF's weights under the checkpoint's config")
            if s["rope"]["rope_type"] == "llama3":
                from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
                scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](ref.config, "cpu")
                dim = s["head_dim"]
                base = 1.0 / (s["theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
                rf = torch.from_numpy(llama3_rope_factors(s["theta"], dim, s["rope"]))
                d_rf = float(((base / rf) / scaled - 1).abs().max())
                notes.append(f"rope_freqs = {rf.tolist()}; base_freq / rope_freqs matches "
                             f"transformers' llama3 inv_freq to rel {d_rf:.1e}")
                assert d_rf < 1e-6, d_rf
        d = max_diff(glog, logits)
        print(f"  tensors {counts}; weights max |dw| {w_diff:.2e}; "
              f"logits vs {src} max |dlogit| {d:.2e}")
        for n in notes:
            print("  " + n)
        if exact:
            assert w_diff == 0.0 and d < 1e-5, (w_diff, d)
            lfile, same = f"{src}.logits.f32", src
            src_entry = entries[[x["name"] for x in entries].index(src)]
            g, margins = src_entry["greedy"], src_entry["greedy_margins"]
        else:
            # quantized: the reference is transformers' model read from this GGUF
            assert s["rope"] is None
            lfile, same = fname[:-len(".gguf")] + ".logits.f32", None
            glog.numpy().astype("<f4").tofile(os.path.join(out, lfile))
            check_spread(fname, glog)
            g, margins = greedy(m, ids, N_GREEDY)
            assert min(margins) >= MIN_MARGIN, (fname, margins)
        e = {"name": fname, "path": fname,
             "arch": "llama" if s["cls"] != "qwen2" else "qwen2",
             "dtype": outtype.upper(), "tensor_types": counts,
             "config": entries[[x["name"] for x in entries].index(src)]["config"],
             "input_ids": ids, "logits_file": lfile, "vocab_size": s["vocab"],
             "greedy": g, "greedy_margins": margins, "same_weights_as": same,
             "check": {"source": src, "max_abs_weight_diff": w_diff,
                       "max_abs_logit_diff_vs_source": d, "notes": notes}}
        entries.append(e)

    ref_json = {
        "generator": "tests/ref/make_tiny_models.py",
        "versions": versions(),
        "notes": "logits files: raw little-endian float32, (len(input_ids), vocab_size), "
                 "logits at every position; transformers float32 eager attention; greedy = "
                 "argmax with the KV cache, EOS does not stop. GGUF Q/K rows are permuted "
                 "as convert_hf_to_gguf.py does for the llama arch (not for qwen2).",
        "models": entries,
    }
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref_json, f, indent=1)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
