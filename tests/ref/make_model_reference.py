# SPDX-License-Identifier: Apache-2.0
"""make_model_reference.py - reference logits and greedy continuations for the test model.

Writes tests/data/smollm2/:
  reference.json     prompts, their token ids, 32-token greedy continuations (EOS does not
                     stop them) and the top-1 minus top-2 logit margin of every greedy step
  logits.f32         raw little-endian float32, row i = prompt i's last-position logits
                     (vocab_size floats per row)
  logits_all_p0.f32  raw little-endian float32, prompt 0's logits at every position
                     (n_ids rows of vocab_size floats)

The outside implementation is transformers' LlamaForCausalLM read from the GGUF and
dequantized to float32 (smollm2_hf.load_model), computing in float32 on the CPU; token ids
come from smollm2_hf.load_tokenizer (no BOS is added for this model).

Run: /tmp/refenv/bin/python tests/ref/make_model_reference.py [--out DIR]
"""
import argparse
import hashlib
import json
import os
import platform
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smollm2_hf  # noqa: E402

N_GREEDY = 32
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PARAGRAPH = (
    "The history of the printing press begins in the middle of the fifteenth century, when "
    "Johannes Gutenberg, a goldsmith from Mainz, combined several existing technologies into "
    "a single practical system. Movable type had been used in East Asia for centuries, but "
    "Gutenberg's hand mould made it possible to cast large numbers of uniform metal letters "
    "quickly and cheaply. He paired these letters with an oil-based ink that clung to metal, "
    "and with a screw press adapted from those used to make wine and paper. The result was a "
    "machine that could produce hundreds of identical pages a day. Within fifty years, "
    "printing shops had spread to more than two hundred cities across Europe, and millions "
    "of books were in circulation. Prices fell, literacy rose, and ideas travelled faster "
    "than ever before. Scholars could compare identical copies of a text, which encouraged "
    "careful editing and the growth of science. In short, the printing press"
)

# Prompt 0 is short (<= 24 ids) because its logits are stored at every position.
PROMPTS = [
    ("continue_capitals", "The capital of France is Paris. The capital of Germany is"),
    ("question", "What is the capital of France?"),
    ("chat", "<|im_start|>user\nWhat are three tips for staying healthy?<|im_end|>\n"
             "<|im_start|>assistant\n"),
    ("chat_system", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
                    "trained by Hugging Face<|im_end|>\n<|im_start|>user\nWrite a haiku about "
                    "the sea.<|im_end|>\n<|im_start|>assistant\n"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("list", "Shopping list:\n1. Eggs\n2. Milk\n3."),
    ("paragraph", PARAGRAPH),
    ("single_token", "Once"),
    ("french", "La capitale de la France est"),
    ("german_cjk", "Der schnelle braune Fuchs springt über den faulen Hund. 日本の首都は"),
    ("numbers", "1, 1, 2, 3, 5, 8, 13, 21, 34,"),
    ("arithmetic", "Q: What is 123 + 456?\nA: 123 + 456 ="),
    ("whitespace", "    indented line\n\n\ttab\tseparated  double  spaces\n"),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions():
    import gguf  # noqa: F401
    import tokenizers
    import transformers
    from importlib.metadata import version
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "gguf": version("gguf"), "accelerate": version("accelerate"),
            "numpy": np.__version__}


def top2_margin(logits):
    top = torch.topk(logits, 2)
    return int(top.indices[0]), float(top.values[0] - top.values[1])


@torch.no_grad()
def greedy(model, ids, n):
    """n greedy tokens with the KV cache; EOS does not stop. Returns (tokens, margins)."""
    out = model(torch.tensor([ids]), use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1]
    toks, margins = [], []
    for i in range(n):
        t, m = top2_margin(logits)
        toks.append(t)
        margins.append(m)
        if i + 1 == n:
            break
        out = model(torch.tensor([[t]]), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return toks, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "smollm2"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    path = smollm2_hf.model_path()
    digest = sha256(path)
    if digest != smollm2_hf.MODEL_SHA256:
        raise SystemExit(f"{path}: sha256 {digest}, expected {smollm2_hf.MODEL_SHA256}")
    tok = smollm2_hf.load_tokenizer(path)
    model = smollm2_hf.load_model(path)
    vocab = model.config.vocab_size
    eos = model.config.eos_token_id

    os.makedirs(args.out, exist_ok=True)
    rows, entries = [], []
    with torch.no_grad():
        for i, (name, text) in enumerate(PROMPTS):
            ids = tok.encode(text).ids
            assert ids, name
            if name == "single_token":
                assert len(ids) == 1, (name, ids)
            logits = model(torch.tensor([ids]), use_cache=False).logits[0].float()  # (n, vocab)
            assert logits.shape == (len(ids), vocab)
            if i == 0:
                assert len(ids) <= 24, len(ids)
                logits.numpy().astype("<f4").tofile(os.path.join(args.out, "logits_all_p0.f32"))
            rows.append(logits[-1].numpy().astype("<f4"))
            g, margins = greedy(model, ids, N_GREEDY)
            # The cached loop must agree with one uncached pass over prompt + continuation.
            full = model(torch.tensor([ids + g]), use_cache=False).logits[0]
            check = full[len(ids) - 1:-1].argmax(-1).tolist()
            bad = [k for k in range(N_GREEDY) if check[k] != g[k]]
            if bad:
                print(f"  warning: {name}: cached/uncached argmax differ at steps {bad} "
                      f"(margins {[round(margins[k], 5) for k in bad]})")
            max_dlast = float((full[len(ids) - 1] - logits[-1]).abs().max())
            entries.append({"name": name, "text": text, "ids": ids, "greedy": g,
                            "greedy_margins": [round(m, 6) for m in margins]})
            low = [(k, round(m, 4)) for k, m in enumerate(margins) if m < 0.05]
            print(f"[{i}] {name}: {len(ids)} ids, min margin {min(margins):.4f}"
                  f"{' near-ties ' + str(low) if low else ''}, eos in greedy: {eos in g}, "
                  f"prefill-vs-full max diff {max_dlast:.2e}")
            print("    " + repr(tok.decode(g, skip_special_tokens=False)))

    np.stack(rows).astype("<f4").tofile(os.path.join(args.out, "logits.f32"))
    ref = {
        "generator": "tests/ref/make_model_reference.py",
        "model_file": smollm2_hf.MODEL_FILE,
        "model_sha256": digest,
        "versions": versions(),
        "vocab_size": vocab,
        "bos_added": False,
        "eos_token_id": eos,
        "n_greedy": N_GREEDY,
        "logits_file": "logits.f32",
        "logits_all_p0_file": "logits_all_p0.f32",
        "notes": "float32 compute on CPU; greedy = argmax (lowest id on exact ties), "
                 "EOS does not stop; greedy_margins[k] = top1 - top2 logit at step k",
        "prompts": entries,
    }
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
