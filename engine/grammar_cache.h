/* SPDX-License-Identifier: Apache-2.0 */
/* grammar_cache.h - a worker's compiled grammars: the vocabulary trie built once from the
 * tokenizer, and the most recently used token grammars keyed by their GBNF text.
 *
 * Requests carry grammars as GBNF text (the router converts JSON Schemas and regular
 * expressions); the same schema again is the common case, so its compiled grammar and,
 * above all, its token-mask cache (token_grammar.h: filled lazily as matchers meet
 * positions) are kept and shared: a hit costs a hash and a compare of the text. A miss
 * compiles (grammar_from_gbnf + token_grammar_new: O(grammar), no trie walk) and evicts
 * the least recently used entry beyond max_entries; an evicted grammar lives on while
 * matchers still hold it (token grammars are reference counted).
 *
 * The vocabulary (gvocab.h): token i's bytes are the tokenizer's (tokenizer_token_bytes),
 * none for special tokens and for ids past the tokenizer (a padded LM head), over the
 * logits' width; the end-of-generation ids are the engine's. Building it costs a sort and a
 * trie, ~5 MB at a 128k vocabulary, once per worker.
 *
 * Memory is bounded: each token grammar keeps at most GCACHE_MASK_CACHE_BYTES of mask
 * splits and GCACHE_MEMO_BYTES of walk memo (past them, splits are computed per use), so
 * the cache holds at most max_entries x 24 MiB plus the grammars themselves (each <= 2^20
 * elements), whatever a client sends.
 *
 * Not thread-safe: the worker's loop uses it between steps. Costs: gcache_get O(text) on a
 * hit; compilation and the LRU's O(max_entries) scan on a miss.
 */
#ifndef DERAS_GRAMMAR_CACHE_H
#define DERAS_GRAMMAR_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/grammar/token_grammar.h"
#include "common/tokenizer/tokenizer.h"

#define GCACHE_DEFAULT_ENTRIES 16
#define GCACHE_MASK_CACHE_BYTES (16u << 20) /* each grammar's kept position splits */
#define GCACHE_MEMO_BYTES (8u << 20)        /* each grammar's trie-walk memo */

typedef struct gcache gcache_t;

/* The vocabulary of tok over n_tokens ids (the model's logits width, >= 1), eog the
 * end-of-generation ids (copied), and room for max_entries grammars (0: the default).
 * gvocab_new's errors; DERAS_EINVAL, DERAS_ENOMEM. */
int gcache_new(const tokenizer_t *tok, int n_tokens, const int32_t *eog, int n_eog,
               int max_entries, gcache_t **out);
void gcache_destroy(gcache_t **c);

/* The token grammar of gbnf[0..len) (compiled on a miss). *out is borrowed: valid until the
 * next gcache_get or gcache_destroy (engine_add retains what it keeps). Compile errors are
 * grammar_from_gbnf's (DERAS_EFORMAT, DERAS_ENOTFOUND, DERAS_EUNSUPPORTED, DERAS_ERANGE),
 * a start state over the matcher's budgets (DERAS_ERANGE: no matcher could start) and
 * token_grammar_new's; DERAS_ENOMEM. */
int gcache_get(gcache_t *c, const char *gbnf, size_t len, token_grammar_t **out);

typedef struct gcache_stats {
    int n_entries;
    uint64_t hits, misses;
} gcache_stats;

void gcache_get_stats(const gcache_t *c, gcache_stats *out);

#endif
