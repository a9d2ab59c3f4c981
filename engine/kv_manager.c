/* SPDX-License-Identifier: Apache-2.0 */
/* kv_manager.c - KV cache accounting: block tables, token counts, prefix claim and commit,
 * fork, copy-on-write and truncation (see kv_manager.h for the contract).
 *
 * The blocks themselves (reference counts, the free queue, the cache map) are
 * block_pool's; this file decides which blocks a slot holds. Per slot it keeps the block
 * table, n_tokens, and for prefix caching the chain links of its first n_committed full
 * blocks: each link is the block's chained hash and the registered block that holds that
 * content, the "canonical" block (the slot's own, or another one when the slot computed a
 * duplicate), with that block's generation. A block registered later under it names the
 * canonical block as parent, so duplicates computed concurrently by two slots still form
 * one findable chain.
 *
 * One rule keeps cached KV honest: a registered block is never written. Blocks are
 * registered only when full, and the only block grow() writes into is a slot's partially
 * filled last block, which exists after a fork or a truncation. If another slot also
 * holds it, the writer gets a copy (copy-on-write); if the writer holds it alone and it is
 * registered (a truncation cut into it), it is invalidated first: its cache entry goes
 * and its generation rises, so children registered under it can never be found again.
 * Truncation itself leaves the cache alone - the block's KV is untouched until that write,
 * and another slot may still claim or hold it as a full block.
 *
 * Pending copies run in the order recorded, and each holds a reference ("pin") on its
 * source block until it is taken: the source's KV must survive until the copy runs, so
 * the block cannot be reallocated (or become another copy's destination) meanwhile. A
 * source that is itself a pending destination is fine - its own copy runs first. Pins are
 * not sharing: only references from block tables decide whether a write must copy. A
 * copy whose destination loses its last reference is dropped (a tombstone, compacted
 * away when the array fills) and unpins its source. So live copies have distinct,
 * referenced destinations: at most n_blocks - 1, and the queue can never overflow.
 */
#include "kv_manager.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block_pool.h"
#include "common/base/status.h"

#define CHAIN_ROOT 0x6b765f726f6f7421ull /* parent hash of a sequence's first block */

typedef struct kv_slot {
    int n_tokens;
    int n_committed;     /* leading full blocks whose chain links below are valid */
    int32_t *table;      /* (max_blocks_per_seq) block ids, 0 past the used ones */
    uint64_t *hash;      /* (max_blocks_per_seq) chained hash, prefix caching only */
    int32_t *canon;      /* (max_blocks_per_seq) registered block holding that content */
    uint64_t *canon_gen; /* (max_blocks_per_seq) its generation when it was recorded */
} kv_slot;

struct kv_manager {
    kv_manager_opts o;
    block_pool_t *pool;
    uint64_t hash_mask;  /* ~0; tests keep fewer bits to force collisions */
    kv_slot *slots;      /* (max_seqs) */
    int32_t *tables;     /* (max_seqs, max_blocks_per_seq) backing of slot tables */
    uint64_t *hashes;    /* (max_seqs, max_blocks_per_seq) backing, prefix caching only */
    int32_t *canons;     /* (max_seqs, max_blocks_per_seq) backing, prefix caching only */
    uint64_t *canon_gens; /* (max_seqs, max_blocks_per_seq) backing, prefix caching only */
    /* copy-on-write queue: entries [copy_head, copy_tail) of copies, dst 0 = tombstone */
    kv_copy *copies;     /* (n_blocks - 1) */
    int copy_cap, copy_head, copy_tail, n_copies;
    int32_t *copy_at;    /* (n_blocks) index of the live copy into block b, or -1 */
    int32_t *pins;       /* (n_blocks) live copies reading block b (part of its refs) */
    int32_t *check_refs; /* (2, n_blocks) scratch for kv_manager_check only */
    uint64_t query_tokens, hit_tokens, evictions, cow_copies;
};

static int blocks_for(const kv_manager_t *kv, int n_tokens)
{
    return (n_tokens + kv->o.block_size - 1) / kv->o.block_size;
}

