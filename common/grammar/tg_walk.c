/* SPDX-License-Identifier: Apache-2.0 */
/* tg_walk.c - one position's split of the vocabulary: a walk of the token trie from the
 * position with its static context, over the transition memo (tg_impl.h).
 *
 * The static context: the chain of unique return positions above the position's rule
 * (tg_analysis.c's ret), ending at PDA_BOTTOM (the chain reaches the root: nothing is
 * unknown) or at PDA_CTX (a rule with several possible returns: brule). Walking a trie
 * node applies its byte to the parent's state. Per node:
 *   - a token ending here is accepted when the state is alive (a stack, the sentence
 *     complete, or a path that reached PDA_CTX with every byte read);
 *   - below a state where a path reached PDA_CTX, a child whose byte can follow brule
 *     somewhere is uncertain (and so is its whole subtree, unless accepted);
 *   - a dead state with nothing uncertain skips its subtree: all rejected.
 * Cost: O(trie nodes visited), each a memo lookup once the memo knows the transition.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/tg_impl.h"

#define TG_MAX_CLOSURE (1 << 16)
#define STATE_BYTES (256 * sizeof(int32_t) + 2 * sizeof(int32_t) + 1)

int tg_memo_init(token_grammar_t *tg)
{
    tg_memo *m = &tg->memo;
    size_t nodes = tg->o.memo_bytes / 4 / 32;
    if (nodes < 4096)
        nodes = 4096;
    if (nodes > (1u << 24))
        nodes = 1u << 24;
    int rc = pda_init(&m->p, tg->g, (int32_t)nodes, tg->o.max_stacks, tg->o.max_depth,
                      TG_MAX_CLOSURE);
    if (rc)
        return rc;
    m->limit = tg->o.memo_bytes - tg->o.memo_bytes / 4;
    m->buf = malloc((size_t)tg->o.max_stacks * sizeof(int32_t));
    m->hmask = 1023;
    m->hash = calloc(m->hmask + 1, sizeof(int32_t));
    if (!m->buf || !m->hash)
        return deras_fail(DERAS_ENOMEM, "token_grammar: out of memory for the memo");
    return DERAS_OK;
}

void tg_memo_free(tg_memo *m)
{
    pda_free(&m->p);
    free(m->tops);
    free(m->off);
    free(m->n);
    free(m->flags);
    free(m->trans);
    free(m->hash);
    free(m->buf);
    *m = (tg_memo){0};
}

size_t tg_memo_bytes(const tg_memo *m)
{
    return (size_t)m->cap_states * STATE_BYTES + (size_t)m->cap_tops * sizeof(int32_t) +
           ((size_t)m->hmask + 1) * sizeof(int32_t) + (size_t)m->p.cap * 32;
}

static void memo_clear(tg_memo *m)
{
    pda_truncate(&m->p, 0);
    m->n_states = 0;
    m->n_tops = 0;
    memset(m->hash, 0, ((size_t)m->hmask + 1) * sizeof(int32_t));
}

static bool memo_over(const tg_memo *m)
{
    return (size_t)m->cap_states * STATE_BYTES + (size_t)m->cap_tops * 4 > m->limit / 2 ||
           m->p.len > m->p.cap / 2;
}

static void sort_tops(int32_t *a, int n)
{
    for (int i = 1; i < n; i++) { /* states hold few stacks; insertion sort */
        int32_t x = a[i];
        int j = i;
        while (j > 0 && a[j - 1] > x) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = x;
    }
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t state_hash(const int32_t *t, int n, int flags)
{
    uint32_t h = 2166136261u ^ (uint32_t)flags;
    for (int i = 0; i < n; i++)
        h = (h ^ (uint32_t)t[i]) * 16777619u;
    return h ^ (h >> 15);
}

static int grow(void **p, size_t elem, int64_t need, int64_t *cap)
{
    if (need <= *cap)
        return DERAS_OK;
    int64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return deras_fail(DERAS_ENOMEM, "token_grammar: out of memory for the memo");
    *p = q;
    *cap = c;
    return DERAS_OK;
}

