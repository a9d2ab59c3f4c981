/* SPDX-License-Identifier: Apache-2.0 */
/* tg_analysis.c - the static facts token_grammar needs about a grammar (tg_impl.h):
 *
 *   ret[r]     the one position rule r can return to (its callers' continuation), or
 *              RET_BOTTOM (only the root, never referenced), RET_MANY, RET_NONE
 *              (unreachable). A call in tail position passes the caller's return on.
 *   follow[r]  the bytes that can come right after rule r anywhere (FIRST of what follows
 *              each call site, and the caller's FOLLOW where that can be empty).
 *
 * Both are worklist fixpoints over the reachable rules: ret changes at most twice per
 * rule, a FIRST or FOLLOW set at most 256 times, so the cost is O(elements) in practice
 * and O(256 * elements) at worst.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/tg_impl.h"

static int32_t join(int32_t a, int32_t b)
{
    if (a == RET_NONE)
        return b;
    if (b == RET_NONE || a == b)
        return a;
    return RET_MANY;
}

/* Callers as CSR over call sites: rule r's sites are site[first[r] .. first[r + 1]). */
typedef struct sites {
    int32_t *first, *site;
} sites;

static int build_sites(const grammar_t *g, sites *s)
{
    s->first = calloc((size_t)g->n_rules + 2, sizeof(int32_t));
    s->site = malloc((size_t)(g->n_el + 1) * sizeof(int32_t));
    if (!s->first || !s->site)
        return deras_fail(DERAS_ENOMEM, "token_grammar: out of memory");
    for (int p = 0; p < g->n_el; p++)
        if (GE_KIND(g->el[p]) == GE_REF && g->reachable[g->rule_of[p]])
            s->first[GE_ARG(g->el[p]) + 2]++;
    for (int r = 0; r < g->n_rules; r++)
        s->first[r + 2] += s->first[r + 1];
    for (int p = 0; p < g->n_el; p++)
        if (GE_KIND(g->el[p]) == GE_REF && g->reachable[g->rule_of[p]])
            s->site[s->first[GE_ARG(g->el[p]) + 1]++] = p;
    return DERAS_OK;
}

static void compute_ret(const grammar_t *g, int32_t *ret, int32_t *queue, uint8_t *queued)
{
    for (int r = 0; r < g->n_rules; r++)
        ret[r] = RET_NONE;
    ret[g->root] = RET_BOTTOM;
    for (int p = 0; p < g->n_el; p++)
        if (GE_KIND(g->el[p]) == GE_REF && g->reachable[g->rule_of[p]] &&
            GE_KIND(g->el[p + 1]) != GE_END)
            ret[GE_ARG(g->el[p])] = join(ret[GE_ARG(g->el[p])], p + 1);
    int head = 0, tail = 0, n = g->n_rules;
    for (int r = 0; r < n; r++)
        if (ret[r] != RET_NONE && g->reachable[r]) {
            queue[tail++ % n] = r;
            queued[r] = 1;
        }
    while (head != tail) {
        int s = queue[head++ % n];
        queued[s] = 0;
        for (int a = 0; a < g->ralt[2 * s + 1]; a++)
            for (int p = g->alt[g->ralt[2 * s] + a]; GE_KIND(g->el[p]) != GE_END; p++) {
                if (GE_KIND(g->el[p]) != GE_REF || GE_KIND(g->el[p + 1]) != GE_END)
                    continue;
                int r = GE_ARG(g->el[p]);
                int32_t nr = join(ret[r], ret[s]);
                if (nr != ret[r]) {
                    ret[r] = nr;
                    if (!queued[r]) {
                        queue[tail++ % n] = r;
                        queued[r] = 1;
                    }
                }
            }
    }
}

static void set_or(uint64_t *d, const uint64_t *s)
{
    for (int k = 0; k < 4; k++)
        d[k] |= s[k];
}

/* FIRST of the elements from p to the end of its alternative into d; returns whether they
 * can all be empty. */