static uint64_t chain_hash(const kv_manager_t *kv, uint64_t parent, const int32_t *tokens)
{
    uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < kv->o.block_size; i++) {
        h = (h ^ (uint32_t)tokens[i]) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    h ^= h >> 33; /* murmur3 finaliser: every token bit reaches the bucket bits */
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h & kv->hash_mask;
}

static int check_slot(const kv_manager_t *kv, int slot, const char *fn)
{
    if (!kv)
        return deras_fail(DERAS_EINVAL, "%s: NULL kv manager", fn);
    if (slot < 0 || slot >= kv->o.max_seqs)
        return deras_fail(DERAS_EINVAL, "%s: slot %d out of range [0, %d)", fn, slot,
                          kv->o.max_seqs);
    return DERAS_OK;
}

/* ---- copy-on-write queue ---- */

static void copies_compact(kv_manager_t *kv)
{
    int j = 0;
    for (int i = kv->copy_head; i < kv->copy_tail; i++) {
        kv_copy c = kv->copies[i];
        if (!c.dst)
            continue;
        kv->copies[j] = c;
        kv->copy_at[c.dst] = j++;
    }
    kv->copy_head = 0;
    kv->copy_tail = j;
}

static void copies_push(kv_manager_t *kv, int32_t src, int32_t dst)
{
    if (kv->copy_tail == kv->copy_cap)
        copies_compact(kv);
    /* live copies have distinct referenced destinations other than dst: < n_blocks - 1 */
    assert(kv->copy_tail < kv->copy_cap);
    block_pool_ref(kv->pool, src);
    kv->pins[src]++;
    kv->copies[kv->copy_tail] = (kv_copy){src, dst};
    kv->copy_at[dst] = kv->copy_tail++;
    kv->n_copies++;
    kv->cow_copies++;
}

/* Drop one reference to b. When it was the last, a copy still queued into b is pointless:
 * drop it and its pin on its source, which may free that block in turn (a chain of
 * copies whose destinations were all freed unwinds here, iteratively). */
static void release(kv_manager_t *kv, int32_t b)
{
    while (block_pool_unref(kv->pool, b)) {
        int i = kv->copy_at[b];
        if (i < 0)
            return;
        kv->copy_at[b] = -1;
        kv->copies[i].dst = 0;
        kv->n_copies--;
        b = kv->copies[i].src;
        kv->pins[b]--;
    }
}

/* Release the slot's blocks from the end down to index keep (tail first, so the deepest
 * blocks of a prefix enter the free queue first and are evicted first). */
static void release_tail(kv_manager_t *kv, kv_slot *s, int keep)
{
    for (int i = blocks_for(kv, s->n_tokens) - 1; i >= keep; i--) {
        release(kv, s->table[i]);
        s->table[i] = 0;
    }
}

/* ---- construction ---- */