static int rehash(tg_memo *m)
{
    uint32_t cap = (m->hmask + 1) * 2;
    int32_t *h = calloc(cap, sizeof(int32_t));
    if (!h)
        return deras_fail(DERAS_ENOMEM, "token_grammar: out of memory for the memo");
    for (int32_t s = 0; s < m->n_states; s++) {
        uint32_t j = state_hash(m->tops + m->off[s], m->n[s], m->flags[s]) & (cap - 1);
        while (h[j])
            j = (j + 1) & (cap - 1);
        h[j] = s + 1;
    }
    free(m->hash);
    m->hash = h;
    m->hmask = cap - 1;
    return DERAS_OK;
}

/* The id of state o (TG_DEAD for nothing alive), interned if new; TG_MEMO_FULL past the
 * limit. */
static int intern(tg_memo *m, pda_out *o, int32_t *id)
{
    int flags = (o->accept ? 1 : 0) | (o->ctx ? 2 : 0);
    if (o->n == 0 && !flags) {
        *id = TG_DEAD;
        return DERAS_OK;
    }
    if (o->n > 16)
        qsort(o->top, (size_t)o->n, sizeof(int32_t), cmp_i32);
    else
        sort_tops(o->top, o->n);
    uint32_t h = state_hash(o->top, o->n, flags), j = h & m->hmask;
    for (; m->hash[j]; j = (j + 1) & m->hmask) {
        int32_t s = m->hash[j] - 1;
        if (m->n[s] == o->n && m->flags[s] == flags &&
            memcmp(m->tops + m->off[s], o->top, (size_t)o->n * sizeof(int32_t)) == 0) {
            *id = s;
            return DERAS_OK;
        }
    }
    if ((size_t)(m->n_states + 1) * STATE_BYTES + (size_t)(m->n_tops + o->n) * 4 > m->limit)
        return TG_MEMO_FULL;
    int64_t cs = m->cap_states, ct = m->cap_tops;
    int rc = grow((void **)&m->tops, sizeof(int32_t), m->n_tops + o->n, &ct);
    m->cap_tops = ct;
    if (!rc && m->n_states + 1 > cs) {
        int64_t c = cs;
        if (!(rc = grow((void **)&m->off, sizeof(int32_t), m->n_states + 1, &c))) {
            c = cs;
            if (!(rc = grow((void **)&m->n, sizeof(int32_t), m->n_states + 1, &c))) {
                c = cs;
                if (!(rc = grow((void **)&m->flags, 1, m->n_states + 1, &c))) {
                    c = cs;
                    rc = grow((void **)&m->trans, 256 * sizeof(int32_t), m->n_states + 1, &c);
                }
            }
        }
        if (!rc)
            m->cap_states = (int32_t)c;
    }
    if (rc)
        return rc;
    int32_t s = m->n_states++;
    m->off[s] = (int32_t)m->n_tops;
    m->n[s] = o->n;
    m->flags[s] = (uint8_t)flags;
    memcpy(m->tops + m->n_tops, o->top, (size_t)o->n * sizeof(int32_t));
    m->n_tops += o->n;
    for (int b = 0; b < 256; b++)
        m->trans[256 * (size_t)s + b] = TG_UNKNOWN;
    m->hash[j] = s + 1;
    if (2u * (uint32_t)m->n_states > m->hmask && (rc = rehash(m)))
        return rc;
    *id = s;
    return DERAS_OK;
}

/* A budget error of the memo's arena is the memo running out; others are the grammar's. */
static int memo_rc(const tg_memo *m, int rc)
{
    return rc == DERAS_ERANGE && m->p.len >= m->p.cap ? TG_MEMO_FULL : rc;
}