static bool first_of_suffix(const grammar_t *g, const uint64_t *first, int p, uint64_t *d)
{
    for (;; p++) {
        int32_t e = g->el[p];
        if (GE_KIND(e) == GE_END)
            return true;
        if (GE_KIND(e) == GE_BYTES) {
            set_or(d, g->set + 4 * GE_ARG(e));
            return false;
        }
        set_or(d, first + 4 * GE_ARG(e));
        if (!g->nullable[GE_ARG(e)])
            return false;
    }
}

static void push(int32_t *queue, uint8_t *queued, int n, int *tail, int r)
{
    if (!queued[r]) {
        queued[r] = 1;
        queue[(*tail)++ % n] = r;
    }
}

static void compute_first(const grammar_t *g, const sites *s, uint64_t *first, int32_t *queue,
                          uint8_t *queued)
{
    int n = g->n_rules, head = 0, tail = 0;
    memset(first, 0, (size_t)n * 32);
    for (int r = n - 1; r >= 0; r--)
        if (g->reachable[r])
            push(queue, queued, n, &tail, r);
    while (head != tail) {
        int r = queue[head++ % n];
        queued[r] = 0;
        uint64_t f[4] = {0};
        for (int a = 0; a < g->ralt[2 * r + 1]; a++)
            first_of_suffix(g, first, g->alt[g->ralt[2 * r] + a], f);
        if (memcmp(f, first + 4 * r, 32) == 0)
            continue;
        memcpy(first + 4 * r, f, 32);
        for (int k = s->first[r]; k < s->first[r + 1]; k++)
            push(queue, queued, n, &tail, g->rule_of[s->site[k]]);
    }
}

static void compute_follow(const grammar_t *g, const sites *s, const uint64_t *first,
                           uint64_t *follow, int32_t *queue, uint8_t *queued)
{
    int n = g->n_rules, head = 0, tail = 0;
    memset(follow, 0, (size_t)n * 32);
    for (int r = 0; r < n; r++)
        if (g->reachable[r])
            push(queue, queued, n, &tail, r);
    while (head != tail) {
        int r = queue[head++ % n];
        queued[r] = 0;
        uint64_t f[4] = {0};
        for (int k = s->first[r]; k < s->first[r + 1]; k++) {
            int p = s->site[k];
            if (first_of_suffix(g, first, p + 1, f))
                set_or(f, follow + 4 * g->rule_of[p]);
        }
        if (memcmp(f, follow + 4 * r, 32) == 0)
            continue;
        memcpy(follow + 4 * r, f, 32);
        for (int a = 0; a < g->ralt[2 * r + 1]; a++) /* r's callees may follow with r */
            for (int p = g->alt[g->ralt[2 * r] + a]; GE_KIND(g->el[p]) != GE_END; p++)
                if (GE_KIND(g->el[p]) == GE_REF)
                    push(queue, queued, n, &tail, GE_ARG(g->el[p]));
    }
}

int tg_analyze(token_grammar_t *tg)
{
    const grammar_t *g = tg->g;
    int n = g->n_rules, rc = DERAS_OK;
    sites s = {0};
    uint64_t *first = malloc((size_t)n * 32);
    int32_t *queue = malloc((size_t)n * sizeof(int32_t));
    uint8_t *queued = calloc((size_t)n, 1);
    tg->ret = malloc((size_t)n * sizeof(int32_t));
    tg->follow = malloc((size_t)n * 32);
    if (!first || !queue || !queued || !tg->ret || !tg->follow) {
        rc = deras_fail(DERAS_ENOMEM, "token_grammar: out of memory");
        goto done;
    }
    if ((rc = build_sites(g, &s)))
        goto done;
    compute_ret(g, tg->ret, queue, queued);
    compute_first(g, &s, first, queue, queued);
    compute_follow(g, &s, first, tg->follow, queue, queued);
done:
    free(s.first);
    free(s.site);
    free(first);
    free(queue);
    free(queued);
    return rc;
}