int kv_manager_new(const kv_manager_opts *o, kv_manager_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "kv_manager_new: NULL out");
    *out = NULL;
    if (!o)
        return deras_fail(DERAS_EINVAL, "kv_manager_new: NULL options");
    if (o->n_blocks < 2 || o->block_size < 1 || o->max_seqs < 1 || o->max_blocks_per_seq < 1)
        return deras_fail(DERAS_EINVAL, "kv_manager_new: need n_blocks >= 2, block_size >= 1, "
                          "max_seqs >= 1, max_blocks_per_seq >= 1; got %d, %d, %d, %d",
                          o->n_blocks, o->block_size, o->max_seqs, o->max_blocks_per_seq);
    if (o->n_blocks > INT32_MAX / 4)
        return deras_fail(DERAS_ERANGE, "kv_manager_new: n_blocks %d exceeds %d", o->n_blocks,
                          INT32_MAX / 4);
    if ((int64_t)o->block_size * o->max_blocks_per_seq > INT32_MAX ||
        (int64_t)o->max_seqs * o->max_blocks_per_seq > INT32_MAX)
        return deras_fail(DERAS_ERANGE, "kv_manager_new: block_size * max_blocks_per_seq (%d * %d) "
                          "and max_seqs * max_blocks_per_seq (%d * %d) must fit in int32",
                          o->block_size, o->max_blocks_per_seq, o->max_seqs,
                          o->max_blocks_per_seq);
    kv_manager_t *kv = calloc(1, sizeof *kv);
    if (!kv)
        return deras_fail(DERAS_ENOMEM, "kv_manager_new: out of memory");
    kv->o = *o;
    kv->hash_mask = ~0ull;
    int rc = block_pool_new(o->n_blocks, o->block_size, o->prefix_caching, &kv->pool);
    if (rc) {
        kv_manager_destroy(&kv);
        return deras_fail_ctx(rc, "kv_manager_new: ");
    }
    size_t n_entries = (size_t)o->max_seqs * (size_t)o->max_blocks_per_seq;
    kv->slots = calloc((size_t)o->max_seqs, sizeof *kv->slots);
    kv->tables = calloc(n_entries, sizeof *kv->tables);
    kv->copy_cap = o->n_blocks - 1;
    kv->copies = calloc((size_t)kv->copy_cap, sizeof *kv->copies);
    kv->copy_at = malloc((size_t)o->n_blocks * sizeof *kv->copy_at);
    kv->pins = calloc((size_t)o->n_blocks, sizeof *kv->pins);
    kv->check_refs = calloc(2 * (size_t)o->n_blocks, sizeof *kv->check_refs);
    if (!kv->slots || !kv->tables || !kv->copies || !kv->copy_at || !kv->pins || !kv->check_refs)
        goto fail;
    if (o->prefix_caching) {
        kv->hashes = calloc(n_entries, sizeof *kv->hashes);
        kv->canons = calloc(n_entries, sizeof *kv->canons);
        kv->canon_gens = calloc(n_entries, sizeof *kv->canon_gens);
        if (!kv->hashes || !kv->canons || !kv->canon_gens)
            goto fail;
    }
    for (int i = 0; i < o->n_blocks; i++)
        kv->copy_at[i] = -1;
    for (int i = 0; i < o->max_seqs; i++) {
        size_t off = (size_t)i * (size_t)o->max_blocks_per_seq;
        kv_slot *s = &kv->slots[i];
        s->table = kv->tables + off;
        if (o->prefix_caching) {
            s->hash = kv->hashes + off;
            s->canon = kv->canons + off;
            s->canon_gen = kv->canon_gens + off;
        }
    }
    *out = kv;
    return DERAS_OK;

fail:
    kv_manager_destroy(&kv);
    return deras_fail(DERAS_ENOMEM, "kv_manager_new: out of memory for %d slots of %d blocks",
                      o->max_seqs, o->max_blocks_per_seq);
}

void kv_manager_destroy(kv_manager_t **kvp)
{
    if (!kvp || !*kvp)
        return;
    kv_manager_t *kv = *kvp;
    block_pool_destroy(&kv->pool);
    free(kv->slots);
    free(kv->tables);
    free(kv->hashes);
    free(kv->canons);
    free(kv->canon_gens);
    free(kv->copies);
    free(kv->copy_at);
    free(kv->pins);
    free(kv->check_refs);
    free(kv);
    *kvp = NULL;
}

const kv_manager_opts *kv_manager_get_opts(const kv_manager_t *kv)
{
    return kv ? &kv->o : NULL;
}

void kv_manager_set_hash_bits(kv_manager_t *kv, int bits)
{
    if (kv)
        kv->hash_mask = bits >= 64 ? ~0ull : bits <= 0 ? 0 : (1ull << bits) - 1;
}

/* ---- prefix cache ---- */

