/* SPDX-License-Identifier: Apache-2.0 */
/* block_pool.h - KV cache blocks: reference counts, the free queue and the prefix-cache map.
 *
 * The mechanism under kv_manager (which does the per-sequence accounting). Blocks are ids
 * 1 .. n_blocks - 1; id 0 is the null block, which this pool never hands out, never
 * queues and never registers, so 0 doubles as "no block" in its answers.
 *
 * Every block with no reference sits in one free queue. Blocks that hold nothing cached
 * are kept at its head and are reused first; cached blocks follow in the order their last
 * reference went, so allocation reuses the least recently freed cached block first and
 * evicts its cache entry. A block's generation counts the times its content was given up
 * (reallocation, or a write that invalidates it), so (id, generation) names one content
 * for the life of the pool.
 *
 * The cache map goes from a 64-bit hash (computed by the caller) to registered blocks,
 * as intrusive bucket chains over arrays sized at construction. Hashes may collide: a
 * lookup also compares the block's tokens and its parent (id and generation), so it
 * answers only with a block holding exactly the asked-for content.
 *
 * Costs: allocate, reference, unreference, register, invalidate: O(1); lookup: O(1)
 * expected (buckets >= 2 * n_blocks) plus O(block_size) to verify a candidate. Nothing is
 * allocated after block_pool_new(). Arguments of the O(1) calls are trusted (asserted):
 * the pool is internal to kv_manager, which validates what callers pass.
 */
#ifndef DERAS_BLOCK_POOL_H
#define DERAS_BLOCK_POOL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct block_pool block_pool_t;

/* A pool of n_blocks blocks (>= 2, the null block included) of block_size tokens, all
 * free. With caching off nothing can be registered and no token storage is allocated.
 * DERAS_EINVAL on a bad argument, DERAS_ENOMEM when memory runs out. O(n_blocks). */
int block_pool_new(int n_blocks, int block_size, bool caching, block_pool_t **out);
void block_pool_destroy(block_pool_t **bp);

/* Blocks no one references (cached ones included) / blocks registered in the map. O(1). */
int block_pool_n_free(const block_pool_t *bp);
int block_pool_n_cached(const block_pool_t *bp);

/* Take the block at the head of the free queue: its cache entry, if any, is dropped
 * (*evicted = true), its generation rises and it gets one reference. 0 if none is free.
 * O(1). */
int32_t block_pool_alloc(block_pool_t *bp, bool *evicted);

/* One more reference to block b (>= 1). A free block (a cached one being claimed) leaves
 * the free queue. O(1). */
void block_pool_ref(block_pool_t *bp, int32_t b);

/* One reference to block b fewer; true if it was the last, and b joined the free queue:
 * at the tail if cached, at the head if not. O(1). */
bool block_pool_unref(block_pool_t *bp, int32_t b);

int block_pool_refs(const block_pool_t *bp, int32_t b);
uint64_t block_pool_gen(const block_pool_t *bp, int32_t b);
bool block_pool_is_cached(const block_pool_t *bp, int32_t b);

/* The registered block with this hash, these block_size tokens and this parent (id and
 * generation; parent 0 is the start of a sequence); 0 if none. */
int32_t block_pool_lookup(const block_pool_t *bp, uint64_t hash, const int32_t *tokens,
                          int32_t parent, uint64_t parent_gen);

/* True if registered block b holds exactly this content (the test lookup applies). */
bool block_pool_holds(const block_pool_t *bp, int32_t b, uint64_t hash, const int32_t *tokens,
                      int32_t parent, uint64_t parent_gen);

/* Register referenced, unregistered block b: its KV now holds these tokens after the
 * content of parent (at parent_gen). The tokens are copied. O(block_size). */
void block_pool_register(block_pool_t *bp, int32_t b, uint64_t hash, const int32_t *tokens,
                         int32_t parent, uint64_t parent_gen);

/* Registered block b holds these block_size tokens (whatever its parent). */
bool block_pool_holds_tokens(const block_pool_t *bp, int32_t b, const int32_t *tokens);

/* Move registered block b under another parent (and hash) naming the same content: its
 * old parent was evicted, so it could no longer be found. Its generation stays, so
 * children registered under it stay valid. O(1) expected. */
void block_pool_rechain(block_pool_t *bp, int32_t b, uint64_t hash, int32_t parent,
                        uint64_t parent_gen);

/* Block b's KV is about to be overwritten in place: drop its cache entry, if any, and
 * raise its generation so no child registered under it can be found again. O(1). */
void block_pool_invalidate(block_pool_t *bp, int32_t b);

/* Check the pool's invariants against refs[b], the references the caller counted for
 * every block: reference counts; free + referenced == n_blocks - 1; the free queue holds
 * exactly the unreferenced blocks, uncached ones before cached ones, with intact links;
 * the map holds exactly the registered blocks, each in its hash's bucket; the null block
 * is untouched. DERAS_EINTERNAL naming the first broken one. O(n_blocks + buckets). */
int block_pool_check(const block_pool_t *bp, const int32_t *refs);

#endif
