# SPDX-License-Identifier: Apache-2.0
"""make_tokenizer_vectors.py - reference data for the tokenizer and chat tests.

Run once by hand (never by CI), from the repository root:
    /tmp/refenv/bin/python tests/ref/make_tokenizer_vectors.py

Writes under tests/data/tokenizer/:
- corpus.json: the test corpus (prose, code with tabs, numbers and dates, whitespace
  runs and \\r\\n, emoji with ZWJ sequences and skin tones, CJK, Indonesian, Arabic,
  Cyrillic, special-token text, long words, NBSP...).
- smollm2/: SmolLM2's tokenizer as the Hugging Face `tokenizers` library builds it
  (tests/ref/smollm2_hf.py:load_tokenizer, from the test model GGUF) saved as
  tokenizer.json, and vectors.json: for every corpus string the ids with special-token
  parsing on and off, with add_special_tokens, and the decoded texts.
- hf_llama3_bpe/, hf_spm_bytefallback/, hf_qwen2_nfc/: small tokenizers trained here with
  the `tokenizers` library on the corpus and some Python sources, each in the shape of a
  real model family (see the functions below), with tokenizer_config.json,
  generation_config.json and the same vectors.json.
- chat_cases.json: the chat templates (SmolLM2's from the GGUF; Qwen2, Llama 3 and
  Llama 2 as published in their tokenizer_config.json), conversations, and what
  transformers' Jinja renderer produces for each (BOS removed from the front, as deras
  leaves it to the tokenizer).
"""
import glob
import json
import os
import sys
import unicodedata

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

sys.path.insert(0, os.path.dirname(__file__))
import smollm2_hf  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "data", "tokenizer")

