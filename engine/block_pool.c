/* SPDX-License-Identifier: Apache-2.0 */
/* block_pool.c - KV cache blocks: reference counts, the free queue, the prefix-cache map.
 *
 * Everything is an array indexed by block id, sized once in block_pool_new(). The free
 * queue is an intrusive list (common/base/list.h) through `link`, one node per block, its
 * sentinel in `free_q`; a node's index in `link` is its block id, and a block that is not
 * queued has NULL links. Uncached blocks are pushed at the head and cached ones appended at the
 * tail, so the queue is always "uncached..., cached in freeing order" and popping the head
 * spends worthless blocks before it evicts the least recently freed cached one. (vLLM V1
 * appends every freed block at the tail; keeping empty blocks ahead costs nothing and
 * lets cached prefixes live longer.)
 *
 * The map is a power-of-two bucket array (at least 2 * n_blocks, so chains stay short)
 * of intrusive chains through hnext/hprev; 0 ends a chain, which is safe because the null
 * block is never registered. A registered block keeps its hash, tokens and parent; a
 * lookup compares all of them, so a colliding hash costs a comparison, never a wrong hit.
 */
#include "block_pool.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/list.h"
#include "common/base/status.h"

struct block_pool {
    int n_blocks, block_size;
    bool caching;
    int n_free, n_cached;
    int32_t *refs;        /* (n_blocks) */
    uint64_t *gen;        /* (n_blocks) content generation */
    list_node free_q;     /* the free queue's sentinel */
    list_node *link;      /* (n_blocks) free-queue nodes */
    uint8_t *cached;      /* (n_blocks) registered in the map */
    uint8_t *mark;        /* (n_blocks) scratch for block_pool_check only */
    /* prefix cache, allocated only with caching on */
    uint32_t bucket_mask;
    int32_t *buckets;       /* (bucket_mask + 1) first block of each chain, 0: empty */
    int32_t *hnext, *hprev; /* (n_blocks) chain links, 0: none */
    uint64_t *hash;         /* (n_blocks) */
    int32_t *parent;        /* (n_blocks) */
    uint64_t *parent_gen;   /* (n_blocks) */
    int32_t *tokens;        /* (n_blocks, block_size) */
};

static int32_t block_of(const block_pool_t *bp, const list_node *n)
{
    return (int32_t)(n - bp->link);
}

static void queue_remove(block_pool_t *bp, int32_t b)
{
    assert(list_linked(&bp->link[b]));
    list_remove(&bp->link[b]);
    bp->n_free--;
}

/* Queue b at the head (spent first) or at the tail (evicted last). */
static void queue_push(block_pool_t *bp, int32_t b, bool tail)
{
    assert(!list_linked(&bp->link[b]));
    if (tail)
        list_push_back(&bp->free_q, &bp->link[b]);
    else
        list_push_front(&bp->free_q, &bp->link[b]);
    bp->n_free++;
}

static uint32_t bucket_of(const block_pool_t *bp, uint64_t h)
{
    /* fold the high half in: tests keep only a few low bits of hashes to force collisions */
    return (uint32_t)(h ^ (h >> 32)) & bp->bucket_mask;
}

static void map_remove(block_pool_t *bp, int32_t b)
{
    assert(bp->cached[b]);
    int32_t p = bp->hprev[b], n = bp->hnext[b];
    if (p)
        bp->hnext[p] = n;
    else
        bp->buckets[bucket_of(bp, bp->hash[b])] = n;
    if (n)
        bp->hprev[n] = p;
    bp->hnext[b] = bp->hprev[b] = 0;
    bp->cached[b] = 0;
    bp->n_cached--;
}

/* Push b (hash already set) at the head of its bucket's chain. */
static void map_insert(block_pool_t *bp, int32_t b)
{
    uint32_t k = bucket_of(bp, bp->hash[b]);
    int32_t head = bp->buckets[k];
    bp->hprev[b] = 0;
    bp->hnext[b] = head;
    if (head)
        bp->hprev[head] = b;
    bp->buckets[k] = b;
    bp->cached[b] = 1;
    bp->n_cached++;
}