int kv_claim_prefix(kv_manager_t *kv, int slot, const int32_t *tokens, int n, int *n_cached)
{
    int st = check_slot(kv, slot, "kv_claim_prefix");
    if (st)
        return st;
    if (!n_cached || n < 0 || (n > 0 && !tokens))
        return deras_fail(DERAS_EINVAL, "kv_claim_prefix: bad arguments (n %d, tokens %p, "
                          "n_cached %p)", n, (const void *)tokens, (void *)n_cached);
    kv_slot *s = &kv->slots[slot];
    if (s->n_tokens)
        return deras_fail(DERAS_EINVAL, "kv_claim_prefix: slot %d is not empty (%d tokens)",
                          slot, s->n_tokens);
    *n_cached = 0;
    if (!kv->o.prefix_caching)
        return DERAS_OK;
    const int bs = kv->o.block_size;
    int max_blocks = n > 0 ? (n - 1) / bs : 0; /* the last token is always computed */
    if (max_blocks > kv->o.max_blocks_per_seq)
        max_blocks = kv->o.max_blocks_per_seq;
    uint64_t parent_hash = CHAIN_ROOT, parent_gen = 0;
    int32_t parent = 0;
    int i = 0;
    for (; i < max_blocks; i++) {
        const int32_t *t = tokens + (size_t)i * (size_t)bs;
        uint64_t h = chain_hash(kv, parent_hash, t);
        int32_t b = block_pool_lookup(kv->pool, h, t, parent, parent_gen);
        if (!b)
            break;
        block_pool_ref(kv->pool, b);
        s->table[i] = b;
        s->hash[i] = h;
        s->canon[i] = b;
        s->canon_gen[i] = block_pool_gen(kv->pool, b);
        parent_hash = h;
        parent = b;
        parent_gen = s->canon_gen[i];
    }
    s->n_tokens = i * bs;
    s->n_committed = i;
    kv->query_tokens += (uint64_t)n;
    kv->hit_tokens += (uint64_t)s->n_tokens;
    *n_cached = s->n_tokens;
    return DERAS_OK;
}

/* The registered block that link i names still holds that content. */
static bool link_live(const kv_manager_t *kv, const kv_slot *s, int i)
{
    return block_pool_is_cached(kv->pool, s->canon[i]) &&
           block_pool_gen(kv->pool, s->canon[i]) == s->canon_gen[i];
}

int kv_commit(kv_manager_t *kv, int slot, const int32_t *tokens, int n)
{
    int st = check_slot(kv, slot, "kv_commit");
    if (st)
        return st;
    kv_slot *s = &kv->slots[slot];
    if (n < 0 || n > s->n_tokens || (n > 0 && !tokens))
        return deras_fail(DERAS_EINVAL, "kv_commit: slot %d: n %d must be in [0, %d] with "
                          "tokens", slot, n, s->n_tokens);
    const int bs = kv->o.block_size;
    if (!kv->o.prefix_caching || n / bs <= s->n_committed)
        return DERAS_OK;
    /* A link whose canonical block was evicted since would leave everything registered
     * after it unfindable: commit those blocks again (the slot's own copies register). */
    while (s->n_committed > 0 && !link_live(kv, s, s->n_committed - 1))
        s->n_committed--;
    for (int i = s->n_committed; i < n / bs; i++) {
        const int32_t *t = tokens + (size_t)i * (size_t)bs;
        uint64_t parent_hash = i ? s->hash[i - 1] : CHAIN_ROOT;
        int32_t parent = i ? s->canon[i - 1] : 0;
        uint64_t parent_gen = i ? s->canon_gen[i - 1] : 0;
        uint64_t h = chain_hash(kv, parent_hash, t);
        int32_t b = s->table[i];
        if (block_pool_is_cached(kv->pool, b)) {
            /* shared through a claim or fork and registered already: content is fixed */
            if (!block_pool_holds_tokens(kv->pool, b, t))
                return deras_fail(DERAS_EINVAL, "kv_commit: slot %d block %d: tokens differ "
                                  "from the ones its cached KV was computed for", slot, i);
            if (!block_pool_holds(kv->pool, b, h, t, parent, parent_gen)) {
                /* Registered under a parent that is gone: another slot committed it first,
                 * when this prefix was canonical in a block since evicted. Its KV still
                 * follows this very prefix, so it moves under this slot's chain (unless
                 * that chain already has the content) and becomes findable again. */
                int32_t dup = block_pool_lookup(kv->pool, h, t, parent, parent_gen);
                if (dup)
                    b = dup;
                else
                    block_pool_rechain(kv->pool, b, h, parent, parent_gen);
            }
        } else {
            int32_t dup = block_pool_lookup(kv->pool, h, t, parent, parent_gen);
            if (dup)
                b = dup; /* computed twice; the first copy stays the findable one */
            else
                block_pool_register(kv->pool, b, h, t, parent, parent_gen);
        }
        s->hash[i] = h;
        s->canon[i] = b;
        s->canon_gen[i] = block_pool_gen(kv->pool, b);
        s->n_committed = i + 1;
    }
    return DERAS_OK;
}

