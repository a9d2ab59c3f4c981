/* SPDX-License-Identifier: Apache-2.0 */
/* gvocab.h - a model's vocabulary as grammars see it: every token's bytes, in a trie.
 *
 * Tokens are matched by their bytes (what the tokenizer decodes a token to:
 * tokenizer_token_bytes), so a byte-level BPE piece that holds half of a UTF-8 character
 * matches half of it and leaves the grammar in the middle of the character. A token whose
 * bytes are NULL or empty never matches a grammar: special and control tokens
 * (<|im_start|>), unused ids, ids past the tokenizer's size in a padded LM head. The
 * end-of-generation ids are allowed exactly where the grammar accepts (matcher.h).
 *
 * Layout: the tokens sorted by their bytes, and a trie over them in preorder (a node's
 * subtree is the index range [node, subtree_end)), with, per node, the range of sorted
 * tokens below it. Walking the trie with a parser state visits each shared prefix once;
 * a dead prefix skips its whole subtree in O(1).
 *
 * Costs: gvocab_new O(total bytes * log n) (a sort) and about 19 bytes per trie node +
 * 13 per token (a 128k byte-level vocabulary: a few MB). Immutable after construction: share
 * it between threads and grammars; it must outlive every token_grammar made with it.
 */
#ifndef DERAS_GVOCAB_H
#define DERAS_GVOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GVOCAB_MAX_TOKEN_BYTES 1024 /* longer tokens are refused: DERAS_ERANGE */

typedef struct gvocab gvocab_t;

/* n_tokens ids 0 .. n_tokens - 1 (the logits row's width); token i's bytes are
 * bytes[i][0 .. lens[i]) (copied; NULL or 0: never matches). eog: the end-of-generation
 * ids (copied; each in range). DERAS_EINVAL for n_tokens < 1 or an eog id out of range,
 * DERAS_ERANGE for a token over GVOCAB_MAX_TOKEN_BYTES, DERAS_ENOMEM. */
int gvocab_new(int n_tokens, const char *const *bytes, const size_t *lens, const int32_t *eog,
               int n_eog, gvocab_t **out);
void gvocab_destroy(gvocab_t **v);

/* n_tokens. */
int gvocab_size(const gvocab_t *v);
/* uint32_t words of a token mask over this vocabulary: (n_tokens + 31) / 32. */
size_t gvocab_mask_words(const gvocab_t *v);
/* Token id's bytes (NULL, *len 0 for one that never matches). O(1). */
const char *gvocab_token_bytes(const gvocab_t *v, int32_t id, size_t *len);
/* Whether id is an end-of-generation id. O(1). */
bool gvocab_is_eog(const gvocab_t *v, int32_t id);

#endif
