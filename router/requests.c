/* SPDX-License-Identifier: Apache-2.0 */
/* requests.c - the router's live requests (see requests.h).
 *
 * Storage: an array of slot pointers that doubles when full, and a free list of slot
 * indices; a slot is allocated once and reused for the life of the process, buffers
 * included. Two hash tables with chaining through the records (by client key and by
 * rid) double with the live count so chains stay short; the key hash is FNV-1a over
 * identity and id. The live list is an intrusive list (common/base/list.h) in admission
 * order. The deadline heap is a binary min-heap of record pointers whose
 * positions are kept in the records, so any request leaves it in O(log n).
 */
#include "router/requests.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

/* Buffers a finished request may keep for the next one in its slot. */
#define RQ_KEEP_BYTES (256u << 10)

struct rq_table {
    const tokenizer_t *tok;
    rq_t **slots;
    int n_slots, cap_slots;
    int *free_list;
    int n_free;

    rq_t **by_key, **by_rid; /* n_buckets each, a power of two */
    size_t n_buckets;

    list_node live;          /* admission order */
    int n_live;

    rq_t **heap;
    int n_heap, cap_heap;
};

static uint64_t key_hash(const void *ident, int ident_len, const char *id)
{
    uint64_t h = 1469598103934665603ull;
    const uint8_t *p = ident;
    for (int i = 0; i < ident_len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull; /* separator: ("ab","c") != ("a","bc") */
    for (const uint8_t *q = (const uint8_t *)id; *q; q++)
        h = (h ^ *q) * 1099511628211ull;
    return h;
}

static uint64_t rid_hash(uint64_t rid)
{
    rid ^= rid >> 33;
    rid *= 0xff51afd7ed558ccdull;
    rid ^= rid >> 33;
    return rid;
}

int rq_table_new(const tokenizer_t *tok, rq_table_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "rq_table_new: NULL out");
    rq_table_t *t = *out = calloc(1, sizeof *t);
    if (!t)
        goto nomem;
    t->tok = tok;
    list_init(&t->live);
    t->n_buckets = 64;
    t->by_key = calloc(t->n_buckets, sizeof *t->by_key);
    t->by_rid = calloc(t->n_buckets, sizeof *t->by_rid);
    if (!t->by_key || !t->by_rid)
        goto nomem;
    return DERAS_OK;
nomem:
    rq_table_destroy(out);
    return deras_fail(DERAS_ENOMEM, "rq_table_new: out of memory");
}

void rq_table_destroy(rq_table_t **tp)
{
    if (!tp || !*tp)
        return;
    rq_table_t *t = *tp;
    for (int i = 0; i < t->n_slots; i++) {
        rq_t *r = t->slots[i];
        for (int k = 0; k < REQ_MAX_N; k++)
            stream_destroy(&r->samples[k].st);
        free(r->prompt);
        free(r->grammar);
        free(r);
    }
    free(t->slots);
    free(t->free_list);
    free(t->by_key);
    free(t->by_rid);
    free(t->heap);
    free(t);
    *tp = NULL;
}

int rq_acquire(rq_table_t *t, rq_t **out)
{
    *out = NULL;
    rq_t *r;
    if (t->n_free > 0) {
        r = t->slots[t->free_list[--t->n_free]];
    } else {
        if (t->n_slots == t->cap_slots) {
            int cap = t->cap_slots ? t->cap_slots * 2 : 64;
            rq_t **s = realloc(t->slots, (size_t)cap * sizeof *s);
            if (!s)
                goto nomem;
            t->slots = s;
            int *f = realloc(t->free_list, (size_t)cap * sizeof *f);
            if (!f)
                goto nomem;
            t->free_list = f;
            t->cap_slots = cap;
        }
        if (!(r = calloc(1, sizeof *r)))
            goto nomem;
        r->slot = t->n_slots;
        t->slots[t->n_slots++] = r;
    }
    /* keep the pooled buffers, reset everything else */
    int32_t *prompt = r->prompt;
    int prompt_cap = r->prompt_cap, slot = r->slot;
    stream_t *st[REQ_MAX_N];
    for (int k = 0; k < REQ_MAX_N; k++)
        st[k] = r->samples[k].st;
    memset(r, 0, sizeof *r);
    r->prompt = prompt;
    r->prompt_cap = prompt_cap;
    r->slot = slot;
    for (int k = 0; k < REQ_MAX_N; k++)
        r->samples[k].st = st[k];
    r->state = RQ_QUEUED;
    r->worker = -1;
    r->fd = -1;
    r->heap_at = -1;
    *out = r;
    return DERAS_OK;
nomem:
    return deras_fail(DERAS_ENOMEM, "rq_acquire: out of memory");
}