int block_pool_new(int n_blocks, int block_size, bool caching, block_pool_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "block_pool_new: NULL out");
    *out = NULL;
    if (n_blocks < 2 || n_blocks > INT32_MAX / 4 || block_size < 1)
        return deras_fail(DERAS_EINVAL, "block pool: n_blocks must be in [2, %d] and "
                          "block_size >= 1, got %d and %d", INT32_MAX / 4, n_blocks, block_size);
    size_t n = (size_t)n_blocks;
    block_pool_t *bp = calloc(1, sizeof *bp);
    if (!bp)
        goto fail;
    bp->n_blocks = n_blocks;
    bp->block_size = block_size;
    bp->caching = caching;
    bp->refs = calloc(n, sizeof *bp->refs);
    bp->gen = calloc(n, sizeof *bp->gen);
    bp->link = calloc(n, sizeof *bp->link);
    bp->cached = calloc(n, 1);
    bp->mark = calloc(n, 1);
    if (!bp->refs || !bp->gen || !bp->link || !bp->cached || !bp->mark)
        goto fail;
    if (caching) {
        size_t nb = 1;
        while (nb < 2 * n)
            nb <<= 1;
        if (n > SIZE_MAX / sizeof(int32_t) / (size_t)block_size)
            goto fail;
        bp->bucket_mask = (uint32_t)(nb - 1);
        bp->buckets = calloc(nb, sizeof *bp->buckets);
        bp->hnext = calloc(n, sizeof *bp->hnext);
        bp->hprev = calloc(n, sizeof *bp->hprev);
        bp->hash = calloc(n, sizeof *bp->hash);
        bp->parent = calloc(n, sizeof *bp->parent);
        bp->parent_gen = calloc(n, sizeof *bp->parent_gen);
        bp->tokens = calloc(n * (size_t)block_size, sizeof *bp->tokens);
        if (!bp->buckets || !bp->hnext || !bp->hprev || !bp->hash || !bp->parent ||
            !bp->parent_gen || !bp->tokens)
            goto fail;
    }
    /* every usable block free, in id order; the null block stays out of the queue */
    list_init(&bp->free_q);
    for (int32_t b = 1; b < n_blocks; b++)
        queue_push(bp, b, true);
    *out = bp;
    return DERAS_OK;

fail:
    block_pool_destroy(&bp);
    return deras_fail(DERAS_ENOMEM, "block pool: out of memory for %d blocks of %d tokens",
                      n_blocks, block_size);
}

void block_pool_destroy(block_pool_t **bpp)
{
    if (!bpp || !*bpp)
        return;
    block_pool_t *bp = *bpp;
    free(bp->refs);
    free(bp->gen);
    free(bp->link);
    free(bp->cached);
    free(bp->mark);
    free(bp->buckets);
    free(bp->hnext);
    free(bp->hprev);
    free(bp->hash);
    free(bp->parent);
    free(bp->parent_gen);
    free(bp->tokens);
    free(bp);
    *bpp = NULL;
}

int block_pool_n_free(const block_pool_t *bp)
{
    return bp->n_free;
}

int block_pool_n_cached(const block_pool_t *bp)
{
    return bp->n_cached;
}

int32_t block_pool_alloc(block_pool_t *bp, bool *evicted)
{
    *evicted = false;
    list_node *head = list_first(&bp->free_q);
    if (!head)
        return 0;
    int32_t b = block_of(bp, head);
    assert(bp->refs[b] == 0);
    queue_remove(bp, b);
    if (bp->cached[b]) {
        map_remove(bp, b);
        *evicted = true;
    }
    bp->gen[b]++;
    bp->refs[b] = 1;
    return b;
}

void block_pool_ref(block_pool_t *bp, int32_t b)
{
    assert(b > 0 && b < bp->n_blocks);
    if (bp->refs[b]++ == 0)
        queue_remove(bp, b);
}

