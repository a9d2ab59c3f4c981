/* SPDX-License-Identifier: Apache-2.0 */
/* matcher.c - one sequence's parse state, its masks and its history (matcher.h).
 *
 * The history is a ring of max_rollback + 1 states at token boundaries; each keeps its
 * tops (max_stacks slots), its flags and the arena length when it was made (its mark).
 * Rolling back n tokens moves the ring's cursor back n and truncates the arena to that
 * state's mark. Before a token is accepted or a mask computed, an arena more than half
 * full is compacted to what the ring's reachable states hold.
 */
#include "common/grammar/matcher.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/gvocab_internal.h"
#include "common/grammar/pda.h"
#include "common/grammar/tg_impl.h"

typedef struct hstate {
    int n;
    int32_t mark;
    bool accept, terminated;
} hstate;

struct gmatcher {
    token_grammar_t *tg;
    const grammar_t *g;
    const gvocab_t *v;
    gmatcher_opts o;
    pda p;
    int R;                 /* ring slots: max_rollback + 1 */
    int32_t *ring_tops;    /* (R * max_stacks) */
    hstate *ring;          /* (R) */
    int cur, depth, n_accepted;
    bool failed;
    int32_t *buf_a, *buf_b;/* (max_stacks) walks */
    uint64_t *order;       /* (max_stacks) tops by position: pos << 32 | node */
    uint32_t *tmp;         /* (words) */
    int32_t *remap;        /* (max_nodes) */
    int32_t **lists;       /* (R) compaction roots */
    int *lens;             /* (R) */
};

void gmatcher_opts_default(gmatcher_opts *o)
{
    o->max_stacks = 1024;
    o->max_depth = 256;
    o->max_nodes = 16384;
    o->max_rollback = 16;
    o->max_closure = 16384;
}

static int32_t *tops_of(gmatcher_t *m, int slot)
{
    return m->ring_tops + (size_t)slot * m->o.max_stacks;
}

static int fail(gmatcher_t *m, int rc)
{
    if (rc == DERAS_ERANGE)
        m->failed = true;
    return rc;
}

static int start(gmatcher_t *m)
{
    pda_truncate(&m->p, 0);
    m->cur = m->depth = m->n_accepted = 0;
    m->failed = false;
    pda_out o = {.top = tops_of(m, 0)};
    int rc = pda_start(&m->p, &o);
    m->ring[0] = (hstate){.n = o.n, .mark = m->p.len, .accept = o.accept};
    return fail(m, rc);
}

int gmatcher_new(token_grammar_t *tg, const gmatcher_opts *o, gmatcher_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "gmatcher_new: NULL out");
    *out = NULL;
    gmatcher_opts opts;
    if (o)
        opts = *o;
    else
        gmatcher_opts_default(&opts);
    if (!tg || opts.max_stacks < 1 || opts.max_depth < 1 || opts.max_nodes < 256 ||
        opts.max_rollback < 0 || opts.max_rollback > 4096 || opts.max_closure < 1 ||
        opts.max_stacks > (1 << 20))
        return deras_fail(DERAS_EINVAL, "gmatcher_new: NULL grammar or options out of range");
    gmatcher_t *m = calloc(1, sizeof *m);
    if (!m)
        return deras_fail(DERAS_ENOMEM, "gmatcher: out of memory");
    m->tg = token_grammar_retain(tg);
    m->g = tg->g;
    m->v = tg->v;
    m->o = opts;
    m->R = opts.max_rollback + 1;
    size_t S = (size_t)opts.max_stacks;
    int rc = pda_init(&m->p, m->g, opts.max_nodes, opts.max_stacks, opts.max_depth,
                      opts.max_closure);
    if (rc)
        goto fail;
    m->ring_tops = malloc((size_t)m->R * S * sizeof(int32_t));
    m->ring = calloc((size_t)m->R, sizeof *m->ring);
    m->buf_a = malloc(S * sizeof(int32_t));
    m->buf_b = malloc(S * sizeof(int32_t));
    m->order = malloc(S * sizeof(uint64_t));
    m->tmp = malloc(m->v->words * sizeof(uint32_t));
    m->remap = malloc((size_t)opts.max_nodes * sizeof(int32_t));
    m->lists = malloc((size_t)m->R * sizeof *m->lists);
    m->lens = malloc((size_t)m->R * sizeof *m->lens);
    if (!m->ring_tops || !m->ring || !m->buf_a || !m->buf_b || !m->order || !m->tmp ||
        !m->remap || !m->lists || !m->lens) {
        rc = deras_fail(DERAS_ENOMEM, "gmatcher: out of memory");
        goto fail;
    }
    if ((rc = start(m)))
        goto fail;
    *out = m;
    return DERAS_OK;