void rq_discard(rq_table_t *t, rq_t *r)
{
    if (!r || r->state == RQ_FREE)
        return;
    r->state = RQ_FREE;
    rq_set_grammar(r, NULL, 0);
    if (r->prompt_cap * (int)sizeof *r->prompt > (int)RQ_KEEP_BYTES) {
        free(r->prompt);
        r->prompt = NULL;
        r->prompt_cap = 0;
    }
    for (int k = 0; k < REQ_MAX_N; k++)
        stream_trim(r->samples[k].st, RQ_KEEP_BYTES);
    t->free_list[t->n_free++] = r->slot;
}

void rq_set_grammar(rq_t *r, char *g, size_t n)
{
    free(r->grammar);
    r->grammar = g;
    r->grammar_len = g ? n : 0;
}

int rq_reserve_prompt(rq_t *r, int n)
{
    if (n <= r->prompt_cap)
        return DERAS_OK;
    int cap = r->prompt_cap ? r->prompt_cap : 256;
    while (cap < n)
        cap *= 2;
    int32_t *p = realloc(r->prompt, (size_t)cap * sizeof *p);
    if (!p)
        return deras_fail(DERAS_ENOMEM, "request: out of memory for %d prompt ids", n);
    r->prompt = p;
    r->prompt_cap = cap;
    return DERAS_OK;
}

int rq_start_samples(rq_table_t *t, rq_t *r)
{
    const char *stops[PROTO_MAX_STOPS];
    for (int i = 0; i < r->n_stops; i++)
        stops[i] = r->stops[i];
    r->n_done = r->n_finals = 0;
    for (int k = 0; k < r->params.n; k++) {
        rq_sample *s = &r->samples[k];
        int rc;
        if (!s->st && (rc = stream_new(t->tok, &s->st)))
            return rc;
        rc = stream_start(s->st, stops, r->stop_lens, r->n_stops, r->params.sp.n_logprobs > 0,
                          r->params.sp.min_tokens);
        if (rc)
            return rc;
        s->done = s->worker_done = s->touched = false;
        s->finish = FINISH_STOP;
        s->abort_reason = NULL;
        s->t_first_us = s->t_last_us = 0;
        s->spec = (spec_counters){0};
    }
    return DERAS_OK;
}

/* ---- hashing ---- */

static void hash_link(rq_table_t *t, rq_t *r)
{
    size_t mask = t->n_buckets - 1;
    size_t kb = key_hash(r->ident, r->ident_len, r->id) & mask;
    r->h_key_next = t->by_key[kb];
    t->by_key[kb] = r;
    size_t rb = rid_hash(r->rid) & mask;
    r->h_rid_next = t->by_rid[rb];
    t->by_rid[rb] = r;
}

static void unlink_chain(rq_t **head, rq_t *r, size_t off_next)
{
    for (rq_t **pp = head; *pp; pp = (rq_t **)((char *)*pp + off_next))
        if (*pp == r) {
            *pp = *(rq_t **)((char *)r + off_next);
            return;
        }
}

static void hash_unlink_rid(rq_table_t *t, rq_t *r)
{
    size_t rb = rid_hash(r->rid) & (t->n_buckets - 1);
    unlink_chain(&t->by_rid[rb], r, offsetof(rq_t, h_rid_next));
}

static void hash_unlink(rq_table_t *t, rq_t *r)
{
    size_t kb = key_hash(r->ident, r->ident_len, r->id) & (t->n_buckets - 1);
    unlink_chain(&t->by_key[kb], r, offsetof(rq_t, h_key_next));
    hash_unlink_rid(t, r);
}

/* Double the buckets and rehash the live list. On ENOMEM keep the old size (chains just
 * get longer). */
static void hash_grow(rq_table_t *t)
{
    size_t n = t->n_buckets * 2;
    rq_t **k = calloc(n, sizeof *k), **d = calloc(n, sizeof *d);
    if (!k || !d) {
        free(k);
        free(d);
        return;
    }
    free(t->by_key);
    free(t->by_rid);
    t->by_key = k;
    t->by_rid = d;
    t->n_buckets = n;
    for (rq_t *r = rq_first(t); r; r = rq_next(t, r))
        hash_link(t, r);
}