bool block_pool_unref(block_pool_t *bp, int32_t b)
{
    assert(b > 0 && b < bp->n_blocks && bp->refs[b] > 0);
    if (--bp->refs[b] > 0)
        return false;
    queue_push(bp, b, bp->cached[b]);
    return true;
}

int block_pool_refs(const block_pool_t *bp, int32_t b)
{
    return bp->refs[b];
}

uint64_t block_pool_gen(const block_pool_t *bp, int32_t b)
{
    return bp->gen[b];
}

bool block_pool_is_cached(const block_pool_t *bp, int32_t b)
{
    return bp->cached[b] != 0;
}

bool block_pool_holds_tokens(const block_pool_t *bp, int32_t b, const int32_t *tokens)
{
    return bp->cached[b] && !memcmp(bp->tokens + (size_t)b * (size_t)bp->block_size, tokens,
                                    (size_t)bp->block_size * sizeof *tokens);
}

bool block_pool_holds(const block_pool_t *bp, int32_t b, uint64_t hash, const int32_t *tokens,
                      int32_t parent, uint64_t parent_gen)
{
    return bp->cached[b] && bp->hash[b] == hash && bp->parent[b] == parent &&
           bp->parent_gen[b] == parent_gen && block_pool_holds_tokens(bp, b, tokens);
}

int32_t block_pool_lookup(const block_pool_t *bp, uint64_t hash, const int32_t *tokens,
                          int32_t parent, uint64_t parent_gen)
{
    if (!bp->caching)
        return 0;
    for (int32_t b = bp->buckets[bucket_of(bp, hash)]; b; b = bp->hnext[b])
        if (block_pool_holds(bp, b, hash, tokens, parent, parent_gen))
            return b;
    return 0;
}

void block_pool_register(block_pool_t *bp, int32_t b, uint64_t hash, const int32_t *tokens,
                         int32_t parent, uint64_t parent_gen)
{
    assert(bp->caching && b > 0 && b < bp->n_blocks && !bp->cached[b] && bp->refs[b] > 0);
    bp->hash[b] = hash;
    bp->parent[b] = parent;
    bp->parent_gen[b] = parent_gen;
    memcpy(bp->tokens + (size_t)b * (size_t)bp->block_size, tokens,
           (size_t)bp->block_size * sizeof *tokens);
    map_insert(bp, b);
}

void block_pool_rechain(block_pool_t *bp, int32_t b, uint64_t hash, int32_t parent,
                        uint64_t parent_gen)
{
    map_remove(bp, b);
    bp->hash[b] = hash;
    bp->parent[b] = parent;
    bp->parent_gen[b] = parent_gen;
    map_insert(bp, b);
}

void block_pool_invalidate(block_pool_t *bp, int32_t b)
{
    assert(b > 0 && b < bp->n_blocks && bp->refs[b] > 0);
    if (bp->cached[b])
        map_remove(bp, b);
    bp->gen[b]++;
}

#define BROKEN(...) return deras_fail(DERAS_EINTERNAL, "block pool invariant broken: " __VA_ARGS__)

/* A queue node's block id; -1 for the sentinel or a pointer outside the nodes. */
static int32_t node_id(const block_pool_t *bp, const list_node *n)
{
    return n >= bp->link && n < bp->link + bp->n_blocks ? block_of(bp, n) : -1;
}

static int check_queue(const block_pool_t *bp, uint8_t *mark)
{
    const list_node *s = &bp->free_q, *prev = s;
    int n = 0;
    bool seen_cached = false;
    for (const list_node *node = s->next; node != s; prev = node, node = node->next) {
        int32_t b = node_id(bp, node);
        if (b <= 0 || b >= bp->n_blocks)
            BROKEN("free queue holds id %d (null block or out of range) after %d entries", b, n);
        if (mark[b])
            BROKEN("free queue visits block %d twice (cycle)", b);
        mark[b] = 1;
        if (node->prev != prev)
            BROKEN("free queue: block %d has prev %d, expected %d (-1: the sentinel)", b,
                   node_id(bp, node->prev), node_id(bp, prev));
        if (bp->refs[b] != 0)
            BROKEN("free queue holds block %d with %d references", b, bp->refs[b]);
        if (bp->cached[b])
            seen_cached = true;
        else if (seen_cached)
            BROKEN("free queue: uncached block %d after a cached one (uncached go first)", b);
        n++;
    }
    if (s->prev != prev)
        BROKEN("free queue: tail link %d, expected %d", node_id(bp, s->prev), node_id(bp, prev));
    if (n != bp->n_free)
        BROKEN("free queue holds %d blocks, n_free says %d", n, bp->n_free);
    return DERAS_OK;
}

