/* SPDX-License-Identifier: Apache-2.0 */
/* grammar_tok.h - a grammar vocabulary from a real tokenizer, the way the worker builds one
 * (docs/structured_output.md): each token's decoded bytes, none for special tokens, the
 * tokenizer's end-of-generation ids. For the mask tests and bench_grammar. */
#ifndef DERAS_GRAMMAR_TOK_H
#define DERAS_GRAMMAR_TOK_H

#include <stdlib.h>

#include "common/grammar/gvocab.h"
#include "common/tokenizer/tokenizer.h"

static inline gvocab_t *gg_vocab_from_tokenizer(const tokenizer_t *t)
{
    int n = tokenizer_vocab_size(t), n_eog = tokenizer_n_eog(t);
    const char **bytes = calloc((size_t)n, sizeof *bytes);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    int32_t *eog = calloc((size_t)n_eog + 1, sizeof *eog);
    gvocab_t *v = NULL;
    if (bytes && lens && eog) {
        for (int i = 0; i < n; i++)
            if (!tokenizer_is_special(t, i))
                bytes[i] = tokenizer_token_bytes(t, i, &lens[i]);
        for (int i = 0; i < n_eog; i++)
            eog[i] = tokenizer_eog_at(t, i);
        gvocab_new(n, bytes, lens, eog, n_eog, &v);
    }
    free(bytes);
    free(lens);
    free(eog);
    return v;
}

#endif
