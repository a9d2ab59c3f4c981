/* SPDX-License-Identifier: Apache-2.0 */
/* tokenizer.h - text <-> token ids for Llama-family models, and streaming detokenization.
 *
 * Two algorithms, both BPE:
 *  - byte-level BPE (GPT-2 style: Llama 3, Qwen2, SmolLM2, StarCoder): text is split by the
 *    pre-tokenizer regexes the model declares (run through PCRE2), each piece's bytes are
 *    mapped to printable characters and merged by merge rank.
 *  - SentencePiece-style BPE (Llama 2, Mistral, TinyLlama): spaces become U+2581, a space
 *    is prefixed when the model says so, symbols merge by score, and characters not in the
 *    vocabulary fall back to <0xXX> byte tokens.
 * A tokenizer is built from GGUF metadata (tokenizer.ggml.*) or from a Hugging Face
 * directory (tokenizer.json, with tokenizer_config.json and generation_config.json where
 * present for BOS/EOS rules and the chat template).
 *
 * Special and added tokens (<|im_start|>, <s>, ...) are matched in the input text as whole
 * tokens when parse_special is true, before pre-tokenization, as Hugging Face does.
 *
 * A tokenizer is immutable after construction and safe to share between threads.
 */
#ifndef DERAS_TOKENIZER_H
#define DERAS_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/checkpoint/gguf.h"

typedef struct tokenizer tokenizer_t;

int tokenizer_from_gguf(const gguf_t *g, tokenizer_t **out);
/* `dir` holds tokenizer.json; tokenizer_config.json and generation_config.json are read
 * where present. */
int tokenizer_from_hf_dir(const char *dir, tokenizer_t **out);
void tokenizer_destroy(tokenizer_t **t);

int tokenizer_vocab_size(const tokenizer_t *t);

/* Encode `len` bytes of UTF-8 text. add_special adds BOS (and EOS) as the model's rules
 * say; parse_special matches special/added token text in the input. Writes at most cap
 * ids; *n_out is always the full count, and DERAS_ERANGE is returned when it exceeds cap
 * (call again with a bigger buffer). Invalid UTF-8 in the input is DERAS_EFORMAT.
 * Cost: O(len * log len) typical; allocates working memory per call. */
int tokenizer_encode(const tokenizer_t *t, const char *text, size_t len, bool add_special,
                     bool parse_special, int32_t *ids, size_t cap, size_t *n_out);

/* Decode ids to text into out (NUL-terminated when cap > 0). Same cap/ERANGE rule as
 * encode, *n_out excluding the NUL. skip_special drops control tokens (BOS, EOS, ...).
 * Byte sequences that are not valid UTF-8 decode to U+FFFD. Ids outside the vocabulary
 * are DERAS_ERANGE. The leading space a SentencePiece model prefixed is removed. */
int tokenizer_decode(const tokenizer_t *t, const int32_t *ids, size_t n, bool skip_special,
                     char *out, size_t cap, size_t *n_out);

/* The raw bytes a token stands for (after byte-level unmapping / U+2581 -> space /
 * <0xXX> -> byte); may be part of a UTF-8 character. NULL/0 for an invalid id. */
const char *tokenizer_token_bytes(const tokenizer_t *t, int32_t id, size_t *len);

/* The token's string as stored in the vocabulary ("Ġthe", "▁the", "<|im_end|>"). */
const char *tokenizer_token_text(const tokenizer_t *t, int32_t id);

/* Id of a token by its vocabulary string, or -1. O(1) expected. */
int32_t tokenizer_find(const tokenizer_t *t, const char *text);

int32_t tokenizer_bos(const tokenizer_t *t);   /* -1 if none */
int32_t tokenizer_eos(const tokenizer_t *t);   /* -1 if none */
bool tokenizer_is_special(const tokenizer_t *t, int32_t id); /* control/added-special token */
/* End-of-generation: EOS, EOT/EOM tokens and every id in generation_config's eos list. */
bool tokenizer_is_eog(const tokenizer_t *t, int32_t id);
/* Ids for which tokenizer_is_eog holds: count and the i-th id. */
int tokenizer_n_eog(const tokenizer_t *t);
int32_t tokenizer_eog_at(const tokenizer_t *t, int i);

/* The model's chat template (Jinja source), or NULL if it declares none. */
const char *tokenizer_chat_template(const tokenizer_t *t);

/* Streaming detokenizer: turns one id at a time into text, never splitting a UTF-8
 * character across outputs. Bytes of an incomplete character are held until the token
 * that completes it arrives; sequences that can never become valid are emitted as U+FFFD.
 * `at_start` says whether the first pushed token starts the text (so a SentencePiece
 * model's prefixed space is removed) or continues it (a generated continuation). */
typedef struct detok detok_t;

/* A detokenizer over t (borrowed, must outlive it): DERAS_EINVAL for a NULL t, DERAS_ENOMEM.
 * O(longest token). */
int detok_new(const tokenizer_t *t, bool skip_special, bool at_start, detok_t **out);
void detok_destroy(detok_t **d);
/* Start over (new sequence) without reallocating. */
void detok_reset(detok_t *d, bool at_start);
/* Feed one id; the text it completes is written to out (at most cap bytes, NUL not
 * added) and its length to *n_out. The output never exceeds detok_max_output(d) (three
 * times the longest token's bytes plus the 3 held ones, for the case where every byte is
 * invalid and becomes U+FFFD); a smaller cap may give DERAS_ERANGE, which leaves the
 * detokenizer unchanged. Ids outside the vocabulary are DERAS_ERANGE. Allocates nothing;
 * O(token length). */
int detok_push(detok_t *d, int32_t id, char *out, size_t cap, size_t *n_out);
/* A cap that every detok_push and detok_flush of d fits in. */
size_t detok_max_output(const detok_t *d);
/* At the end of a sequence: emit whatever is held (incomplete characters as U+FFFD). */
int detok_flush(detok_t *d, char *out, size_t cap, size_t *n_out);

#endif