static int check_map(const block_pool_t *bp, uint8_t *mark)
{
    int n = 0;
    for (uint32_t k = 0; bp->caching && k <= bp->bucket_mask; k++) {
        int32_t prev = 0;
        for (int32_t b = bp->buckets[k]; b; prev = b, b = bp->hnext[b]) {
            if (b <= 0 || b >= bp->n_blocks)
                BROKEN("cache bucket %u holds id %d (null block or out of range)", k, b);
            if (mark[b] & 2)
                BROKEN("cache map visits block %d twice", b);
            mark[b] |= 2;
            if (!bp->cached[b])
                BROKEN("cache map holds block %d, which is not marked registered", b);
            if (bucket_of(bp, bp->hash[b]) != k)
                BROKEN("block %d sits in bucket %u, its hash belongs in %u", b, k,
                       bucket_of(bp, bp->hash[b]));
            if (bp->hprev[b] != prev)
                BROKEN("cache chain: block %d has prev %d, expected %d", b, bp->hprev[b], prev);
            /* a parent at an old generation is only a dead link; at the current one, a cycle */
            if (bp->parent[b] < 0 || bp->parent[b] >= bp->n_blocks ||
                (bp->parent[b] == b && bp->parent_gen[b] == bp->gen[b]))
                BROKEN("cached block %d has parent %d", b, bp->parent[b]);
            n++;
        }
    }
    if (n != bp->n_cached)
        BROKEN("cache map holds %d blocks, n_cached says %d", n, bp->n_cached);
    for (int32_t b = 0; b < bp->n_blocks; b++)
        if (bp->cached[b] && !(mark[b] & 2))
            BROKEN("block %d is marked registered but is not in the cache map", b);
    return DERAS_OK;
}

int block_pool_check(const block_pool_t *bp, const int32_t *refs)
{
    /* mark is scratch, not state: the pool is heap-allocated, never a const object */
    uint8_t *mark = ((block_pool_t *)bp)->mark;
    memset(mark, 0, (size_t)bp->n_blocks);
    if (bp->refs[0] || bp->cached[0] || bp->link[0].next || bp->link[0].prev || bp->gen[0])
        BROKEN("null block touched (refs %d, cached %d, queued %d, generation %llu)",
               bp->refs[0], bp->cached[0], bp->link[0].next != NULL,
               (unsigned long long)bp->gen[0]);
    int n_referenced = 0;
    for (int32_t b = 1; b < bp->n_blocks; b++) {
        if (bp->refs[b] != refs[b])
            BROKEN("block %d has %d references, the block tables point at it %d times", b,
                   bp->refs[b], refs[b]);
        n_referenced += bp->refs[b] > 0;
    }
    if (n_referenced + bp->n_free != bp->n_blocks - 1)
        BROKEN("free %d + referenced %d != usable %d", bp->n_free, n_referenced,
               bp->n_blocks - 1);
    int st = check_queue(bp, mark);
    if (st)
        return st;
    for (int32_t b = 1; b < bp->n_blocks; b++)
        if (bp->refs[b] == 0 && !mark[b])
            BROKEN("unreferenced block %d is missing from the free queue", b);
        else if (bp->refs[b] > 0 && (bp->link[b].next || bp->link[b].prev))
            BROKEN("referenced block %d still has free-queue links", b);
    return check_map(bp, mark);
}
