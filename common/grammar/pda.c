/* SPDX-License-Identifier: Apache-2.0 */
/* pda.c - hash-consed parse stacks and the byte step (see pda.h). */
#include "pda.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

static inline uint32_t node_hash(int32_t pos, int32_t parent)
{
    uint32_t h = (uint32_t)pos * 0x9E3779B1u ^ ((uint32_t)parent + 3u) * 0x85EBCA77u;
    return h ^ (h >> 16);
}

int pda_init(pda *p, const grammar_t *g, int32_t cap, int max_stacks, int max_depth,
             int max_closure)
{
    *p = (pda){.g = g, .cap = cap, .max_stacks = max_stacks, .max_depth = max_depth,
               .max_closure = max_closure};
    if (cap < 16 || max_stacks < 1 || max_depth < 1 || max_closure < 1 || cap > (1 << 28) ||
        max_closure > (1 << 26))
        return deras_fail(DERAS_EINVAL, "grammar: bad parse budgets");
    uint32_t hn = 16, vn = 16;
    while (hn < (uint32_t)cap)
        hn <<= 1;
    while (vn < 2u * (uint32_t)max_closure)
        vn <<= 1;
    p->hmask = hn - 1;
    p->vmask = vn - 1;
    p->node = malloc((size_t)cap * sizeof *p->node);
    p->head = malloc((size_t)hn * sizeof(int32_t));
    p->stamp = calloc((size_t)cap, sizeof(uint32_t));
    p->work = malloc((size_t)max_closure * 2 * sizeof(int32_t));
    p->vkey = malloc((size_t)vn * sizeof(uint64_t));
    p->vstamp = calloc((size_t)vn, sizeof(uint32_t));
    if (!p->node || !p->head || !p->stamp || !p->work || !p->vkey || !p->vstamp) {
        pda_free(p);
        return deras_fail(DERAS_ENOMEM, "grammar: out of memory for %d parse nodes", cap);
    }
    memset(p->head, 0xff, (size_t)hn * sizeof(int32_t));
    p->gen = p->vgen = 1;
    return DERAS_OK;
}

void pda_free(pda *p)
{
    free(p->node);
    free(p->head);
    free(p->stamp);
    free(p->work);
    free(p->vkey);
    free(p->vstamp);
    *p = (pda){0};
}

int pda_cons(pda *p, int32_t pos, int32_t parent, int32_t *id)
{
    uint32_t h = node_hash(pos, parent) & p->hmask;
    for (int32_t i = p->head[h]; i >= 0; i = p->node[i].next)
        if (p->node[i].pos == pos && p->node[i].parent == parent) {
            *id = i;
            return DERAS_OK;
        }
    int32_t depth = parent < 0 ? 1 : p->node[parent].depth + 1;
    if (depth > p->max_depth)
        return deras_fail(DERAS_ERANGE, "grammar: parse stack deeper than max_depth %d",
                          p->max_depth);
    if (p->len >= p->cap)
        return deras_fail(DERAS_ERANGE, "grammar: more than max_nodes %d parse nodes", p->cap);
    int32_t i = p->len++;
    p->node[i] = (pda_node){.pos = pos, .parent = parent, .next = p->head[h], .depth = depth};
    p->stamp[i] = 0;
    p->head[h] = i;
    *id = i;
    return DERAS_OK;
}

void pda_begin(pda *p, pda_out *out)
{
    out->n = 0;
    out->accept = out->ctx = false;
    p->steps = 0;
    if (++p->gen == 0) {
        memset(p->stamp, 0, (size_t)p->cap * sizeof(uint32_t));
        p->gen = 1;
    }
    if (++p->vgen == 0) {
        memset(p->vstamp, 0, ((size_t)p->vmask + 1) * sizeof(uint32_t));
        p->vgen = 1;
    }
}

/* First visit of (pos, parent) in this step? */
static bool first_visit(pda *p, int32_t pos, int32_t parent)
{
    uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)parent;
    uint32_t h = (uint32_t)(key * 0x9E3779B97F4A7C15ull >> 32) & p->vmask;
    for (;; h = (h + 1) & p->vmask) {
        if (p->vstamp[h] != p->vgen) {
            p->vstamp[h] = p->vgen;
            p->vkey[h] = key;
            return true;
        }
        if (p->vkey[h] == key)
            return false;
    }
}

static int over_closure(const pda *p)
{
    return deras_fail(DERAS_ERANGE, "grammar: one byte needs more than max_closure %d "
                      "expansion steps", p->max_closure);
}