CORPUS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog. It wasn't the fox's fault; they'd planned it!",
    "In 1969, Neil Armstrong walked on the Moon. He said: \"That's one small step for man...\"",
    "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "def fib(n):\n\tif n < 2:\n\t\treturn n\n\treturn fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\n\nint main(void)\n{\n    printf(\"%d\\n\", 42);\n    return 0;\n}\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "SELECT id, name FROM users WHERE created_at >= '2024-01-01' ORDER BY name;",
    "const f = async (x) => { await fetch(`/api/${x}`); }; // arrow\r\n",
    "<div class=\"a\">&nbsp;<span>text</span></div>",
    "3.14159 2.71828 1,234,567.89 -42 +7 1e-10 0x1F 0b1010 007",
    "Dates: 2024-02-29, 29/02/2024, Feb 29th 2024, 12:30:45.123Z",
    "333333333 3333 12345678901234567890",
    "   leading spaces",
    "trailing spaces   ",
    "a  b   c    d     e",
    "\n\n\nthree newlines\n\n",
    "line one\r\nline two\r\n\r\nline four",
    "\t\ttabs\tand\t\tmore\t",
    " \t \n \r\n  mixed   \n",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇮🇩 🧑🏿‍💻",
    "👩🏻‍🔬 and 👨🏾‍🍳 cook 🍕🍝",
    "中文：我想在苹果公司工作，你呢？",
    "日本語のテキスト、カタカナとひらがな。東京都",
    "한국어 문장입니다. 안녕하세요!",
    "Saya suka makan nasi goreng di pagi hari bersama keluarga.",
    "مرحبا بالعالم، هذا نص عربي.",
    "Привет, мир! Это русский текст. Ёжик",
    "Ελληνικά γράμματα και Ñandú, Crème brûlée, Straße, İstanbul",
    "<|im_start|>user\nHi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text <|im_end|>",
    "<|im_start|><|im_start|>nested<|im_end|",
    "<s>[INST] Hi [/INST] Hello </s>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "https://example.com/path?query=1&other=two#frag user@example.org",
    "non\u00a0breaking\u00a0space and\u2009thin space and\u3000ideographic",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "Ω≈ç√∫˜µ≤≥÷ ¡™£¢∞§¶•ªº–≠ «quotes» “curly” ‘single’ …",
    "e\u0301 vs \u00e9, A\u030a vs \u00c5, \ufb01 ligature, \u2460 circled",
    "Mixed 12abc34 x1y2z3 3rd 21st-century ½ ¾ ٣٤ ૩",
    "!!!!!! ?????? ...... ------====== ''''''``````\"\"\"\"",
    "",
    " ",
    "\n",
    "zzqx zzqxw",
]


def corpus_long():
    """A longer mixed text: the corpus joined, three times."""
    return "\n".join(CORPUS) * 3


def training_text():
    files = sorted(glob.glob("/usr/lib/python3*/json/*.py"))[:6] + sorted(glob.glob("/usr/lib/python3*/textwrap.py"))
    texts = list(CORPUS) * 3
    for f in files:
        with open(f, encoding="utf-8") as fh:
            texts.append(fh.read())
    return texts


def vectors(tok, texts):
    cases = []
    for t in texts:
        enc = tok.encode(t, add_special_tokens=False).ids
        enc_add = tok.encode(t, add_special_tokens=True).ids
        tok.encode_special_tokens = True
        enc_plain = tok.encode(t, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        cases.append({
            "text": t,
            "ids": enc,
            "ids_add_special": enc_add,
            "ids_no_parse_special": enc_plain,
            "decoded": tok.decode(enc, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(enc, skip_special_tokens=True),
            "decoded_no_parse_special": tok.decode(enc_plain, skip_special_tokens=False),
        })
    return cases


def write_dir(name, tok, config=None, gen=None, extra_texts=()):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=1)
    if gen is not None:
        with open(os.path.join(d, "generation_config.json"), "w", encoding="utf-8") as f:
            json.dump(gen, f, indent=1)
    # Reload from the file, so the vectors come from exactly what the C side reads.
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "vectors.json"), "w", encoding="utf-8") as f:
        json.dump({"cases": vectors(tok, list(CORPUS) + list(extra_texts))}, f, ensure_ascii=False,
                  separators=(",", ":"))
    return tok


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def make_llama3():
    """Byte-level BPE shaped like Llama 3: Split(regex) + ByteLevel(use_regex=False),
    ignore_merges, BOS by TemplateProcessing, special tokens, plus two vocabulary entries
    no merge can build (so ignore_merges decides)."""
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=1200, special_tokens=specials,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), tr)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for w in ["\u0120zzqx", "zzqx"]:  # "Ġzzqx": reachable only through ignore_merges
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer.from_str(json.dumps(data))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
              "chat_template": LLAMA3_TEMPLATE}
    gen = {"bos_token_id": bos, "eos_token_id": [tok.token_to_id("<|end_of_text|>"), tok.token_to_id("<|eot_id|>")]}
    write_dir("hf_llama3_bpe", tok, config, gen)


def make_spm():
    """SentencePiece-style BPE shaped like Llama 2's tokenizer.json: Prepend("▁") +
    Replace(" ", "▁") normalizer, no pre-tokenizer, <0xXX> byte fallback (a small alphabet
    so that CJK and emoji fall back to bytes), fuse_unk, decoder Replace/ByteFallback/Fuse/
    Strip, BOS by TemplateProcessing."""
    norm = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tmp = Tokenizer(models.BPE())
    tmp.normalizer = norm
    tmp.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=True)
    tr = trainers.BpeTrainer(vocab_size=900, limit_alphabet=90, show_progress=False)
    tmp.train_from_iterator(training_text(), tr)
    data = json.loads(tmp.to_str())
    trained_vocab = data["model"]["vocab"]
    merges = data["model"]["merges"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for w, _ in sorted(trained_vocab.items(), key=lambda kv: kv[1]):
        if w not in vocab:
            vocab[w] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = norm
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<unk>", "<s>", "</s>"]])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
              "add_eos_token": False, "chat_template": LLAMA2_TEMPLATE}
    write_dir("hf_spm_bytefallback", tok, config, {"bos_token_id": 1, "eos_token_id": 2})


