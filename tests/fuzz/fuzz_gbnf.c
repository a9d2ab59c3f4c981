/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_gbnf.c - libFuzzer target for the GBNF compiler and the matcher (common/grammar).
 *
 * The input is GBNF text, compiled under small limits. What compiles is bound to a small
 * synthetic vocabulary and walked for up to 24 tokens chosen from the mask (by the input's
 * hash), under small budgets. Invariants, any broken one aborts:
 *  - every status is 0 or a documented one, with *out NULL on failure;
 *  - grammar_match_bytes of the input itself answers (prefix implied by complete);
 *  - a token in the mask is accepted, one outside it is refused with DERAS_EINVAL and
 *    leaves the state (the next mask) unchanged; rollback of one token restores the mask;
 *  - a failed matcher (DERAS_ERANGE) stays failed until rolled back;
 *  - nothing leaks, and the budgets end every input quickly.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/matcher.h"
#include "grammar_gen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool known(int st)
{
    return st == 0 || st == DERAS_EFORMAT || st == DERAS_ENOTFOUND || st == DERAS_EUNSUPPORTED ||
           st == DERAS_ERANGE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static gvocab_t *v;
    static int32_t eog;
    if (!v && !(v = gg_synthetic_vocab(600, 1, &eog)))
        abort();
    grammar_limits lim;
    grammar_limits_default(&lim);
    lim.max_elements = 1 << 15;
    lim.max_rules = 2048;
    lim.max_repeat = 64;
    lim.max_nesting = 32;
    grammar_t *g = (grammar_t *)1;
    int st = grammar_from_gbnf((const char *)data, size, &lim, &g);
    if (!known(st) || (st && g) || (!st && !g))
        abort();
    if (st)
        return 0;
    bool prefix, complete;
    st = grammar_match_bytes(g, (const char *)data, size, &prefix, &complete);
    if ((st && st != DERAS_ERANGE) || (complete && !prefix))
        abort();
    token_grammar_opts to;
    token_grammar_opts_default(&to);
    to.memo_bytes = 1u << 20;
    to.cache_bytes = 1u << 20;
    to.max_stacks = 64;
    token_grammar_t *tg = NULL;
    if (token_grammar_new(&g, v, &to, &tg) || g)
        abort();
    gmatcher_opts mo;
    gmatcher_opts_default(&mo);
    mo.max_stacks = 64;
    mo.max_nodes = 2048;
    mo.max_closure = 2048;
    mo.max_rollback = 4;
    gmatcher_t *m = NULL;
    st = gmatcher_new(tg, &mo, &m);
    if (st && (st != DERAS_ERANGE || m))
        abort();
    uint32_t mask[32], again[32];
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ull;
    for (int step = 0; m && step < 24; step++) {
        st = gmatcher_fill_mask(m, mask);
        if (st == DERAS_ERANGE) {
            if (gmatcher_accept(m, 0) != DERAS_ERANGE)
                abort();
            break;
        }
        if (st)
            abort();
        int n = gmask_count(mask, gvocab_size(v));
        if (n == 0)
            abort(); /* a live matcher always allows something (a token or the end) */
        int32_t out_tok = (int32_t)(gg_rand(&h) % (uint64_t)gvocab_size(v));
        if (!gmask_get(mask, out_tok)) {
            if (gmatcher_accept(m, out_tok) != DERAS_EINVAL || gmatcher_fill_mask(m, again) ||
                memcmp(mask, again, gvocab_mask_words(v) * 4))
                abort();
        }
        int pick = (int)(gg_rand(&h) % (uint64_t)n);
        int32_t t = 0;
        for (; t < gvocab_size(v); t++)
            if (gmask_get(mask, t) && pick-- == 0)
                break;
        st = gmatcher_accept(m, t);
        if (st == DERAS_ERANGE)
            break;
        if (st)
            abort();
        if (gmatcher_is_terminated(m))
            break;
        if (step % 5 == 4) {
            if (gmatcher_rollback(m, 1) || gmatcher_fill_mask(m, again) ||
                memcmp(mask, again, gvocab_mask_words(v) * 4) || gmatcher_accept(m, t))
                abort();
        }
    }
    gmatcher_destroy(&m);
    token_grammar_destroy(&tg);
    return 0;
}
