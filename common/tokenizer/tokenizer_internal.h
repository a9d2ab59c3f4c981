/* SPDX-License-Identifier: Apache-2.0 */
/* tokenizer_internal.h - the tokenizer's private structures, shared by its files only.
 *
 * The tokenizer is one concept split over several files (tokenizer.c: object, added
 * tokens, encode/decode; bpe.c: vocabulary hashing and the merge loop; pretokenizer.c and
 * normalizer.c: the text pipeline before the model; tokenizer_gguf.c and
 * tokenizer_json.c: the two loaders; detok.c: streaming). They share the struct defined
 * here; nothing outside common/tokenizer*.c, bpe.c, pretokenizer.c, normalizer.c and
 * detok.c may include this header.
 *
 * Both loaders describe the tokenizer the same way, as Hugging Face's tokenizers library
 * does: an optional normalizer, an optional pre-tokenizer (a list of steps), a BPE model
 * (merges ranked by position, or SentencePiece scores), added tokens matched before the
 * pipeline, prefix/suffix ids for add_special, and per-token decoded bytes.
 */
#ifndef DERAS_TOKENIZER_INTERNAL_H
#define DERAS_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* GGUF token types (tokenizer.ggml.token_type); tokenizer.json tokens map onto them. */
enum tok_type {
    TOK_NORMAL = 1,
    TOK_UNKNOWN = 2,
    TOK_CONTROL = 3,
    TOK_USER_DEFINED = 4,
    TOK_UNUSED = 5,
    TOK_BYTE = 6,
};

enum tok_flag {
    TOKF_SPECIAL = 1,    /* skipped by skip_special; matched only under parse_special */
    TOKF_ADDED = 2,      /* matched in the text as a whole token */
    TOKF_LSTRIP = 4,     /* an added token that swallows whitespace on its left */
    TOKF_RSTRIP = 8,     /* ... and on its right */
    TOKF_NORMALIZED = 16,/* matched in the normalized text (HF "normalized": true) */
    TOKF_EOG = 32,
    TOKF_PRESENT = 64,   /* the id has a token (tokenizer.json may leave holes) */
};

struct tok_token {
    size_t text_off, bytes_off; /* into tokenizer.arena */
    uint32_t text_len, bytes_len;
    float score;
    uint8_t type, flags;
};

/* String -> id, open addressing over ids; keys live in the token arena. */
struct strmap {
    int32_t *slots; /* -1 = empty */
    uint32_t mask;
};

/* (left id, right id) -> (rank, merged id), open addressing. */
struct pairmap {
    uint64_t *keys; /* UINT64_MAX = empty */
    int32_t *rank;
    int32_t *result;
    uint32_t mask;
};

/* Added-token trie over bytes: children as sibling lists. Node 0 is the root. */
struct trie_node {
    int32_t child, sibling;
    int32_t id; /* token ending here, -1 if none */
    uint8_t byte;
};
struct trie {
    struct trie_node *nodes;
    int32_t n, cap;
};

enum norm_kind { NORM_NFC = 1, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_PREPEND, NORM_REPLACE, NORM_REPLACE_RE };
struct norm_step {
    enum norm_kind kind;
    char *a, *b; /* prepend text / replace pattern and content */
    size_t alen, blen;
    pcre2_code *re;
};

enum split_behavior { SPLIT_REMOVED = 1, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum pretok_kind { PRE_SPLIT_RE = 1, PRE_SPLIT_STR, PRE_BYTELEVEL, PRE_METASPACE };
enum prepend_scheme { PREPEND_ALWAYS = 1, PREPEND_FIRST, PREPEND_NEVER };
struct pretok_step {
    enum pretok_kind kind;
    enum split_behavior behavior;
    bool invert;
    pcre2_code *re;      /* PRE_SPLIT_RE, or PRE_BYTELEVEL with use_regex */
    char *str;           /* PRE_SPLIT_STR pattern; PRE_METASPACE replacement (UTF-8) */
    size_t slen;
    bool add_prefix_space;   /* PRE_BYTELEVEL */
    enum prepend_scheme prepend; /* PRE_METASPACE */
    bool split;              /* PRE_METASPACE */
};

enum tok_algo {
    TOK_ALGO_BPE = 1, /* merges ranked by their order (GPT-2, Hugging Face BPE) */
    TOK_ALGO_SPM = 2, /* SentencePiece: any pair whose concatenation is a token, by score */
};

struct tokenizer {
    enum tok_algo algo;
    int32_t n_vocab;
    struct tok_token *tokens;
    char *arena;
    size_t arena_len, arena_cap;
    size_t max_token_bytes;

    struct strmap vocab;
    struct pairmap merges;
    bool byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;
    int32_t byte_ids[256]; /* <0xXX> tokens, -1 where absent */

