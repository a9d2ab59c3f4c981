/* SPDX-License-Identifier: Apache-2.0 */
/* token_grammar.c - a grammar bound to a vocabulary: life, the split cache, the API
 * (token_grammar.h; the walk is tg_walk.c, the static analysis tg_analysis.c).
 *
 * A kept split is one malloc'd block (header, list, uncertain ids, or bitmap) published
 * with a release store; readers load it with acquire and need no lock. Computing one takes
 * the mutex; a split that does not fit in cache_bytes is built in the scratch and handed
 * out with the mutex still held, released by tg_put.
 */
#include "common/grammar/token_grammar.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/tg_impl.h"

void token_grammar_opts_default(token_grammar_opts *o)
{
    o->cache_bytes = 64u << 20;
    o->memo_bytes = 32u << 20;
    o->max_stacks = 1024;
    o->max_depth = 256;
}

int token_grammar_new(grammar_t **gp, const gvocab_t *v, const token_grammar_opts *o,
                      token_grammar_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "token_grammar_new: NULL out");
    *out = NULL;
    if (!gp || !*gp || !v) {
        if (gp)
            grammar_destroy(gp);
        return deras_fail(DERAS_EINVAL, "token_grammar_new: NULL grammar or vocabulary");
    }
    token_grammar_opts opts;
    if (o)
        opts = *o;
    else
        token_grammar_opts_default(&opts);
    if (opts.max_stacks < 1 || opts.max_depth < 2 || opts.memo_bytes < (1u << 20)) {
        grammar_destroy(gp);
        return deras_fail(DERAS_EINVAL, "token_grammar_new: max_stacks >= 1, max_depth >= 2 and "
                          "memo_bytes >= 1 MiB");
    }
    token_grammar_t *tg = calloc(1, sizeof *tg);
    if (!tg) {
        grammar_destroy(gp);
        return deras_fail(DERAS_ENOMEM, "token_grammar: out of memory");
    }
    atomic_init(&tg->refs, 1);
    tg->g = *gp;
    *gp = NULL;
    tg->v = v;
    tg->o = opts;
    pthread_mutex_init(&tg->mu, NULL);
    const grammar_t *g = tg->g;
    size_t V = (size_t)v->n_tokens;
    int rc = tg_analyze(tg);
    if (rc)
        goto fail;
    tg->term = malloc((size_t)g->n_el * sizeof(int32_t));
    tg->frames = malloc((size_t)opts.max_depth * sizeof(int32_t));
    tg->st = malloc(((size_t)v->max_len + 1) * sizeof(int32_t));
    tg->un = malloc((size_t)v->max_len + 1);
    tg->acc = malloc(V * sizeof(int32_t));
    tg->unc = malloc(V * sizeof(int32_t));
    tg->scratch_list = malloc(V * sizeof(int32_t));
    tg->mark = malloc(v->words * sizeof(uint32_t));
    if (!tg->term || !tg->frames || !tg->st || !tg->un || !tg->acc || !tg->unc ||
        !tg->scratch_list || !tg->mark) {
        rc = deras_fail(DERAS_ENOMEM, "token_grammar: out of memory");
        goto fail;
    }
    for (int p = 0; p < g->n_el; p++)
        tg->term[p] = GE_KIND(g->el[p]) == GE_BYTES && g->reachable[g->rule_of[p]] ? tg->n_terms++
                                                                                 : -1;
    tg->entry = calloc((size_t)(tg->n_terms ? tg->n_terms : 1), sizeof *tg->entry);
    if (!tg->entry) {
        rc = deras_fail(DERAS_ENOMEM, "token_grammar: out of memory");
        goto fail;
    }
    if ((rc = tg_memo_init(tg)))
        goto fail;
    tg->stats.n_positions = tg->n_terms;
    *out = tg;
    return DERAS_OK;
fail:
    token_grammar_destroy(&tg);
    return rc;
}

token_grammar_t *token_grammar_retain(token_grammar_t *tg)
{
    atomic_fetch_add_explicit(&tg->refs, 1, memory_order_relaxed);
    return tg;
}

