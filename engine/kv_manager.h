/* SPDX-License-Identifier: Apache-2.0 */
/* kv_manager.h - KV cache accounting: which cache blocks each sequence holds.
 *
 * The KV cache is cut into n_blocks blocks of block_size tokens (the model owns the
 * memory; this module only hands out block ids). Block 0 is a reserved null block: never
 * handed out, it fills unused block-table entries so kernels can always read a valid id.
 *
 * Sequences live in slots 0 .. max_seqs - 1. Each slot has a block table (block ids for
 * its tokens in order) and a token count n_tokens (tokens whose KV has a place). Growing a
 * slot allocates blocks for new tokens; freeing returns them.
 *
 * Sharing. A block has a reference count: fork() makes a second slot share all blocks of
 * the first (n > 1 samples of one prompt). Full blocks are never written again, so sharing
 * them is free. A partially filled last block that is shared is copied on the first write
 * (copy-on-write): grow() gives the writer a fresh block and records a kv_copy {src, dst}
 * that the caller must execute (copy the KV data in every layer) before the next forward.
 *
 * Prefix caching. commit() registers a slot's full blocks under a hash chained over all
 * tokens before and in the block, so a block is found again only after the same whole
 * prefix. Lookups verify the block's tokens and its parent block (id and generation), so
 * a hash collision can never return wrong KV. A registered block whose last reference
 * goes stays cached in the free queue; allocation takes free blocks least recently
 * freed first, evicting cached ones as it reuses them (free blocks that hold nothing
 * cached are taken before any cached one). Slots are freed tail first, so the deepest
 * blocks of a prefix are evicted before its head. A registered block is never written:
 * a write into it (possible only after a truncation cut it to partial) copies it if
 * another slot holds it, and otherwise drops it from the cache first.
 *
 * Costs: allocation, freeing a block, a cache lookup per block: O(1). Nothing is allocated
 * after kv_manager_new(). Policy (who gets blocks, who is preempted) is the scheduler's;
 * this module only does accounting and answers "does it fit" as an ordinary result.
 */
#ifndef DERAS_KV_MANAGER_H
#define DERAS_KV_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kv_manager kv_manager_t;

typedef struct kv_manager_opts {
    int n_blocks;           /* total blocks including the null block 0; >= 2 */
    int block_size;         /* tokens per block */
    int max_seqs;           /* slots */
    int max_blocks_per_seq; /* block table width: max context = this * block_size */
    bool prefix_caching;
} kv_manager_opts;

typedef struct kv_copy {
    int32_t src, dst;       /* copy block src's KV into block dst, every layer */
} kv_copy;

typedef struct kv_stats {
    int n_usable;           /* n_blocks - 1 */
    int n_free;             /* blocks no slot references and no queued copy reads (cached
                               ones included) */
    int n_cached;           /* blocks registered in the prefix cache, referenced or not */
    uint64_t prefix_query_tokens; /* tokens looked up by claim_prefix */
    uint64_t prefix_hit_tokens;   /* of those, found in the cache */
    uint64_t evictions;     /* cached blocks reused for new data */
    uint64_t cow_copies;    /* copy-on-write copies recorded */
} kv_stats;

/* A manager with every block free and every slot empty; all memory it will ever use is
 * allocated here. DERAS_EINVAL / DERAS_ERANGE for bad options (the message names them),
 * DERAS_ENOMEM; *out is NULL on failure. O(n_blocks + max_seqs * max_blocks_per_seq). */
int kv_manager_new(const kv_manager_opts *o, kv_manager_t **out);
/* Frees the manager and sets *kv to NULL; NULL or *kv == NULL is a no-op. */
void kv_manager_destroy(kv_manager_t **kv);

const kv_manager_opts *kv_manager_get_opts(const kv_manager_t *kv); /* NULL for NULL; O(1) */

/* Claim the longest cached prefix of tokens[0..n) for the empty slot: whole blocks only,
 * and at most n - 1 tokens (the last token is always computed, to produce logits).
 * *n_cached = tokens now available from the cache (a multiple of block_size). With
 * prefix caching off, *n_cached = 0. DERAS_EINVAL if the slot is not empty. Claimed
 * blocks are referenced (a free cached one leaves the free queue), so the caller frees
 * the slot if it then cannot grow it. O(block_size) per block looked up. */
int kv_claim_prefix(kv_manager_t *kv, int slot, const int32_t *tokens, int n, int *n_cached);