    struct norm_step *norm;
    int n_norm;
    struct pretok_step *pre;
    int n_pre;

    struct trie raw_trie;  /* added tokens matched in the raw text */
    struct trie norm_trie; /* added tokens matched in the normalized text */

    bool strip_leading_space; /* decode: drop one leading space at the start of a text */

    int32_t bos, eos, eot, eom;
    int32_t *prefix_ids, *suffix_ids;
    int n_prefix, n_suffix;
    int32_t *eog;
    int n_eog;
    char *chat_template;
};

/* Growing id list used while encoding. */
struct idvec {
    int32_t *v;
    size_t n, cap;
};
int idvec_push(struct idvec *iv, int32_t id);

/* Pieces of text: spans of one buffer; `origin` marks a piece that starts at offset 0 of
 * the caller's text (Metaspace's prepend_scheme "first" needs it). */
struct piece {
    size_t off, len;
    bool origin;
};
struct pieces {
    char *buf;
    size_t len, cap;
    struct piece *v;
    size_t n, cap_v;
};
void pieces_clear(struct pieces *p);
void pieces_free(struct pieces *p);
/* Append text as a new piece (or, with join, to the last piece). */
int pieces_add(struct pieces *p, const char *s, size_t n, bool origin);

/* --- building (tokenizer.c) --- */
struct tokenizer *tok_alloc(enum tok_algo algo, int32_t n_vocab);
/* Store a token's vocabulary string; type/score/flags set by the caller. */
int tok_set_text(struct tokenizer *t, int32_t id, const char *s, size_t n);
/* After every token has its text, type and flags: hash the vocabulary, derive decoded
 * bytes (`bytelevel` or SentencePiece rules, per the decoder), byte fallback ids, and
 * the added-token tries. `name` is for messages. */
enum tok_decoder { DEC_BYTELEVEL = 1, DEC_SPM = 2 };
int tok_finish(struct tokenizer *t, enum tok_decoder dec, const char *name);
int tok_add_eog(struct tokenizer *t, int32_t id);
char *tok_strndup(const char *s, size_t n);

/* --- bpe.c --- */
uint32_t tok_hash(const char *s, size_t n);
int strmap_build(struct strmap *m, const struct tokenizer *t);
int32_t strmap_find(const struct strmap *m, const struct tokenizer *t, const char *s, size_t n);
void strmap_free(struct strmap *m);
int pairmap_init(struct pairmap *m, size_t n_expected);
/* Insert; a pair already present keeps its first (best) rank. */
void pairmap_put(struct pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t result);
bool pairmap_get(const struct pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *result);
void pairmap_free(struct pairmap *m);

struct bpe_work;
/* Scratch for bpe_encode_piece, grown as pieces need: DERAS_ENOMEM. */
int bpe_work_new(struct bpe_work **out);
void bpe_work_destroy(struct bpe_work **w);
/* Tokenize one pre-tokenized piece with the model, appending ids. */
int bpe_encode_piece(const struct tokenizer *t, const char *s, size_t n, struct bpe_work *w,
                     struct idvec *out);

/* --- normalizer.c --- */
/* Apply every step to s[0..n); the result is malloc'd into out and out_len. */
int norm_apply(const struct tokenizer *t, const char *s, size_t n, char **out, size_t *out_len);
void norm_free_steps(struct norm_step *steps, int n);

/* --- pretokenizer.c --- */
/* Compile a regex with UTF + UCP (+ JIT where available); the message names `what`. */
int regex_compile(const char *pattern, size_t len, const char *what, pcre2_code **out);
/* Split `in` into pieces through every step (in is consumed; result in *in). */
int pretok_apply(const struct tokenizer *t, struct pieces *in, struct pieces *tmp);
/* Fill steps for a GGUF tokenizer.ggml.pre name; DERAS_EUNSUPPORTED for unknown names. */
int pretok_from_gguf_name(const char *name, struct pretok_step **steps, int *n,
                          bool *ignore_merges);
void pretok_free_steps(struct pretok_step *steps, int n);
/* A ByteLevel step (GPT-2 regex split when use_regex, then the byte map). */
int pretok_bytelevel_step(bool add_prefix_space, bool use_regex, struct pretok_step *st);
/* Every match span (pairs of offsets) of a regex in s; shared with normalizer.c. */
int regex_find_all(const pcre2_code *re, const char *s, size_t n, size_t **spans, size_t *n_spans);
/* Every occurrence span of the literal pat in s, left to right, not overlapping; shared
 * with normalizer.c. DERAS_ENOMEM. O(n). */
int literal_find_all(const char *pat, size_t plen, const char *s, size_t n, size_t **spans,
                     size_t *n_spans);

bool tok_is_whitespace(uint32_t cp);

#endif