void token_grammar_destroy(token_grammar_t **tgp)
{
    if (!tgp || !*tgp)
        return;
    token_grammar_t *tg = *tgp;
    *tgp = NULL;
    if (atomic_fetch_sub_explicit(&tg->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (int i = 0; tg->entry && i < tg->n_terms; i++)
        free(atomic_load_explicit(&tg->entry[i], memory_order_relaxed));
    free(tg->entry);
    tg_memo_free(&tg->memo);
    pthread_mutex_destroy(&tg->mu);
    free(tg->ret);
    free(tg->follow);
    free(tg->term);
    free(tg->frames);
    free(tg->st);
    free(tg->un);
    free(tg->acc);
    free(tg->unc);
    free(tg->scratch_list);
    free(tg->mark);
    grammar_destroy(&tg->g);
    free(tg);
}

const grammar_t *token_grammar_grammar(const token_grammar_t *tg)
{
    return tg->g;
}

const gvocab_t *token_grammar_vocab(const token_grammar_t *tg)
{
    return tg->v;
}

/* From the walk's acc / unc: the smallest form (tg_internal.h), kept when it fits in the
 * cache, else in the scratch. *kept says which. */
static int build_entry(token_grammar_t *tg, int32_t pos, tg_entry **out, bool *kept)
{
    const gvocab_t *v = tg->v;
    int64_t A = tg->n_acc, U = tg->n_unc, R = v->n_sorted - A - U;
    size_t b_acc = (size_t)A * 4, b_rej = (size_t)(R + U) * 4, b_bits = v->words * 4;
    int kind = b_acc <= b_rej && b_acc <= b_bits ? TG_ACCEPT : b_rej <= b_bits ? TG_REJECT
                                                                           : TG_BITMAP;
    size_t body = kind == TG_ACCEPT ? b_acc : kind == TG_REJECT ? b_rej : b_bits;
    size_t size = sizeof(tg_entry) + body + (size_t)U * 4;
    tg_entry *e = NULL;
    int32_t *list;
    *kept = tg->stats.cache_bytes + size <= tg->o.cache_bytes &&
            (e = malloc(size + 8)) != NULL;
    if (*kept) {
        list = (int32_t *)(e + 1);
    } else {
        e = &tg->scratch;
        list = tg->scratch_list;
    }
    int32_t *unc = *kept ? list + body / 4 : tg->unc;
    if (kind == TG_ACCEPT) {
        memcpy(list, tg->acc, b_acc);
    } else {
        uint32_t *m = kind == TG_BITMAP ? (uint32_t *)list : tg->mark;
        memset(m, 0, v->words * 4);
        for (int64_t i = 0; i < A; i++)
            m[tg->acc[i] >> 5] |= 1u << (tg->acc[i] & 31);
        if (kind == TG_REJECT) {
            int32_t n = 0;
            for (int32_t i = 0; i < v->n_sorted; i++) {
                int32_t t = v->sorted[i];
                if (!(m[t >> 5] >> (t & 31) & 1))
                    list[n++] = t;
            }
        }
    }
    if (*kept)
        memcpy(unc, tg->unc, (size_t)U * 4);
    *e = (tg_entry){.kind = kind, .n_list = kind == TG_ACCEPT ? (int32_t)A : (int32_t)(R + U),
                    .n_unc = (int32_t)U, .list = list, .unc = unc,
                    .bits = kind == TG_BITMAP ? (const uint32_t *)list : NULL};
    tg->stats.n_computed++;
    if (*kept) {
        tg->stats.cache_bytes += size;
        tg->stats.n_cached++;
        tg->stats.n_uncertain += (uint64_t)U;
        atomic_store_explicit(&tg->entry[tg->term[pos]], e, memory_order_release);
    } else {
        tg->stats.n_uncached++;
    }
    *out = e;
    return DERAS_OK;
}

int tg_get(token_grammar_t *tg, int32_t pos, const tg_entry **out)
{
    int32_t t = tg->term[pos];
    tg_entry *e = atomic_load_explicit(&tg->entry[t], memory_order_acquire);
    if (e) {
        *out = e;
        return DERAS_OK;
    }
    pthread_mutex_lock(&tg->mu);
    e = atomic_load_explicit(&tg->entry[t], memory_order_relaxed);
    if (e) {
        pthread_mutex_unlock(&tg->mu);
        *out = e;
        return DERAS_OK;
    }
    bool kept = false;
    int rc = tg_walk(tg, pos);
    if (!rc)
        rc = build_entry(tg, pos, &e, &kept);
    if (rc || kept)
        pthread_mutex_unlock(&tg->mu);
    *out = e;
    return rc;
}

void tg_put(token_grammar_t *tg, const tg_entry *e)
{
    if (e == &tg->scratch)
        pthread_mutex_unlock(&tg->mu);
}

int token_grammar_precompute(token_grammar_t *tg)
{
    const grammar_t *g = tg->g;
    for (int p = 0; p < g->n_el; p++) {
        if (tg->term[p] < 0)
            continue;
        const tg_entry *e;
        int rc = tg_get(tg, p, &e);
        if (rc)
            return rc;
        tg_put(tg, e);
    }
    return DERAS_OK;
}

void token_grammar_get_stats(token_grammar_t *tg, token_grammar_stats *out)
{
    pthread_mutex_lock(&tg->mu);
    *out = tg->stats;
    out->memo_bytes = tg_memo_bytes(&tg->memo);
    pthread_mutex_unlock(&tg->mu);
}
