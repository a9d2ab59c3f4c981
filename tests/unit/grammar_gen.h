/* SPDX-License-Identifier: Apache-2.0 */
/* grammar_gen.h - helpers for the grammar tests, fuzz targets and the benchmark: random
 * sentences of a compiled grammar, and vocabularies to match them with.
 *
 * The generator derives from the byte-level grammar (grammar_internal.h): at each rule it
 * picks an alternative at random while the derivation is shallow and the one with the
 * shortest completion once it is deep (each rule's shortest completion is computed
 * first), and a random byte of each byte set, so every sentence is in the language and
 * valid UTF-8. The vocabularies: every single byte plus pieces (so any byte string can be
 * tokenized, greedily by longest match), either random pieces cut from sample text or a
 * synthetic byte-level BPE-like set of n tokens (whole words, word pieces with a leading
 * space, punctuation runs, digits, JSON fragments and UTF-8 pieces that split characters).
 */
#ifndef DERAS_GRAMMAR_GEN_H
#define DERAS_GRAMMAR_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/grammar/grammar.h"
#include "common/grammar/gvocab.h"

/* The file tests/data/grammar/<name> (malloc'd, NUL-terminated); NULL if unreadable, and a
 * skip when DERAS_TEST_DATA is not set. */
char *gg_read_data(const char *name);

/* splitmix64 stream for the tests. */
uint64_t gg_rand(uint64_t *state);

/* A random sentence of g into out (cap bytes, NUL-terminated); the derivation goes deep up
 * to max_depth rule expansions before it heads for the shortest completion. Returns the
 * length, or -1 when it does not fit in cap. */
long gg_sentence(const grammar_t *g, uint64_t *rng, int max_depth, char *out, size_t cap);

/* A vocabulary of n_tokens (>= 257): ids 0..255 the single bytes, then synthetic pieces
 * (header comment), then one end-of-generation id (the last, with no bytes). Returns the
 * vocabulary; *eog its end id. The pieces are deterministic for a seed. NULL on ENOMEM. */
gvocab_t *gg_synthetic_vocab(int n_tokens, uint64_t seed, int32_t *eog);

/* Greedy longest-match tokenization of s[0..n) over v (needs every single byte as a token):
 * ids into out (cap), the count as the return value (-1 if cap is too small). O(n *
 * longest token) with the trie. */
long gg_tokenize(const gvocab_t *v, const char *s, size_t n, int32_t *out, size_t cap);

#endif
