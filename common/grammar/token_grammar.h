/* SPDX-License-Identifier: Apache-2.0 */
/* token_grammar.h - a grammar bound to a vocabulary: the adaptive token-mask cache that
 * every matcher of that grammar shares (XGrammar's idea; docs/structured_output.md).
 *
 * A matcher's state is a set of parse stacks; the top of each is a grammar position (a
 * byte-matching element). What a token does from a position depends on the stack below
 * it only once the token's bytes run past the end of the rules whose caller is known.
 * Compilation specializes rules so that most positions know their callers statically
 * (grammar.h), so for each position the tokens split into
 *   accepted   the token's bytes match from here, whatever the stack below holds;
 *   rejected   they cannot match from here, whatever the stack below holds;
 *   uncertain  they reach the end of a rule with several possible callers (and the next
 *              byte may follow that rule somewhere): only the live stack can tell.
 * The split of a position is computed the first time a matcher needs it, by one walk of
 * the vocabulary trie (gvocab.h) from that position with the static part of its stack,
 * and kept, so a mask costs a copy of the accepted set plus a walk of the (few)
 * uncertain tokens on the real stack. For a grammar without recursion every position's
 * context is static and no token is ever uncertain; for JSON mode the uncertain ones are
 * the tokens that run past the end of a JSON value (a closing quote and what follows it).
 *
 * The split is stored as the smallest of: the accepted ids, the rejected ids, or a bitmap,
 * plus the uncertain ids. The cache is bounded by cache_bytes: past it, a position's split
 * is computed into scratch for each use and not kept (correct, slower). The trie walks run
 * over a lazily built transition memo (static parser states interned, the byte
 * transitions between them cached), bounded by memo_bytes and cleared when full.
 *
 * Ownership: a token_grammar takes the grammar (grammar_t ** is set to NULL) and borrows
 * the vocabulary, which must outlive it. It is reference counted: token_grammar_new gives
 * the caller one reference, token_grammar_retain adds one, token_grammar_destroy drops
 * one and frees at zero; every matcher holds one. So an engine can keep an LRU of
 * compiled grammars keyed by their text and evict one while its sequences still run.
 *
 * Thread safety: the cache fills under a mutex and entries are published once complete,
 * so matchers of one token_grammar may compute masks on different threads at once.
 */
#ifndef DERAS_TOKEN_GRAMMAR_H
#define DERAS_TOKEN_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/grammar/grammar.h"
#include "common/grammar/gvocab.h"

typedef struct token_grammar_opts {
    size_t cache_bytes;  /* position splits kept at most; default 64 MiB */
    size_t memo_bytes;   /* the static walks' transition memo at most; default 32 MiB */
    int max_stacks;      /* parse stacks in one static state; default 1024 (as gmatcher_opts) */
    int max_depth;       /* stack frames in a static walk; default 256 */
} token_grammar_opts;

void token_grammar_opts_default(token_grammar_opts *o);

typedef struct token_grammar token_grammar_t;

/* Bind *g (taken: set to NULL, also on failure, when it is destroyed) to v (borrowed).
 * o NULL: the defaults. Computes the positions' static contexts and the rules' follow
 * sets: O(elements + rules); no trie walk happens here. DERAS_EINVAL, DERAS_ENOMEM. */
int token_grammar_new(grammar_t **g, const gvocab_t *v, const token_grammar_opts *o,
                      token_grammar_t **out);

/* One more reference; returns tg. O(1), thread-safe. */
token_grammar_t *token_grammar_retain(token_grammar_t *tg);

/* Drop the caller's reference (*tg set to NULL); the last one frees. */
void token_grammar_destroy(token_grammar_t **tg);

const grammar_t *token_grammar_grammar(const token_grammar_t *tg);
const gvocab_t *token_grammar_vocab(const token_grammar_t *tg);

/* Compute and keep the split of every position now (what a first request would otherwise
 * pay token by token), within cache_bytes: for a worker that wants a grammar warm before
 * its first step, and for the benchmark's compile time. O(positions * trie walk); the
 * walk is O(trie nodes visited) over the memo. DERAS_ERANGE when a static walk exceeds
 * max_stacks or max_depth (the grammar is too ambiguous to serve), DERAS_ENOMEM. */
int token_grammar_precompute(token_grammar_t *tg);

typedef struct token_grammar_stats {
    int n_positions;       /* byte-matching positions of the grammar */
    int n_cached;          /* positions whose split is kept */
    uint64_t n_computed;   /* splits computed (cached or not) */
    uint64_t n_uncached;   /* splits computed but not kept: cache_bytes was reached */
    size_t cache_bytes;    /* held by kept splits */
    size_t memo_bytes;     /* held by the transition memo */
    uint64_t memo_resets;  /* times the memo was cleared for reaching memo_bytes */
    uint64_t n_uncertain;  /* uncertain ids over all kept splits */
} token_grammar_stats;

/* A snapshot of the counters (under the mutex). */
void token_grammar_get_stats(token_grammar_t *tg, token_grammar_stats *out);

#endif