/* ---- growth ---- */

/* Block tables holding b (its references less the pins of queued copies). */
static int table_refs(const kv_manager_t *kv, int32_t b)
{
    return block_pool_refs(kv->pool, b) - kv->pins[b];
}

/* New blocks and whether the partial last block must be copied, to reach n_total. */
static int grow_need(const kv_manager_t *kv, const kv_slot *s, int n_total, bool *cow)
{
    int have = blocks_for(kv, s->n_tokens);
    *cow = n_total > s->n_tokens && s->n_tokens % kv->o.block_size &&
           table_refs(kv, s->table[have - 1]) > 1;
    return blocks_for(kv, n_total) - have + (*cow ? 1 : 0);
}

int kv_blocks_needed(const kv_manager_t *kv, int slot, int n_total)
{
    int st = check_slot(kv, slot, "kv_blocks_needed");
    if (st)
        return st;
    const kv_slot *s = &kv->slots[slot];
    if (n_total <= s->n_tokens)
        return 0;
    bool cow;
    return grow_need(kv, s, n_total, &cow);
}

/* kv_grow's answer without its message (can_grow is asked every step: no formatting). */
static int grow_status(const kv_manager_t *kv, int slot, int n_total, int *need, bool *cow)
{
    if (!kv || slot < 0 || slot >= kv->o.max_seqs || n_total < kv->slots[slot].n_tokens)
        return DERAS_EINVAL;
    if (n_total > kv->o.max_blocks_per_seq * kv->o.block_size)
        return DERAS_ERANGE;
    *need = grow_need(kv, &kv->slots[slot], n_total, cow);
    return *need > block_pool_n_free(kv->pool) ? DERAS_EBUSY : DERAS_OK;
}

bool kv_can_grow(const kv_manager_t *kv, int slot, int n_total)
{
    int need;
    bool cow;
    return grow_status(kv, slot, n_total, &need, &cow) == DERAS_OK;
}

static int32_t take_block(kv_manager_t *kv)
{
    bool evicted;
    int32_t b = block_pool_alloc(kv->pool, &evicted);
    assert(b > 0); /* callers checked n_free first */
    kv->evictions += evicted;
    return b;
}

int kv_grow(kv_manager_t *kv, int slot, int n_total)
{
    int need = 0;
    bool cow = false;
    switch (grow_status(kv, slot, n_total, &need, &cow)) {
    case DERAS_OK:
        break;
    case DERAS_ERANGE:
        return deras_fail(DERAS_ERANGE, "kv_grow: slot %d: %d tokens exceed the %d blocks of %d "
                          "a sequence may hold", slot, n_total, kv->o.max_blocks_per_seq,
                          kv->o.block_size);
    case DERAS_EBUSY:
        return deras_fail(DERAS_EBUSY, "kv_grow: slot %d needs %d blocks for %d tokens, %d free",
                          slot, need, n_total, block_pool_n_free(kv->pool));
    default: {
        int st = check_slot(kv, slot, "kv_grow");
        return st ? st : deras_fail(DERAS_EINVAL, "kv_grow: slot %d holds %d tokens, cannot "
                                    "grow to %d", slot, kv->slots[slot].n_tokens, n_total);
    }
    }
    kv_slot *s = &kv->slots[slot];
    if (n_total == s->n_tokens)
        return DERAS_OK;
    int have = blocks_for(kv, s->n_tokens);
    if (s->n_tokens % kv->o.block_size) {
        /* the one block grow writes into: make it the writer's alone and uncached */
        int32_t last = s->table[have - 1];
        if (cow) {
            int32_t dst = take_block(kv);
            copies_push(kv, last, dst);
            release(kv, last); /* not the last reference: other tables and the pin hold it */
            s->table[have - 1] = dst;
        } else if (block_pool_is_cached(kv->pool, last)) {
            block_pool_invalidate(kv->pool, last);
        }
    }
    for (int i = have; i < blocks_for(kv, n_total); i++)
        s->table[i] = take_block(kv);
    s->n_tokens = n_total;
    return DERAS_OK;
}

/* ---- sharing and release ---- */