/* ---- deadline heap ---- */

static void heap_swap(rq_table_t *t, int a, int b)
{
    rq_t *x = t->heap[a];
    t->heap[a] = t->heap[b];
    t->heap[b] = x;
    t->heap[a]->heap_at = a;
    t->heap[b]->heap_at = b;
}

static void heap_up(rq_table_t *t, int i)
{
    while (i > 0) {
        int p = (i - 1) / 2;
        if (t->heap[p]->deadline_us <= t->heap[i]->deadline_us)
            break;
        heap_swap(t, i, p);
        i = p;
    }
}

static void heap_down(rq_table_t *t, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < t->n_heap && t->heap[l]->deadline_us < t->heap[m]->deadline_us)
            m = l;
        if (r < t->n_heap && t->heap[r]->deadline_us < t->heap[m]->deadline_us)
            m = r;
        if (m == i)
            return;
        heap_swap(t, i, m);
        i = m;
    }
}

static int heap_push(rq_table_t *t, rq_t *r)
{
    if (t->n_heap == t->cap_heap) {
        int cap = t->cap_heap ? t->cap_heap * 2 : 64;
        rq_t **h = realloc(t->heap, (size_t)cap * sizeof *h);
        if (!h)
            return deras_fail(DERAS_ENOMEM, "rq_insert: out of memory for the deadline heap");
        t->heap = h;
        t->cap_heap = cap;
    }
    r->heap_at = t->n_heap;
    t->heap[t->n_heap++] = r;
    heap_up(t, r->heap_at);
    return DERAS_OK;
}

static void heap_remove(rq_table_t *t, rq_t *r)
{
    int i = r->heap_at;
    if (i < 0)
        return;
    r->heap_at = -1;
    if (--t->n_heap == i)
        return;
    rq_t *moved = t->heap[t->n_heap];
    t->heap[i] = moved;
    moved->heap_at = i;
    heap_up(t, i);
    heap_down(t, moved->heap_at);
}

/* ---- public ---- */

int rq_insert(rq_table_t *t, rq_t *r)
{
    if (r->deadline_us > 0) {
        int rc = heap_push(t, r);
        if (rc)
            return rc;
    }
    if ((size_t)t->n_live + 1 > t->n_buckets)
        hash_grow(t);
    hash_link(t, r);
    list_push_back(&t->live, &r->live);
    t->n_live++;
    return DERAS_OK;
}

void rq_set_rid(rq_table_t *t, rq_t *r, uint64_t rid)
{
    hash_unlink_rid(t, r);
    r->rid = rid;
    size_t rb = rid_hash(rid) & (t->n_buckets - 1);
    r->h_rid_next = t->by_rid[rb];
    t->by_rid[rb] = r;
}

void rq_release(rq_table_t *t, rq_t *r)
{
    if (!r || r->state == RQ_FREE)
        return;
    heap_remove(t, r);
    hash_unlink(t, r);
    list_remove(&r->live);
    t->n_live--;
    rq_discard(t, r);
}

rq_t *rq_find_key(const rq_table_t *t, const void *ident, int ident_len, const char *id)
{
    size_t kb = key_hash(ident, ident_len, id) & (t->n_buckets - 1);
    for (rq_t *r = t->by_key[kb]; r; r = r->h_key_next)
        if (r->ident_len == ident_len && !memcmp(r->ident, ident, (size_t)ident_len) &&
            !strcmp(r->id, id))
            return r;
    return NULL;
}

rq_t *rq_find_rid(const rq_table_t *t, uint64_t rid)
{
    size_t rb = rid_hash(rid) & (t->n_buckets - 1);
    for (rq_t *r = t->by_rid[rb]; r; r = r->h_rid_next)
        if (r->rid == rid)
            return r;
    return NULL;
}

rq_t *rq_first(const rq_table_t *t)
{
    return list_entry(list_first(&t->live), rq_t, live);
}

rq_t *rq_next(const rq_table_t *t, const rq_t *r)
{
    return list_linked(&r->live) ? list_entry(list_next(&t->live, &r->live), rq_t, live) : NULL;
}

int rq_count(const rq_table_t *t)
{
    return t->n_live;
}

rq_t *rq_next_deadline(const rq_table_t *t)
{
    return t->n_heap ? t->heap[0] : NULL;
}

int rq_slots(const rq_table_t *t)
{
    return t->n_slots;
}