fail:
    gmatcher_destroy(&m);
    return rc;
}

void gmatcher_destroy(gmatcher_t **mp)
{
    if (!mp || !*mp)
        return;
    gmatcher_t *m = *mp;
    pda_free(&m->p);
    free(m->ring_tops);
    free(m->ring);
    free(m->buf_a);
    free(m->buf_b);
    free(m->order);
    free(m->tmp);
    free(m->remap);
    free(m->lists);
    free(m->lens);
    token_grammar_destroy(&m->tg);
    free(m);
    *mp = NULL;
}

void gmatcher_reset(gmatcher_t *m)
{
    (void)start(m);
}

/* Compact the arena when more than half full (amortized: at least half is free after). */
static void ensure_room(gmatcher_t *m)
{
    if (m->p.len <= m->p.cap / 2)
        return;
    int n = 0;
    for (int k = m->depth; k >= 0; k--) { /* oldest first */
        int slot = (m->cur - k + m->R) % m->R;
        m->lists[n] = tops_of(m, slot);
        m->lens[n++] = m->ring[slot].n;
    }
    int32_t old_len = m->p.len;
    pda_compact(&m->p, m->lists, m->lens, n, m->remap);
    for (int k = m->depth; k >= 0; k--) {
        hstate *h = &m->ring[(m->cur - k + m->R) % m->R];
        h->mark = pda_remap_mark(&m->p, m->remap, old_len, h->mark);
    }
}

/* Walk bytes b[0..n) from tops; *out the end state (in buf_a or buf_b). */
static int walk(gmatcher_t *m, const int32_t *tops, int n_tops, const char *b, size_t n,
                pda_out *out)
{
    pda_out x = {.top = m->buf_a}, y = {.top = m->buf_b};
    const int32_t *cur = tops;
    int nc = n_tops;
    for (size_t i = 0; i < n; i++) {
        int rc = pda_step(&m->p, cur, nc, (unsigned char)b[i], &x);
        if (rc)
            return rc;
        if (x.n == 0 && i + 1 < n) {
            *out = x;
            out->accept = false;
            return DERAS_OK;
        }
        cur = x.top;
        nc = x.n;
        pda_out t = x;
        x = y;
        y = t;
    }
    *out = y;
    return DERAS_OK;
}

static void push_state(gmatcher_t *m, const int32_t *tops, int n, bool accept, bool terminated)
{
    int next = (m->cur + 1) % m->R;
    if (tops != tops_of(m, next))
        memmove(tops_of(m, next), tops, (size_t)n * sizeof(int32_t));
    m->ring[next] = (hstate){.n = n, .mark = m->p.len, .accept = accept, .terminated = terminated};
    m->cur = next;
    if (m->depth < m->R - 1)
        m->depth++;
    m->n_accepted++;
}