int kv_fork(kv_manager_t *kv, int src, int dst)
{
    int st = check_slot(kv, src, "kv_fork");
    if (!st)
        st = check_slot(kv, dst, "kv_fork");
    if (st)
        return st;
    if (src == dst || kv->slots[dst].n_tokens)
        return deras_fail(DERAS_EINVAL, "kv_fork: destination slot %d must be empty and differ "
                          "from source %d", dst, src);
    const kv_slot *a = &kv->slots[src];
    kv_slot *b = &kv->slots[dst];
    int n = blocks_for(kv, a->n_tokens);
    for (int i = 0; i < n; i++) {
        block_pool_ref(kv->pool, a->table[i]);
        b->table[i] = a->table[i];
    }
    if (kv->o.prefix_caching) {
        size_t c = (size_t)a->n_committed;
        memcpy(b->hash, a->hash, c * sizeof *b->hash);
        memcpy(b->canon, a->canon, c * sizeof *b->canon);
        memcpy(b->canon_gen, a->canon_gen, c * sizeof *b->canon_gen);
    }
    b->n_tokens = a->n_tokens;
    b->n_committed = a->n_committed;
    return DERAS_OK;
}

int kv_truncate(kv_manager_t *kv, int slot, int n_tokens)
{
    int st = check_slot(kv, slot, "kv_truncate");
    if (st)
        return st;
    kv_slot *s = &kv->slots[slot];
    if (n_tokens < 0 || n_tokens > s->n_tokens)
        return deras_fail(DERAS_EINVAL, "kv_truncate: slot %d holds %d tokens, cannot keep %d",
                          slot, s->n_tokens, n_tokens);
    release_tail(kv, s, blocks_for(kv, n_tokens));
    s->n_tokens = n_tokens;
    /* a kept block cut to partial is no longer one of this slot's committed blocks; its
     * cache entry (if any) lives until grow() writes into it - see the top of the file */
    if (s->n_committed > n_tokens / kv->o.block_size)
        s->n_committed = n_tokens / kv->o.block_size;
    return DERAS_OK;
}

void kv_free(kv_manager_t *kv, int slot)
{
    if (check_slot(kv, slot, "kv_free"))
        return;
    kv_slot *s = &kv->slots[slot];
    release_tail(kv, s, 0);
    s->n_tokens = 0;
    s->n_committed = 0;
}

/* ---- queries ---- */

const int32_t *kv_block_table(const kv_manager_t *kv, int slot)
{
    return check_slot(kv, slot, "kv_block_table") ? NULL : kv->slots[slot].table;
}

int kv_slot_tokens(const kv_manager_t *kv, int slot)
{
    int st = check_slot(kv, slot, "kv_slot_tokens");
    return st ? st : kv->slots[slot].n_tokens;
}

int kv_take_copies(kv_manager_t *kv, kv_copy *out, int cap)
{
    if (!kv || cap < 0 || (cap > 0 && !out))
        return deras_fail(DERAS_EINVAL, "kv_take_copies: bad arguments (cap %d)", cap);
    int n = 0;
    while (kv->copy_head < kv->copy_tail && n < cap) {
        kv_copy c = kv->copies[kv->copy_head++];
        if (!c.dst)
            continue;
        out[n++] = c;
        kv->copy_at[c.dst] = -1;
        kv->n_copies--;
        kv->pins[c.src]--;
        release(kv, c.src); /* the caller runs it now: the source may go back to the pool */
    }
    while (kv->copy_head < kv->copy_tail && !kv->copies[kv->copy_head].dst)
        kv->copy_head++;
    if (kv->copy_head == kv->copy_tail)
        kv->copy_head = kv->copy_tail = 0;
    return n;
}

void kv_get_stats(const kv_manager_t *kv, kv_stats *out)
{
    if (!kv || !out)
        return;
    *out = (kv_stats){
        .n_usable = kv->o.n_blocks - 1,
        .n_free = block_pool_n_free(kv->pool),
        .n_cached = block_pool_n_cached(kv->pool),
        .prefix_query_tokens = kv->query_tokens,
        .prefix_hit_tokens = kv->hit_tokens,
        .evictions = kv->evictions,
        .cow_copies = kv->cow_copies,
    };
}

/* ---- invariants ---- */