int pda_expand(pda *p, int32_t pos, int32_t parent, pda_out *out)
{
    const grammar_t *g = p->g;
    int nw = 0;
    p->work[nw++] = pos;
    p->work[nw++] = parent;
    while (nw > 0) {
        parent = p->work[--nw];
        pos = p->work[--nw];
        for (;;) {
            if (++p->steps > p->max_closure)
                return over_closure(p);
            int32_t e = g->el[pos];
            if (GE_KIND(e) == GE_END) {
                if (parent < 0) {
                    if (parent == PDA_BOTTOM)
                        out->accept = true;
                    else
                        out->ctx = true;
                    break;
                }
                pos = p->node[parent].pos; /* pop: continue after the call */
                parent = p->node[parent].parent;
                continue;
            }
            if (GE_KIND(e) == GE_BYTES) {
                int32_t id;
                int rc = pda_cons(p, pos, parent, &id);
                if (rc)
                    return rc;
                if (p->stamp[id] != p->gen) {
                    if (out->n >= p->max_stacks)
                        return deras_fail(DERAS_ERANGE, "grammar: more than max_stacks %d parse "
                                          "stacks at once (an ambiguous grammar)", p->max_stacks);
                    p->stamp[id] = p->gen;
                    out->top[out->n++] = id;
                }
                break;
            }
            if (!first_visit(p, pos, parent))
                break;
            int32_t ret = parent;
            if (GE_KIND(g->el[pos + 1]) != GE_END) {
                int rc = pda_cons(p, pos + 1, parent, &ret);
                if (rc)
                    return rc;
            }
            int r = GE_ARG(e), a0 = g->ralt[2 * r], na = g->ralt[2 * r + 1];
            if (nw + 2 * na > 2 * p->max_closure)
                return over_closure(p);
            for (int a = na - 1; a >= 0; a--) { /* pushed last first: alternatives in order */
                p->work[nw++] = g->alt[a0 + a];
                p->work[nw++] = ret;
            }
            break;
        }
    }
    return DERAS_OK;
}

int pda_step(pda *p, const int32_t *tops, int n, unsigned byte, pda_out *out)
{
    const grammar_t *g = p->g;
    pda_begin(p, out);
    for (int i = 0; i < n; i++) {
        const pda_node *t = &p->node[tops[i]];
        if (!gset_has(g->set + 4 * GE_ARG(g->el[t->pos]), byte))
            continue;
        int rc = pda_expand(p, t->pos + 1, t->parent, out);
        if (rc)
            return rc;
    }
    return DERAS_OK;
}

int pda_start(pda *p, pda_out *out)
{
    const grammar_t *g = p->g;
    pda_begin(p, out);
    int a0 = g->ralt[2 * g->root], na = g->ralt[2 * g->root + 1];
    for (int a = 0; a < na; a++) {
        int rc = pda_expand(p, g->alt[a0 + a], PDA_BOTTOM, out);
        if (rc)
            return rc;
    }
    return DERAS_OK;
}

void pda_truncate(pda *p, int32_t len)
{
    while (p->len > len) {
        const pda_node *n = &p->node[--p->len];
        p->head[node_hash(n->pos, n->parent) & p->hmask] = n->next;
    }
}

void pda_compact(pda *p, int32_t *const *lists, const int *lens, int n_lists, int32_t *remap)
{
    memset(remap, 0, (size_t)p->len * sizeof(int32_t));
    for (int l = 0; l < n_lists; l++)
        for (int i = 0; i < lens[l]; i++)
            for (int32_t id = lists[l][i]; id >= 0 && !remap[id]; id = p->node[id].parent)
                remap[id] = 1;
    int32_t n = 0;
    for (int32_t i = 0; i < p->len; i++) {
        if (!remap[i]) {
            remap[i] = -n - 1;
            continue;
        }
        pda_node nd = p->node[i];
        if (nd.parent >= 0)
            nd.parent = remap[nd.parent];
        p->node[n] = nd;
        p->stamp[n] = 0;
        remap[i] = n++;
    }
    p->len = n;
    memset(p->head, 0xff, ((size_t)p->hmask + 1) * sizeof(int32_t));
    for (int32_t i = 0; i < n; i++) {
        uint32_t h = node_hash(p->node[i].pos, p->node[i].parent) & p->hmask;
        p->node[i].next = p->head[h];
        p->head[h] = i;
    }
    for (int l = 0; l < n_lists; l++)
        for (int i = 0; i < lens[l]; i++)
            lists[l][i] = remap[lists[l][i]];
}

int32_t pda_remap_mark(const pda *p, const int32_t *remap, int32_t old_len, int32_t old_mark)
{
    if (old_mark >= old_len)
        return p->len;
    int32_t r = remap[old_mark];
    return r >= 0 ? r : -r - 1;
}

int pda_copy(pda *dst, const pda *src)
{
    if (dst->g != src->g || dst->cap != src->cap || dst->hmask != src->hmask)
        return deras_fail(DERAS_EINVAL, "grammar: copying parse stacks between different shapes");
    memcpy(dst->node, src->node, (size_t)src->len * sizeof *src->node);
    memcpy(dst->head, src->head, ((size_t)src->hmask + 1) * sizeof(int32_t));
    memset(dst->stamp, 0, (size_t)src->len * sizeof(uint32_t));
    dst->len = src->len;
    return DERAS_OK;
}
