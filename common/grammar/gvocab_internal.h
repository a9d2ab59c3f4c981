/* SPDX-License-Identifier: Apache-2.0 */
/* gvocab_internal.h - the vocabulary trie's layout (internal to common/grammar).
 *
 * sorted[] holds the ids of the tokens that can match (non-empty bytes) in byte order,
 * shorter first on a shared prefix. The trie's nodes are in preorder, node 0 the root (no
 * byte); node i's subtree is nodes [i, end[i]), the tokens with its prefix are
 * sorted[sub0[i] .. sub1[i]), and those whose bytes end exactly at it are sorted[sub0[i]
 * .. here1[i]).
 */
#ifndef DERAS_GVOCAB_INTERNAL_H
#define DERAS_GVOCAB_INTERNAL_H

#include <stdint.h>

#include "common/grammar/gvocab.h"

struct gvocab {
    int n_tokens, n_eog, n_sorted, n_nodes, max_len;
    size_t words;
    char *bytes;            /* every token's bytes, concatenated */
    uint32_t *off;          /* (n_tokens + 1) token i is bytes[off[i] .. off[i + 1]) */
    int32_t *eog;
    uint32_t *eog_bits;     /* (words) end-of-generation ids */
    uint32_t *matchable;    /* (words) tokens with bytes */
    int32_t *sorted;        /* (n_sorted) */
    uint8_t *nbyte;         /* (n_nodes) */
    uint16_t *ndepth;       /* (n_nodes) root 0 */
    int32_t *nend, *sub0, *sub1, *here1; /* (n_nodes) */
};

#endif