#define BROKEN(...) return deras_fail(DERAS_EINTERNAL, "kv manager invariant broken: " __VA_ARGS__)

static int check_slots(const kv_manager_t *kv, int32_t *refs)
{
    const int bs = kv->o.block_size, width = kv->o.max_blocks_per_seq;
    for (int i = 0; i < kv->o.max_seqs; i++) {
        const kv_slot *s = &kv->slots[i];
        if (s->n_tokens < 0 || s->n_tokens > width * bs)
            BROKEN("slot %d holds %d tokens, outside [0, %d]", i, s->n_tokens, width * bs);
        int nb = blocks_for(kv, s->n_tokens);
        if (s->n_committed < 0 || s->n_committed > s->n_tokens / bs)
            BROKEN("slot %d: %d committed blocks but only %d full ones", i, s->n_committed,
                   s->n_tokens / bs);
        for (int j = 0; j < width; j++) {
            int32_t b = s->table[j];
            if (j >= nb) {
                if (b)
                    BROKEN("slot %d (%d tokens): table entry %d is %d, expected the null block",
                           i, s->n_tokens, j, b);
                continue;
            }
            if (b <= 0 || b >= kv->o.n_blocks)
                BROKEN("slot %d (%d tokens): table entry %d is %d (null block or out of range)",
                       i, s->n_tokens, j, b);
            refs[b]++;
        }
        for (int j = 0; kv->o.prefix_caching && j < s->n_committed; j++)
            if (s->canon[j] <= 0 || s->canon[j] >= kv->o.n_blocks)
                BROKEN("slot %d: committed block %d has canonical block %d", i, j, s->canon[j]);
    }
    return DERAS_OK;
}

/* Also adds each live copy's pin to refs[src]. */
static int check_copies(const kv_manager_t *kv, int32_t *refs, int32_t *pins)
{
    int live = 0;
    if (kv->copy_head < 0 || kv->copy_head > kv->copy_tail || kv->copy_tail > kv->copy_cap)
        BROKEN("copy queue bounds head %d tail %d cap %d", kv->copy_head, kv->copy_tail,
               kv->copy_cap);
    for (int i = kv->copy_head; i < kv->copy_tail; i++) {
        kv_copy c = kv->copies[i];
        if (!c.dst)
            continue;
        live++;
        if (c.dst < 0 || c.dst >= kv->o.n_blocks || c.src <= 0 || c.src >= kv->o.n_blocks ||
            c.src == c.dst)
            BROKEN("pending copy %d: {%d -> %d} names a bad block", i, c.src, c.dst);
        if (kv->copy_at[c.dst] != i)
            BROKEN("pending copy %d into block %d is indexed at %d", i, c.dst,
                   kv->copy_at[c.dst]);
        if (block_pool_refs(kv->pool, c.dst) == 0)
            BROKEN("pending copy %d goes into unreferenced block %d", i, c.dst);
        refs[c.src]++;
        pins[c.src]++;
    }
    for (int b = 0; b < kv->o.n_blocks; b++)
        if (pins[b] != kv->pins[b])
            BROKEN("block %d is read by %d pending copies, its pin count says %d", b, pins[b],
                   kv->pins[b]);
    int indexed = 0;
    for (int b = 0; b < kv->o.n_blocks; b++)
        indexed += kv->copy_at[b] >= 0;
    if (live != kv->n_copies || indexed != live)
        BROKEN("copy queue holds %d live copies, count says %d, index has %d", live,
               kv->n_copies, indexed);
    return DERAS_OK;
}

int kv_manager_check(const kv_manager_t *kv)
{
    if (!kv)
        return deras_fail(DERAS_EINVAL, "kv_manager_check: NULL kv manager");
    /* check_refs is scratch, not state: the manager is heap-allocated, never const */
    int32_t *refs = ((kv_manager_t *)kv)->check_refs, *pins = refs + kv->o.n_blocks;
    memset(refs, 0, 2 * (size_t)kv->o.n_blocks * sizeof *refs);
    int st = check_slots(kv, refs);
    if (!st)
        st = check_copies(kv, refs, pins);
    if (!st)
        st = block_pool_check(kv->pool, refs);
    return st;
}