def make_qwen2():
    """Byte-level BPE shaped like Qwen2: NFC normalizer, Split(Qwen2 regex) + ByteLevel,
    no BOS; special added tokens plus a non-special one and one with lstrip/rstrip;
    chat template in chat_template.jinja; generation_config with an eos list."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(training_text(), tr)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False),
                    AddedToken("[MASK]", special=True, normalized=False, lstrip=True, rstrip=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    gen = {"eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]}
    extra = ["call <tool_call>{\"x\": 1}</tool_call> done", "fill  [MASK]  here and[MASK]there",
             "caf\u0065\u0301 na\u0131\u0308ve \u1e9b\u0323"]
    write_dir("hf_qwen2_nfc", tok, config, gen, extra)
    with open(os.path.join(OUT, "hf_qwen2_nfc", "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(QWEN2_TEMPLATE)


def make_smollm2():
    tok = smollm2_hf.load_tokenizer()
    # The published generation_config.json of SmolLM2-Instruct ends on <|im_end|> (id 2).
    write_dir("smollm2", tok, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
                               "unk_token": "<|endoftext|>"}, {"eos_token_id": 2},
              extra_texts=[corpus_long()])


LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")

CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Where is the treasure?"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Explain gravity.\n"},
     {"role": "assistant", "content": " Things fall. "}, {"role": "user", "content": "Thanks 👍"}],
    [{"role": "user", "content": "多行\n文本\n\n  with  spaces  "}],
    [{"role": "user", "content": ""}],
]


def make_chat():
    from transformers.utils.chat_template_utils import render_jinja_template
    from gguf import GGUFReader
    r = GGUFReader(smollm2_hf.model_path())
    f = r.fields["tokenizer.chat_template"]
    smol = bytes(f.parts[f.data[0]]).decode("utf-8")
    templates = {
        "smollm2": (smol, "", ""),
        "qwen2": (QWEN2_TEMPLATE, "", ""),
        "llama3": (LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|end_of_text|>"),
        "llama2": (LLAMA2_TEMPLATE, "<s>", "</s>"),
    }
    renders = []
    for name, (tmpl, bos, eos) in templates.items():
        for ci, conv in enumerate(CONVERSATIONS):
            for gen in (False, True):
                out = render_jinja_template(conversations=[conv], chat_template=tmpl, add_generation_prompt=gen,
                                            bos_token=bos, eos_token=eos)
                text = out[0][0] if isinstance(out, tuple) else out[0]
                assert text.startswith(bos), (name, text)
                renders.append({"template": name, "conversation": ci, "add_generation_prompt": gen,
                                "expected": text[len(bos):]})
    doc = {"templates": {k: v[0] for k, v in templates.items()}, "conversations": CONVERSATIONS,
           "renders": renders}
    with open(os.path.join(OUT, "chat_cases.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, ensure_ascii=False, indent=1)


def make_gguf_fixtures():
    """Tiny vocabulary-only GGUF files for the loader's checks: a byte-level one that names
    a pre-tokenizer we do not know, one with an unsupported tokenizer model, and a valid
    llama-bpe one with EOT/EOM ids and add_bos_token."""
    import gguf
    alphabet = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u0120"]

    def write(name, model, pre, extra=None):
        w = gguf.GGUFWriter(os.path.join(OUT, name), "llama")
        w.add_tokenizer_model(model)
        if pre is not None:
            w.add_tokenizer_pre(pre)
        toks = alphabet + ["ab", "\u0120a", "<|bos|>", "<|eot|>", "<|eom|>"]
        w.add_token_list(toks)
        w.add_token_types([1] * (len(toks) - 3) + [3, 3, 3])
        w.add_token_merges(["a b", "\u0120 a"])
        if extra:
            extra(w, toks)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

    def ids(w, toks):
        w.add_bos_token_id(toks.index("<|bos|>"))
        w.add_eos_token_id(toks.index("<|eot|>"))
        w.add_eot_token_id(toks.index("<|eot|>"))
        w.add_eom_token_id(toks.index("<|eom|>"))
        w.add_add_bos_token(True)

    write("gguf_pre_unknown.gguf", "gpt2", "no-such-pre")
    write("gguf_model_bert.gguf", "bert", None)
    write("gguf_llama_bpe_tiny.gguf", "gpt2", "llama-bpe", ids)


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump({"corpus": CORPUS}, f, ensure_ascii=False, indent=1)
    make_smollm2()
    make_llama3()
    make_spm()
    make_qwen2()
    make_chat()
    make_gguf_fixtures()


if __name__ == "__main__":
    main()