/* Blocks that growing `slot` to n_total tokens would take from the free pool (new blocks
 * plus a copy-on-write copy); 0 if it already fits. The count ignores max_blocks_per_seq
 * (kv_can_grow does not). DERAS_EINVAL (negative) for a bad slot. O(1). */
int kv_blocks_needed(const kv_manager_t *kv, int slot, int n_total);

/* True if kv_grow(slot, n_total) would succeed. O(1). */
bool kv_can_grow(const kv_manager_t *kv, int slot, int n_total);

/* Make room for n_total tokens in slot (n_total >= its current count). DERAS_EBUSY, with
 * nothing changed, if the free pool is short; DERAS_ERANGE beyond max_blocks_per_seq;
 * DERAS_EINVAL for a bad slot or n_total below the current count. O(new blocks). */
int kv_grow(kv_manager_t *kv, int slot, int n_total);

/* Register the slot's full blocks covering tokens[0..n) (whose KV is now computed) in the
 * prefix cache. Blocks already registered are skipped; a block whose content is already
 * cached in another block stays unregistered. No-op with prefix caching off. tokens must
 * be the slot's tokens: blocks committed before are not hashed again, so a commit costs
 * O(1) with no newly full block, else O(block_size) per newly full block (plus blocks
 * committed again because the cached block holding their content was evicted).
 * DERAS_EINVAL if n exceeds the slot's count, or if tokens differ from those of a block
 * already registered (the blocks before it stay registered). */
int kv_commit(kv_manager_t *kv, int slot, const int32_t *tokens, int n);

/* The empty slot dst shares every block of src (reference counts rise); same n_tokens.
 * Needs no free block. DERAS_EINVAL if dst is not empty or is src. O(blocks of src). */
int kv_fork(kv_manager_t *kv, int src, int dst);

/* Keep only the blocks for the first n_tokens tokens of slot (n_tokens <= current); later
 * blocks are released, tail first. Used to roll back rejected speculative tokens. A kept
 * last block cut to partial stops counting as one of the slot's committed blocks; if it
 * is registered its KV is still valid, so it stays cached (other slots may claim or hold
 * it) until this slot writes into it (see grow). DERAS_EINVAL if n_tokens is out of
 * [0, current]. O(released blocks). */
int kv_truncate(kv_manager_t *kv, int slot, int n_tokens);

/* Release every block of slot, tail first; the slot becomes empty. A bad slot is ignored.
 * O(blocks of the slot). */
void kv_free(kv_manager_t *kv, int slot);

/* The slot's block table: max_blocks_per_seq ids, the first ceil(n_tokens / block_size)
 * valid, the rest 0 (the null block). Valid until the next call that changes the slot.
 * Both O(1). */
const int32_t *kv_block_table(const kv_manager_t *kv, int slot); /* NULL for a bad slot */
int kv_slot_tokens(const kv_manager_t *kv, int slot);            /* DERAS_EINVAL: bad slot */

/* Move the copy-on-write copies recorded since the last call into out (at most cap; the
 * rest stay queued) and return how many. The caller executes them in the order taken, and
 * takes all of them, before the next forward pass. A queued copy keeps its source block
 * out of the free pool until it is taken (its KV must survive until the copy runs). The
 * queue never overflows: a copy into a block freed meanwhile is dropped, so at most
 * n_blocks - 1 are ever pending. DERAS_EINVAL for cap < 0 or a NULL out. O(taken). */
int kv_take_copies(kv_manager_t *kv, kv_copy *out, int cap);

/* Current counts and running totals. O(1). */
void kv_get_stats(const kv_manager_t *kv, kv_stats *out);

/* For tests: keep only the low `bits` bits (0 .. 64; 64 is the default) of every block
 * hash, so that nearly every lookup meets colliding entries and must be refused by the
 * token and parent comparison. Changing it makes earlier entries unfindable, never
 * wrong. */
void kv_manager_set_hash_bits(kv_manager_t *kv, int bits);

/* Check every invariant (free + referenced == usable; each block's reference count equals
 * the table entries pointing at it plus the queued copies reading it; the free queue
 * holds exactly the unreferenced blocks, uncached ones first; the cache map holds exactly
 * the registered blocks; tables are consistent with token counts; queued copies go into
 * distinct referenced blocks; the null block is never handed out). DERAS_EINTERNAL naming
 * the first broken one. O(n_blocks + max_seqs * max_blocks_per_seq): for tests and debug
 * builds. */
int kv_manager_check(const kv_manager_t *kv);

#endif