static int next_state(tg_memo *m, int32_t s, unsigned byte, int32_t *out)
{
    int32_t t = m->trans[256 * (size_t)s + byte];
    if (t != TG_UNKNOWN) {
        *out = t;
        return DERAS_OK;
    }
    pda_out o = {.top = m->buf};
    int rc = pda_step(&m->p, m->tops + m->off[s], m->n[s], byte, &o);
    if (rc)
        return memo_rc(m, rc);
    if ((rc = intern(m, &o, &t)))
        return rc;
    m->trans[256 * (size_t)s + byte] = t;
    *out = t;
    return DERAS_OK;
}

static void add_range(int32_t *list, int32_t *n, const int32_t *sorted, int32_t a, int32_t b)
{
    memcpy(list + *n, sorted + a, (size_t)(b - a) * sizeof(int32_t));
    *n += b - a;
}

static int walk_once(token_grammar_t *tg, int32_t pos)
{
    const grammar_t *g = tg->g;
    const gvocab_t *v = tg->v;
    tg_memo *m = &tg->memo;
    tg->n_acc = tg->n_unc = 0;
    int32_t r = g->rule_of[pos], base = PDA_CTX, k = 0;
    for (;;) {
        int32_t x = tg->ret[r];
        if (x == RET_BOTTOM) {
            base = PDA_BOTTOM;
            break;
        }
        if (x < 0 || k >= tg->o.max_depth - 1)
            break; /* r has several returns (or the chain is too long to follow): unknown */
        tg->frames[k++] = x;
        r = g->rule_of[x];
    }
    const uint64_t *follow = base == PDA_CTX ? tg->follow + 4 * r : NULL;
    int32_t parent = base, top;
    int rc = DERAS_OK;
    for (int i = k - 1; i >= 0 && !rc; i--)
        rc = pda_cons(&m->p, tg->frames[i], parent, &parent);
    if (rc || (rc = pda_cons(&m->p, pos, parent, &top)))
        return memo_rc(m, rc);
    m->buf[0] = top;
    pda_out o = {.top = m->buf, .n = 1};
    int32_t *st = tg->st;
    uint8_t *un = tg->un;
    if ((rc = intern(m, &o, &st[0])))
        return rc;
    un[0] = 0;
    for (int32_t i = 1; i < v->n_nodes;) {
        int d = v->ndepth[i];
        int32_t ps = st[d - 1], s = TG_DEAD;
        unsigned byte = v->nbyte[i];
        bool u = un[d - 1] || (ps >= 0 && (m->flags[ps] & 2) && gset_has(follow, byte));
        if (ps >= 0 && m->n[ps] > 0 && (rc = next_state(m, ps, byte, &s)))
            return rc;
        if (s == TG_DEAD) {
            if (u)
                add_range(tg->unc, &tg->n_unc, v->sorted, v->sub0[i], v->sub1[i]);
            i = v->nend[i];
            continue;
        }
        st[d] = s;
        un[d] = u;
        if (v->here1[i] > v->sub0[i]) {
            if (m->n[s] > 0 || m->flags[s])
                add_range(tg->acc, &tg->n_acc, v->sorted, v->sub0[i], v->here1[i]);
            else if (u)
                add_range(tg->unc, &tg->n_unc, v->sorted, v->sub0[i], v->here1[i]);
        }
        i++;
    }
    return DERAS_OK;
}

int tg_walk(token_grammar_t *tg, int32_t pos)
{
    tg_memo *m = &tg->memo;
    if (memo_over(m)) {
        memo_clear(m);
        tg->stats.memo_resets++;
    }
    int rc = walk_once(tg, pos);
    if (rc == TG_MEMO_FULL) {
        memo_clear(m);
        tg->stats.memo_resets++;
        rc = walk_once(tg, pos);
    }
    if (rc == TG_MEMO_FULL) {
        memo_clear(m);
        return deras_fail(DERAS_ERANGE, "token_grammar: one position's token walk needs more "
                          "than memo_bytes %zu (a grammar too ambiguous for token masks)",
                          tg->o.memo_bytes);
    }
    return rc;
}