int gmatcher_accept(gmatcher_t *m, int32_t token)
{
    if (m->failed)
        return deras_fail(DERAS_ERANGE, "gmatcher: the grammar's budgets were exceeded");
    hstate *h = &m->ring[m->cur];
    if (h->terminated || token < 0 || token >= m->v->n_tokens)
        return deras_fail(DERAS_EINVAL, "gmatcher: token %d after the end or out of range",
                          (int)token);
    if (gvocab_is_eog(m->v, token)) {
        if (!h->accept)
            return deras_fail(DERAS_EINVAL, "gmatcher: end of generation before the grammar "
                              "is complete");
        push_state(m, tops_of(m, m->cur), 0, true, true);
        return DERAS_OK;
    }
    size_t len;
    const char *b = gvocab_token_bytes(m->v, token, &len);
    if (!b)
        return deras_fail(DERAS_EINVAL, "gmatcher: token %d has no bytes to match", (int)token);
    ensure_room(m);
    int32_t mark0 = m->p.len;
    pda_out o;
    int rc = walk(m, tops_of(m, m->cur), h->n, b, len, &o);
    if (rc) {
        pda_truncate(&m->p, mark0);
        return fail(m, rc);
    }
    if (o.n == 0 && !o.accept) {
        pda_truncate(&m->p, mark0);
        return deras_fail(DERAS_EINVAL, "gmatcher: token %d is not allowed here", (int)token);
    }
    push_state(m, o.top, o.n, o.accept, false);
    return DERAS_OK;
}

int gmatcher_rollback(gmatcher_t *m, int n)
{
    if (n < 0 || n > m->depth)
        return deras_fail(DERAS_ERANGE, "gmatcher: cannot roll back %d tokens (at most %d)", n,
                          m->depth);
    m->cur = (m->cur - n + m->R) % m->R;
    m->depth -= n;
    m->n_accepted -= n;
    m->failed = false;
    pda_truncate(&m->p, m->ring[m->cur].mark);
    return DERAS_OK;
}

int gmatcher_rollback_depth(const gmatcher_t *m)
{
    return m->depth;
}

int gmatcher_n_accepted(const gmatcher_t *m)
{
    return m->n_accepted;
}

bool gmatcher_is_accepting(const gmatcher_t *m)
{
    return m->ring[m->cur].accept;
}

bool gmatcher_is_complete(const gmatcher_t *m)
{
    return m->ring[m->cur].accept && m->ring[m->cur].n == 0;
}

bool gmatcher_is_terminated(const gmatcher_t *m)
{
    return m->ring[m->cur].terminated;
}

