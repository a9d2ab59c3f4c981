/* SPDX-License-Identifier: Apache-2.0 */
/* tg_internal.h - what a matcher reads from its token_grammar: a position's split of the
 * vocabulary (internal to common/grammar; token_grammar.h has the idea).
 *
 * A split is one of three forms for the accepted tokens, whichever is smallest, plus the
 * uncertain ids:
 *   TG_ACCEPT   list[] holds the accepted ids;
 *   TG_REJECT   list[] holds the matchable ids that are not accepted (rejected and
 *               uncertain): accepted = matchable minus list;
 *   TG_BITMAP   bits[] is the accepted set.
 */
#ifndef DERAS_TG_INTERNAL_H
#define DERAS_TG_INTERNAL_H

#include <stdint.h>

#include "common/grammar/token_grammar.h"

enum { TG_ACCEPT = 0, TG_REJECT = 1, TG_BITMAP = 2 };

typedef struct tg_entry {
    int kind;
    int32_t n_list, n_unc;
    const int32_t *list;
    const int32_t *unc;
    const uint32_t *bits;
} tg_entry;

/* Position pos's split (a GE_BYTES position of a reachable rule), computed on first use.
 * A split that could not be kept (cache_bytes reached) lives in the token_grammar's
 * scratch with its mutex held: every successful tg_get is paired with tg_put.
 * DERAS_ERANGE (a static walk over its budgets), DERAS_ENOMEM. */
int tg_get(token_grammar_t *tg, int32_t pos, const tg_entry **out);
void tg_put(token_grammar_t *tg, const tg_entry *e);

#endif
