/* SPDX-License-Identifier: Apache-2.0 */
/* bpe.c - vocabulary and merge hashing, and the BPE merge loop of both algorithms.
 *
 * A piece (one pre-tokenized word) starts as one symbol per UTF-8 character; symbols are
 * spans of the piece kept in a doubly linked list. Candidate merges of adjacent symbols
 * wait in a binary heap ordered by priority, then by position (leftmost first), which is
 * the order of Hugging Face's BPE (word.rs) and of SentencePiece / llama.cpp:
 *  - TOK_ALGO_BPE: the pair (left id, right id) must be a merge; priority = its rank
 *    (lower first), looked up in a hash keyed by the id pair, O(1).
 *  - TOK_ALGO_SPM: the pair's concatenated text must be a token; priority = its score
 *    (higher first), looked up in the vocabulary hash, O(1).
 * Heap entries are not removed when a merge invalidates them; an entry is stale when its
 * left symbol is gone, no longer has that right neighbour, or the two spans grew (a
 * symbol only grows), and stale entries are skipped when popped. So a piece of n
 * characters costs O(n log n).
 *
 * Symbols without a token (a character missing from the vocabulary) never merge; at the
 * end they become <0xXX> byte tokens when the model has byte fallback, else the unknown
 * token (consecutive ones fused when fuse_unk), else they are dropped, as Hugging Face
 * does. The working arrays belong to one encode call (struct bpe_work) and grow to the
 * longest piece seen.
 */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

int idvec_push(struct idvec *iv, int32_t id)
{
    if (iv->n == iv->cap) {
        size_t cap = iv->cap ? iv->cap * 2 : 256;
        int32_t *v = realloc(iv->v, cap * sizeof *v);
        if (!v)
            return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory for %zu ids", cap);
        iv->v = v;
        iv->cap = cap;
    }
    iv->v[iv->n++] = id;
    return 0;
}

/* FNV-1a, 32-bit, then a final avalanche so the low bits used by the mask mix well. */
uint32_t tok_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 16777619u;
    }
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    return h;
}

static uint32_t table_size(size_t n)
{
    uint32_t sz = 16;
    while (sz < n * 2)
        sz <<= 1;
    return sz;
}

int strmap_build(struct strmap *m, const struct tokenizer *t)
{
    uint32_t sz = table_size((size_t)t->n_vocab);
    m->slots = malloc(sz * sizeof *m->slots);
    if (!m->slots)
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory for the vocabulary hash");
    memset(m->slots, 0xff, sz * sizeof *m->slots);
    m->mask = sz - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const struct tok_token *tk = &t->tokens[id];
        if (!(tk->flags & TOKF_PRESENT))
            continue;
        const char *s = t->arena + tk->text_off;
        uint32_t i = tok_hash(s, tk->text_len) & m->mask;
        for (;;) {
            int32_t o = m->slots[i];
            if (o < 0) {
                m->slots[i] = id;
                break;
            }
            const struct tok_token *to = &t->tokens[o];
            if (to->text_len == tk->text_len && !memcmp(t->arena + to->text_off, s, tk->text_len)) {
                /* A duplicate string: the later id wins, as in llama.cpp's token_to_id. */
                m->slots[i] = id;
                break;
            }
            i = (i + 1) & m->mask;
        }
    }
    return 0;
}

int32_t strmap_find(const struct strmap *m, const struct tokenizer *t, const char *s, size_t n)
{
    if (!m->slots)
        return -1;
    uint32_t i = tok_hash(s, n) & m->mask;
    for (;;) {
        int32_t o = m->slots[i];
        if (o < 0)
            return -1;
        const struct tok_token *to = &t->tokens[o];
        if (to->text_len == n && !memcmp(t->arena + to->text_off, s, n))
            return o;
        i = (i + 1) & m->mask;
    }
}

void strmap_free(struct strmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

static uint32_t pair_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (uint32_t)k;
}

int pairmap_init(struct pairmap *m, size_t n_expected)
{
    uint32_t sz = table_size(n_expected);
    m->keys = malloc(sz * sizeof *m->keys);
    m->rank = malloc(sz * sizeof *m->rank);
    m->result = malloc(sz * sizeof *m->result);
    if (!m->keys || !m->rank || !m->result) {
        pairmap_free(m);
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory for %zu merges", n_expected);
    }
    memset(m->keys, 0xff, sz * sizeof *m->keys);
    m->mask = sz - 1;
    return 0;
}

void pairmap_put(struct pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t result)
{
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = pair_hash(k) & m->mask;
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == k)
            return;
        i = (i + 1) & m->mask;
    }
    m->keys[i] = k;
    m->rank[i] = rank;
    m->result[i] = result;
}

bool pairmap_get(const struct pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *result)
{
    if (!m->keys)
        return false;
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = pair_hash(k) & m->mask;
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == k) {
            *rank = m->rank[i];
            *result = m->result[i];
            return true;
        }
        i = (i + 1) & m->mask;
    }
    return false;
}

void pairmap_free(struct pairmap *m)
{
    free(m->keys);
    free(m->rank);
    free(m->result);
    m->keys = NULL;
    m->rank = NULL;
    m->result = NULL;
}

struct sym {
    size_t off;
    size_t len; /* 0: merged into its left neighbour */
    int32_t prev, next;
    int32_t id;
};

struct cand {
    double prio; /* lower pops first */
    int32_t left, right;
    size_t len;  /* left.len + right.len when pushed */
    int32_t result;
};

struct bpe_work {
    struct sym *syms;
    size_t cap_syms;
    struct cand *heap;
    size_t n_heap, cap_heap;
};