/* Does token t's byte walk from the single stack `top` stay alive? */
static int token_ok(gmatcher_t *m, int32_t top, int32_t t, bool *ok)
{
    size_t len;
    const char *b = gvocab_token_bytes(m->v, t, &len);
    int32_t mark0 = m->p.len;
    pda_out o;
    int rc = walk(m, &top, 1, b, len, &o);
    *ok = !rc && (o.n > 0 || o.accept);
    pda_truncate(&m->p, mark0);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* OR position e's accepted set into mask (written directly when `first`). */
static void apply_accepted(gmatcher_t *m, const tg_entry *e, uint32_t *mask, bool first)
{
    size_t W = m->v->words;
    if (e->kind == TG_ACCEPT) {
        for (int32_t i = 0; i < e->n_list; i++)
            mask[e->list[i] >> 5] |= 1u << (e->list[i] & 31);
        return;
    }
    if (e->kind == TG_BITMAP) {
        for (size_t w = 0; w < W; w++)
            mask[w] |= e->bits[w];
        return;
    }
    uint32_t *d = first ? mask : m->tmp;
    memcpy(d, m->v->matchable, W * sizeof(uint32_t));
    for (int32_t i = 0; i < e->n_list; i++)
        d[e->list[i] >> 5] &= ~(1u << (e->list[i] & 31));
    if (!first)
        for (size_t w = 0; w < W; w++)
            mask[w] |= d[w];
}

int gmatcher_fill_mask(gmatcher_t *m, uint32_t *mask)
{
    if (m->failed)
        return deras_fail(DERAS_ERANGE, "gmatcher: the grammar's budgets were exceeded");
    const gvocab_t *v = m->v;
    memset(mask, 0, v->words * sizeof(uint32_t));
    hstate *h = &m->ring[m->cur];
    if (h->terminated) {
        for (int i = 0; i < v->n_eog; i++)
            mask[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
        return DERAS_OK;
    }
    ensure_room(m);
    const int32_t *tops = tops_of(m, m->cur);
    for (int i = 0; i < h->n; i++)
        m->order[i] = (uint64_t)(uint32_t)m->p.node[tops[i]].pos << 32 | (uint32_t)tops[i];
    qsort(m->order, (size_t)h->n, sizeof(uint64_t), cmp_u64);
    bool first = true;
    for (int i = 0; i < h->n;) {
        int32_t pos = (int32_t)(m->order[i] >> 32);
        int j = i;
        while (j < h->n && (int32_t)(m->order[j] >> 32) == pos)
            j++;
        const tg_entry *e;
        int rc = tg_get(m->tg, pos, &e);
        if (rc)
            return fail(m, rc);
        apply_accepted(m, e, mask, first);
        first = false;
        for (int32_t u = 0; u < e->n_unc && !rc; u++) {
            int32_t t = e->unc[u];
            if (gmask_get(mask, t))
                continue;
            for (int k = i; k < j && !rc; k++) {
                bool ok;
                rc = token_ok(m, (int32_t)(uint32_t)m->order[k], t, &ok);
                if (!rc && ok) {
                    mask[t >> 5] |= 1u << (t & 31);
                    break;
                }
            }
        }
        tg_put(m->tg, e);
        if (rc)
            return fail(m, rc);
        i = j;
    }
    if (h->accept)
        for (int i = 0; i < v->n_eog; i++)
            mask[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31);
    return DERAS_OK;
}

int gmatcher_copy(gmatcher_t *dst, const gmatcher_t *src)
{
    if (dst == src)
        return DERAS_OK;
    if (dst->tg != src->tg || memcmp(&dst->o, &src->o, sizeof dst->o) != 0)
        return deras_fail(DERAS_EINVAL, "gmatcher_copy: matchers of different grammars or "
                          "options");
    int rc = pda_copy(&dst->p, &src->p);
    if (rc)
        return rc;
    for (int k = 0; k <= src->depth; k++) {
        int slot = (src->cur - k + src->R) % src->R;
        dst->ring[slot] = src->ring[slot];
        memcpy(dst->ring_tops + (size_t)slot * src->o.max_stacks,
               src->ring_tops + (size_t)slot * src->o.max_stacks,
               (size_t)src->ring[slot].n * sizeof(int32_t));
    }
    dst->cur = src->cur;
    dst->depth = src->depth;
    dst->n_accepted = src->n_accepted;
    dst->failed = src->failed;
    return DERAS_OK;
}

int gmatcher_fork(const gmatcher_t *src, gmatcher_t **out)
{
    int rc = gmatcher_new(src->tg, &src->o, out);
    if (!rc && (rc = gmatcher_copy(*out, src)))
        gmatcher_destroy(out);
    return rc;
}

void gmask_apply(const uint32_t *mask, float *logits, int n)
{
    int w = 0;
    for (; w < n / 32; w++) { /* a word at a time: masks are mostly all-on or all-off runs */
        uint32_t m = mask[w];
        if (m == 0xFFFFFFFFu)
            continue;
        float *l = logits + 32 * w;
        if (m == 0) {
            for (int b = 0; b < 32; b++)
                l[b] = -INFINITY;
            continue;
        }
        for (uint32_t off = ~m; off; off &= off - 1)
            l[__builtin_ctz(off)] = -INFINITY;
    }
    for (int t = 32 * w; t < n; t++)
        if (!gmask_get(mask, t))
            logits[t] = -INFINITY;
}

int gmask_count(const uint32_t *mask, int n)
{
    int c = 0;
    for (int w = 0; w < n / 32; w++)
        c += __builtin_popcount(mask[w]);
    for (int t = n / 32 * 32; t < n; t++)
        c += gmask_get(mask, t);
    return c;
}