int bpe_work_new(struct bpe_work **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "bpe_work_new: NULL out");
    if (!(*out = calloc(1, sizeof(struct bpe_work))))
        return deras_fail(DERAS_ENOMEM, "bpe_work_new: out of memory");
    return DERAS_OK;
}

void bpe_work_destroy(struct bpe_work **wp)
{
    if (!wp || !*wp)
        return;
    free((*wp)->syms);
    free((*wp)->heap);
    free(*wp);
    *wp = NULL;
}

static bool cand_less(const struct cand *a, const struct cand *b)
{
    if (a->prio != b->prio)
        return a->prio < b->prio;
    return a->left < b->left;
}

static int heap_push(struct bpe_work *w, const struct cand *c)
{
    if (w->n_heap == w->cap_heap) {
        size_t cap = w->cap_heap ? w->cap_heap * 2 : 64;
        struct cand *h = realloc(w->heap, cap * sizeof *h);
        if (!h)
            return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory for the merge queue");
        w->heap = h;
        w->cap_heap = cap;
    }
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(c, &w->heap[p]))
            break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = *c;
    return 0;
}

static struct cand heap_pop(struct bpe_work *w)
{
    struct cand top = w->heap[0];
    struct cand last = w->heap[--w->n_heap];
    size_t n = w->n_heap, i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct cand *best = &last;
        if (l < n && cand_less(&w->heap[l], best)) {
            m = l;
            best = &w->heap[l];
        }
        if (r < n && cand_less(&w->heap[r], best))
            m = r;
        if (m == i)
            break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

/* Queue the merge of symbols l and r if the model has one. */
static int try_pair(const struct tokenizer *t, const char *s, struct bpe_work *w, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const struct sym *a = &w->syms[l], *b = &w->syms[r];
    struct cand c = {.left = l, .right = r, .len = a->len + b->len};
    if (t->algo == TOK_ALGO_BPE) {
        int32_t rank;
        if (a->id < 0 || b->id < 0 || !pairmap_get(&t->merges, a->id, b->id, &rank, &c.result))
            return 0;
        c.prio = rank;
    } else {
        int32_t id = strmap_find(&t->vocab, t, s + a->off, c.len);
        if (id < 0)
            return 0;
        c.prio = -(double)t->tokens[id].score;
        c.result = id;
    }
    return heap_push(w, &c);
}

/* Emit the ids of a symbol that has no token: byte fallback, unknown token, or nothing. */
static int emit_unknown(const struct tokenizer *t, const char *s, size_t n, bool *prev_unk,
                        struct idvec *out)
{
    int rc;
    if (t->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < n; i++)
            all = all && t->byte_ids[(uint8_t)s[i]] >= 0;
        if (all) {
            for (size_t i = 0; i < n; i++)
                if ((rc = idvec_push(out, t->byte_ids[(uint8_t)s[i]])) < 0)
                    return rc;
            *prev_unk = false;
            return 0;
        }
    }
    if (t->unk_id < 0)
        return 0;
    if (t->fuse_unk && *prev_unk)
        return 0;
    *prev_unk = true;
    return idvec_push(out, t->unk_id);
}

int bpe_encode_piece(const struct tokenizer *t, const char *s, size_t n, struct bpe_work *w,
                     struct idvec *out)
{
    int rc;
    if (n == 0)
        return 0;
    if (n > INT32_MAX)
        return deras_fail(DERAS_ERANGE, "tokenizer: a piece of %zu bytes is too long", n);
    if (t->algo == TOK_ALGO_BPE && t->ignore_merges) {
        int32_t id = strmap_find(&t->vocab, t, s, n);
        if (id >= 0)
            return idvec_push(out, id);
    }
    if (n > w->cap_syms) {
        size_t cap = n < 64 ? 64 : n;
        struct sym *v = realloc(w->syms, cap * sizeof *v);
        if (!v)
            return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory for a %zu-byte piece", n);
        w->syms = v;
        w->cap_syms = cap;
    }
    int32_t n_syms = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        uint8_t b = (uint8_t)s[i];
        if (b >= 0xF0)
            k = 4;
        else if (b >= 0xE0)
            k = 3;
        else if (b >= 0xC0)
            k = 2;
        if (k > n - i)
            k = n - i;
        struct sym *y = &w->syms[n_syms];
        y->off = i;
        y->len = k;
        y->prev = n_syms - 1;
        y->next = i + k < n ? n_syms + 1 : -1;
        y->id = strmap_find(&t->vocab, t, s + i, k);
        n_syms++;
        i += k;
    }
    w->n_heap = 0;
    for (int32_t i = 0; i + 1 < n_syms; i++)
        if ((rc = try_pair(t, s, w, i, i + 1)) < 0)
            return rc;
    while (w->n_heap > 0) {
        struct cand c = heap_pop(w);
        struct sym *a = &w->syms[c.left];
        if (a->len == 0 || a->next != c.right)
            continue;
        struct sym *b = &w->syms[c.right];
        if (a->len + b->len != c.len)
            continue;
        a->len += b->len;
        a->id = c.result;
        a->next = b->next;
        if (b->next >= 0)
            w->syms[b->next].prev = c.left;
        b->len = 0;
        if ((rc = try_pair(t, s, w, a->prev, c.left)) < 0 || (rc = try_pair(t, s, w, c.left, a->next)) < 0)
            return rc;
    }
    bool prev_unk = false;
    for (int32_t i = 0; i >= 0; i = w->syms[i].next) {
        const struct sym *y = &w->syms[i];
        if (y->id >= 0) {
            if ((rc = idvec_push(out, y->id)) < 0)
                return rc;
            prev_unk = false;
        } else if ((rc = emit_unknown(t, s + y->off, y->len, &prev_unk, out)) < 0) {
            return rc;
        }
    }
    return 0;
}
