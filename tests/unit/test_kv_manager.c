/* test_kv_manager.c - KV block accounting: allocation, prefix caching, fork and
 * copy-on-write, truncation, and a property test over random operation sequences.
 *
 * Unit tests use block_size 4 and small pools so that every block can be named. The
 * property test keeps its own model of the cache: expected block tables and reference
 * counts, the expected copy queue, and simulated KV memory in which every position holds
 * a fingerprint of the whole token prefix that produced it. Any wrong cache hit, any block
 * handed out while referenced, any missed or misdirected copy shows up as a fingerprint
 * that does not match the sequence reading it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "test_util.h"
#include "engine/kv_manager.h"

#define BS 4

/* ---- helpers ---- */

#define OK(expr)                                                                           \
    do {                                                                                   \
        int st_ = (expr);                                                                  \
        if (st_)                                                                           \
            fail_msg("%s: expected ok, got %s (%s)", #expr, deras_status_name(st_),      \
                     deras_errmsg());                                                      \
    } while (0)

#define EXPECT_STATUS(expr, want)                                                          \
    do {                                                                                   \
        int st_ = (expr);                                                                  \
        if (st_ != (want))                                                                 \
            fail_msg("%s: expected %s, got %s (%s)", #expr, deras_status_name(want),       \
                     deras_status_name(st_), deras_errmsg());                              \
    } while (0)

#define EXPECT_EQ(what, got, want)                                                         \
    do {                                                                                   \
        long long g_ = (long long)(got), w_ = (long long)(want);                           \
        if (g_ != w_)                                                                      \
            fail_msg("%s: expected %lld, got %lld", what, w_, g_);                         \
    } while (0)

#define EXPECT_NE(what, got, unwanted)                                                     \
    do {                                                                                   \
        long long g_ = (long long)(got), u_ = (long long)(unwanted);                       \
        if (g_ == u_)                                                                      \
            fail_msg("%s: expected anything but %lld, got it", what, u_);                  \
    } while (0)

#define CHECK(kv) OK(kv_manager_check(kv))

static kv_manager_t *make(int n_blocks, int max_seqs, int max_blocks_per_seq, bool caching)
{
    kv_manager_opts o = {.n_blocks = n_blocks, .block_size = BS, .max_seqs = max_seqs,
                         .max_blocks_per_seq = max_blocks_per_seq, .prefix_caching = caching};
    kv_manager_t *kv = NULL;
    OK(kv_manager_new(&o, &kv));
    CHECK(kv);
    return kv;
}

static kv_stats stats(const kv_manager_t *kv)
{
    kv_stats s;
    kv_get_stats(kv, &s);
    return s;
}

static int n_free(const kv_manager_t *kv)
{
    return stats(kv).n_free;
}

static int32_t blk(const kv_manager_t *kv, int slot, int i)
{
    return kv_block_table(kv, slot)[i];
}

/* tokens[i] = base + i */
static void fill(int32_t *t, int n, int32_t base)
{
    for (int i = 0; i < n; i++)
        t[i] = base + i;
}

/* The scheduler's path for a new prompt: claim what is cached, grow to the whole prompt,
 * (compute it,) commit it. Returns the tokens claimed. */
static int admit(kv_manager_t *kv, int slot, const int32_t *t, int n)
{
    int cached = -1;
    OK(kv_claim_prefix(kv, slot, t, n, &cached));
    OK(kv_grow(kv, slot, n));
    OK(kv_commit(kv, slot, t, n));
    CHECK(kv);
    return cached;
}

static int claim(kv_manager_t *kv, int slot, const int32_t *t, int n)
{
    int cached = -1;
    OK(kv_claim_prefix(kv, slot, t, n, &cached));
    CHECK(kv);
    return cached;
}

/* ---- construction, allocation, reference counts ---- */

static void new_rejects_bad_options_and_destroy_nulls_the_pointer(void **state)
{
    (void)state;
    static char dummy;
    kv_manager_t *kv = (kv_manager_t *)(void *)&dummy; /* failure must set it to NULL */
    kv_manager_opts o = {.n_blocks = 1, .block_size = 4, .max_seqs = 2, .max_blocks_per_seq = 2};
    EXPECT_STATUS(kv_manager_new(&o, &kv), DERAS_EINVAL);
    assert_null(kv);
    o.n_blocks = 8;
    o.block_size = 0;
    EXPECT_STATUS(kv_manager_new(&o, &kv), DERAS_EINVAL);
    o.block_size = 4;
    o.max_seqs = 0;
    EXPECT_STATUS(kv_manager_new(&o, &kv), DERAS_EINVAL);
    o.max_seqs = 2;
    o.max_blocks_per_seq = 0;
    EXPECT_STATUS(kv_manager_new(&o, &kv), DERAS_EINVAL);
    o.max_blocks_per_seq = 2;
    EXPECT_STATUS(kv_manager_new(NULL, &kv), DERAS_EINVAL);
    OK(kv_manager_new(&o, &kv));
    EXPECT_EQ("opts round trip: n_blocks", kv_manager_get_opts(kv)->n_blocks, 8);
    kv_stats s = stats(kv);
    EXPECT_EQ("a new manager: usable blocks", s.n_usable, 7);
    EXPECT_EQ("a new manager: free blocks", s.n_free, 7);
    kv_manager_destroy(&kv);
    assert_null(kv);
    kv_manager_destroy(&kv); /* no-op */
}

static void grow_hands_out_distinct_blocks_and_free_returns_them(void **state)
{
    (void)state;
    kv_manager_t *kv = make(9, 2, 4, false);
    EXPECT_EQ("blocks needed for 10 tokens", kv_blocks_needed(kv, 0, 10), 3);
    OK(kv_grow(kv, 0, 10));
    CHECK(kv);
    EXPECT_EQ("slot 0 tokens", kv_slot_tokens(kv, 0), 10);
    EXPECT_EQ("free after 3 blocks", n_free(kv), 5);
    for (int i = 0; i < 3; i++)
        EXPECT_NE("used table entry", blk(kv, 0, i), 0);
    EXPECT_EQ("unused table entry is the null block", blk(kv, 0, 3), 0);
    assert_true(blk(kv, 0, 0) != blk(kv, 0, 1) && blk(kv, 0, 1) != blk(kv, 0, 2) &&
                blk(kv, 0, 0) != blk(kv, 0, 2));
    EXPECT_EQ("blocks needed within the last block", kv_blocks_needed(kv, 0, 12), 0);
    OK(kv_grow(kv, 0, 12));
    EXPECT_EQ("free after filling the last block", n_free(kv), 5);
    OK(kv_grow(kv, 1, 5));
    EXPECT_EQ("free after slot 1", n_free(kv), 3);
    kv_free(kv, 0);
    CHECK(kv);
    EXPECT_EQ("free after freeing slot 0", n_free(kv), 6);
    EXPECT_EQ("slot 0 tokens after free", kv_slot_tokens(kv, 0), 0);
    for (int i = 0; i < 4; i++)
        EXPECT_EQ("freed slot's table entry", blk(kv, 0, i), 0);
    kv_free(kv, 1);
    kv_free(kv, 1); /* freeing an empty slot is a no-op */
    CHECK(kv);
    EXPECT_EQ("free at the end", n_free(kv), 8);
    kv_manager_destroy(&kv);
}

static void null_block_is_never_handed_out(void **state)
{
    (void)state;
    kv_manager_t *kv = make(9, 4, 2, true);
    bool seen[9] = {0};
    for (int s = 0; s < 4; s++) {
        OK(kv_grow(kv, s, 2 * BS));
        CHECK(kv);
        for (int i = 0; i < 2; i++) {
            int32_t b = blk(kv, s, i);
            if (b <= 0 || b >= 9 || seen[b])
                fail_msg("slot %d entry %d: expected a fresh block in [1, 8], got %d", s, i, b);
            seen[b] = true;
        }
    }
    EXPECT_EQ("free when every usable block is out", n_free(kv), 0);
    kv_manager_destroy(&kv);
}

static void exhaustion_answers_ebusy_and_changes_nothing(void **state)
{
    (void)state;
    kv_manager_t *kv = make(6, 2, 8, false); /* 5 usable */
    OK(kv_grow(kv, 0, 4 * BS));
    OK(kv_grow(kv, 1, 2));
    int32_t before[8];
    memcpy(before, kv_block_table(kv, 1), sizeof before);
    EXPECT_EQ("free blocks", n_free(kv), 0);
    EXPECT_EQ("blocks needed", kv_blocks_needed(kv, 1, 2 * BS + 1), 2);
    assert_false(kv_can_grow(kv, 1, 2 * BS + 1));
    EXPECT_STATUS(kv_grow(kv, 1, 2 * BS + 1), DERAS_EBUSY);
    CHECK(kv);
    EXPECT_EQ("tokens after a refused grow", kv_slot_tokens(kv, 1), 2);
    assert_memory_equal(before, kv_block_table(kv, 1), sizeof before);
    assert_true(kv_can_grow(kv, 1, BS)); /* within its block: fits */
    OK(kv_grow(kv, 1, BS));
    kv_free(kv, 0);
    assert_true(kv_can_grow(kv, 1, 2 * BS + 1));
    OK(kv_grow(kv, 1, 2 * BS + 1));
    CHECK(kv);
    kv_manager_destroy(&kv);
}

static void growth_beyond_max_blocks_per_seq_is_erange(void **state)
{
    (void)state;
    kv_manager_t *kv = make(32, 1, 3, false);
    OK(kv_grow(kv, 0, 3 * BS));
    assert_false(kv_can_grow(kv, 0, 3 * BS + 1));
    EXPECT_STATUS(kv_grow(kv, 0, 3 * BS + 1), DERAS_ERANGE);
    CHECK(kv);
    EXPECT_EQ("tokens after a refused grow", kv_slot_tokens(kv, 0), 3 * BS);
    EXPECT_EQ("free after a refused grow", n_free(kv), 31 - 3);
    kv_manager_destroy(&kv);
}

static void invalid_arguments_are_rejected_without_change(void **state)
{
    (void)state;
    kv_manager_t *kv = make(16, 2, 4, true);
    int32_t t[16];
    fill(t, 16, 100);
    int c;
    EXPECT_STATUS(kv_grow(kv, -1, 4), DERAS_EINVAL);
    EXPECT_STATUS(kv_grow(kv, 2, 4), DERAS_EINVAL);
    assert_false(kv_can_grow(kv, 2, 4));
    EXPECT_STATUS(kv_blocks_needed(kv, 2, 4), DERAS_EINVAL);
    assert_null(kv_block_table(kv, 5));
    EXPECT_STATUS(kv_slot_tokens(kv, -3), DERAS_EINVAL);
    OK(kv_grow(kv, 0, 6));
    EXPECT_STATUS(kv_grow(kv, 0, 5), DERAS_EINVAL);
    EXPECT_STATUS(kv_truncate(kv, 0, 7), DERAS_EINVAL);
    EXPECT_STATUS(kv_truncate(kv, 0, -1), DERAS_EINVAL);
    EXPECT_STATUS(kv_claim_prefix(kv, 0, t, 8, &c), DERAS_EINVAL);
    EXPECT_STATUS(kv_claim_prefix(kv, 1, t, 8, NULL), DERAS_EINVAL);
    EXPECT_STATUS(kv_commit(kv, 0, t, 7), DERAS_EINVAL);
    EXPECT_STATUS(kv_fork(kv, 0, 0), DERAS_EINVAL);
    OK(kv_grow(kv, 1, 1));
    EXPECT_STATUS(kv_fork(kv, 0, 1), DERAS_EINVAL);
    kv_copy cp[1];
    EXPECT_STATUS(kv_take_copies(kv, cp, -1), DERAS_EINVAL);
    EXPECT_STATUS(kv_take_copies(kv, NULL, 1), DERAS_EINVAL);
    kv_free(kv, 9);
    CHECK(kv);
    EXPECT_EQ("slot 0 tokens after refused calls", kv_slot_tokens(kv, 0), 6);
    EXPECT_EQ("slot 1 tokens after refused calls", kv_slot_tokens(kv, 1), 1);
    EXPECT_EQ("free after refused calls", n_free(kv), 15 - 3);
    kv_manager_destroy(&kv);
}

/* ---- prefix caching ---- */

static void same_prompt_in_a_second_slot_claims_full_blocks_but_never_the_last_token(void **state)
{
    (void)state;
    kv_manager_t *kv = make(32, 4, 8, true);
    int32_t t[13];
    fill(t, 13, 7);
    EXPECT_EQ("first admission claims", admit(kv, 0, t, 12), 0);
    EXPECT_EQ("cached blocks after commit", stats(kv).n_cached, 3);
    /* 12 tokens = 3 full blocks, but the last token must be computed: only 2 claimed */
    EXPECT_EQ("same 12-token prompt claims", claim(kv, 1, t, 12), 2 * BS);
    EXPECT_EQ("claimed slot tokens", kv_slot_tokens(kv, 1), 2 * BS);
    for (int i = 0; i < 2; i++)
        EXPECT_EQ("claimed block is the first slot's", blk(kv, 1, i), blk(kv, 0, i));
    EXPECT_EQ("unclaimed entry", blk(kv, 1, 2), 0);
    /* one more token: all 3 blocks are claimable */
    EXPECT_EQ("13-token prompt claims", claim(kv, 2, t, 13), 3 * BS);
    EXPECT_EQ("claimed third block", blk(kv, 2, 2), blk(kv, 0, 2));
    OK(kv_grow(kv, 2, 13));
    EXPECT_NE("the last token's block is new", blk(kv, 2, 3), 0);
    EXPECT_EQ("free: 3 + 1 blocks out", n_free(kv), 31 - 4);
    CHECK(kv);
    kv_manager_destroy(&kv);
}

static void prompts_sharing_a_prefix_share_exactly_the_common_whole_blocks(void **state)
{
    (void)state;
    kv_manager_t *kv = make(64, 5, 8, true);
    int32_t a[16], b[16], c[16], d[16];
    fill(a, 16, 1);
    memcpy(b, a, sizeof b);
    b[10] = 999; /* differs inside block 2: blocks 0, 1 common */
    memcpy(c, a, sizeof c);
    c[0] = 999; /* differs in block 0: nothing common */
    memcpy(d, a, sizeof d);
    d[8] = 999; /* differs at the first token of block 2 */
    admit(kv, 0, a, 16);
    EXPECT_EQ("prompt diverging at token 10 claims", admit(kv, 1, b, 16), 2 * BS);
    EXPECT_EQ("diverging at token 10: block 0 shared", blk(kv, 1, 0), blk(kv, 0, 0));
    EXPECT_EQ("diverging at token 10: block 1 shared", blk(kv, 1, 1), blk(kv, 0, 1));
    EXPECT_NE("diverging at token 10: block 2 own", blk(kv, 1, 2), blk(kv, 0, 2));
    EXPECT_EQ("prompt diverging at token 0 claims", admit(kv, 2, c, 16), 0);
    EXPECT_EQ("prompt diverging at token 8 claims", admit(kv, 3, d, 16), 2 * BS);
    /* b's own block 2 and 3 are cached too, under its own prefix */
    int32_t b2[16];
    memcpy(b2, b, sizeof b2);
    b2[15] = -5;
    EXPECT_EQ("b's prefix with another last token claims", claim(kv, 4, b2, 16), 3 * BS);
    EXPECT_EQ("b's block 2", blk(kv, 4, 2), blk(kv, 1, 2));
    kv_manager_destroy(&kv);
}

static void hit_stats_count_queried_and_found_tokens(void **state)
{
    (void)state;
    kv_manager_t *kv = make(32, 3, 8, true);
    int32_t t[10];
    fill(t, 10, 50);
    admit(kv, 0, t, 10);
    claim(kv, 1, t, 10);
    int32_t u[5];
    fill(u, 5, 500);
    claim(kv, 2, u, 5);
    kv_stats s = stats(kv);
    EXPECT_EQ("query tokens", s.prefix_query_tokens, 10 + 10 + 5);
    EXPECT_EQ("hit tokens", s.prefix_hit_tokens, 2 * BS);
    EXPECT_EQ("cached blocks", s.n_cached, 2);
    EXPECT_EQ("evictions", s.evictions, 0);
    kv_manager_destroy(&kv);
}

static void allocation_evicts_the_least_recently_freed_cached_block_first(void **state)
{
    (void)state;
    kv_manager_t *kv = make(7, 4, 4, true); /* 6 usable */
    int32_t x[9], y[9];
    fill(x, 9, 10);
    fill(y, 9, 200);
    admit(kv, 0, x, 8); /* 2 cached blocks */
    admit(kv, 1, y, 8); /* 2 cached blocks */
    int32_t x1 = blk(kv, 0, 1), x0 = blk(kv, 0, 0);
    kv_free(kv, 0); /* queue: 2 empty, x1, x0 */
    kv_free(kv, 1); /* queue: 2 empty, x1, x0, y1, y0 */
    CHECK(kv);
    EXPECT_EQ("free blocks, cached ones included", n_free(kv), 6);
    EXPECT_EQ("cached blocks after free", stats(kv).n_cached, 4);
    /* three blocks: the two empty ones first, then the least recently freed cached one */
    OK(kv_grow(kv, 2, 3 * BS));
    CHECK(kv);
    EXPECT_EQ("evictions after taking 3 blocks", stats(kv).evictions, 1);
    EXPECT_EQ("the third block taken is x's tail", blk(kv, 2, 2), x1);
    EXPECT_EQ("x's head survives", claim(kv, 3, x, 9), BS);
    EXPECT_EQ("x's head block", blk(kv, 3, 0), x0);
    kv_free(kv, 3); /* x0 is now the most recently freed */
    OK(kv_grow(kv, 3, 2 * BS)); /* takes y1, y0 */
    EXPECT_EQ("evictions after 2 more", stats(kv).evictions, 3);
    EXPECT_EQ("y is gone", claim(kv, 0, y, 9), 0);
    EXPECT_EQ("x's head, freed last, is still cached", claim(kv, 1, x, 9), BS);
    kv_manager_destroy(&kv);
}

static void freeing_tail_first_lets_a_prefix_head_outlive_its_tail(void **state)
{
    (void)state;
    kv_manager_t *kv = make(4, 3, 4, true); /* 3 usable */
    int32_t t[13];
    fill(t, 13, 3);
    admit(kv, 0, t, 12);
    kv_free(kv, 0); /* tail first: queue b2, b1, b0 */
    OK(kv_grow(kv, 1, 1));
    EXPECT_EQ("after evicting one block, the claim", claim(kv, 2, t, 13), 2 * BS);
    kv_free(kv, 2); /* b1, b0 return: queue b1, b0 */
    OK(kv_grow(kv, 1, BS + 1));
    EXPECT_EQ("after evicting two blocks, the claim", claim(kv, 2, t, 13), BS);
    EXPECT_EQ("evictions", stats(kv).evictions, 2);
    kv_manager_destroy(&kv);
}

static void a_cached_block_is_never_handed_out_while_referenced(void **state)
{
    (void)state;
    kv_manager_t *kv = make(6, 3, 8, true); /* 5 usable */
    int32_t t[9];
    fill(t, 9, 40);
    admit(kv, 0, t, 8);
    kv_free(kv, 0);
    EXPECT_EQ("claim after free", claim(kv, 1, t, 9), 2 * BS);
    int32_t c0 = blk(kv, 1, 0), c1 = blk(kv, 1, 1);
    EXPECT_EQ("free after the claim re-references", n_free(kv), 3);
    OK(kv_grow(kv, 2, 3 * BS));
    CHECK(kv);
    for (int i = 0; i < 3; i++)
        if (blk(kv, 2, i) == c0 || blk(kv, 2, i) == c1)
            fail_msg("slot 2 entry %d: got claimed block %d, expected a free one", i,
                     blk(kv, 2, i));
    EXPECT_STATUS(kv_grow(kv, 2, 3 * BS + 1), DERAS_EBUSY);
    EXPECT_EQ("claimed blocks stay cached", stats(kv).n_cached, 2);
    EXPECT_EQ("evictions", stats(kv).evictions, 0);
    kv_manager_destroy(&kv);
}

static void same_tokens_under_a_different_parent_are_not_a_hit(void **state)
{
    (void)state;
    for (int bits = 0; bits <= 64; bits += 64) {
        kv_manager_t *kv = make(32, 6, 4, true);
        kv_manager_set_hash_bits(kv, bits); /* 0: every block hashes alike */
        int32_t xy[9], zy[9], wy[9];
        fill(xy, 9, 10);
        memcpy(zy, xy, sizeof zy);
        memcpy(wy, xy, sizeof wy);
        fill(zy, 4, 70);
        fill(wy, 4, 90);
        admit(kv, 0, xy, 8);
        EXPECT_EQ("zy after xy claims", admit(kv, 1, zy, 8), 0);
        EXPECT_EQ("both second blocks registered", stats(kv).n_cached, 4);
        EXPECT_EQ("zy claims", claim(kv, 2, zy, 9), 2 * BS);
        EXPECT_EQ("zy's block 1 is its own", blk(kv, 2, 1), blk(kv, 1, 1));
        EXPECT_EQ("xy claims", claim(kv, 3, xy, 9), 2 * BS);
        EXPECT_EQ("xy's block 1 is its own", blk(kv, 3, 1), blk(kv, 0, 1));
        EXPECT_EQ("wy (y under an uncached parent) claims", claim(kv, 4, wy, 9), 0);
        EXPECT_EQ("y alone (no parent) claims", claim(kv, 5, xy + 4, 5), 0);
        kv_manager_destroy(&kv);
    }
}

static void a_reused_parent_block_does_not_revive_its_old_children(void **state)
{
    (void)state;
    for (int bits = 0; bits <= 64; bits += 64) {
        kv_manager_t *kv = make(4, 4, 4, true); /* 3 usable */
        kv_manager_set_hash_bits(kv, bits);
        int32_t xy[9], z[9];
        fill(xy, 9, 10);
        memcpy(z, xy, sizeof z);
        fill(z, 4, 300); /* z = z-block + y-block + 1 */
        /* slots 0 and 1 compute x concurrently; slot 1 also computes y */
        int c;
        OK(kv_claim_prefix(kv, 0, xy, 4, &c));
        OK(kv_claim_prefix(kv, 1, xy, 8, &c));
        OK(kv_grow(kv, 0, 4));
        OK(kv_grow(kv, 1, 8));
        OK(kv_commit(kv, 0, xy, 4)); /* P = slot 0's block registers x */
        OK(kv_commit(kv, 1, xy, 8)); /* slot 1's x is a duplicate; y registers under P */
        CHECK(kv);
        EXPECT_EQ("cached: x once, y once", stats(kv).n_cached, 2);
        int32_t p = blk(kv, 0, 0);
        EXPECT_EQ("claim of xy finds P then y", claim(kv, 2, xy, 9), 2 * BS);
        EXPECT_EQ("claimed parent", blk(kv, 2, 0), p);
        kv_free(kv, 2);
        kv_free(kv, 0); /* P is free, y still held by slot 1 */
        OK(kv_grow(kv, 0, 4)); /* the only free block: P is reused... */
        EXPECT_EQ("the reused block", blk(kv, 0, 0), p);
        OK(kv_commit(kv, 0, z, 4)); /* ...and now caches z at a new generation */
        kv_free(kv, 1); /* y becomes a free cached block whose parent was P */
        CHECK(kv);
        EXPECT_EQ("claim of z + y finds z only", claim(kv, 2, z, 9), BS);
        EXPECT_EQ("claimed block", blk(kv, 2, 0), p);
        EXPECT_EQ("claim of x + y finds nothing", claim(kv, 3, xy, 9), 0);
        kv_manager_destroy(&kv);
    }
}

static void a_duplicate_prefix_registers_its_own_blocks_once_the_original_is_evicted(void **state)
{
    (void)state;
    kv_manager_t *kv = make(4, 4, 4, true); /* 3 usable */
    int32_t xy[9];
    fill(xy, 9, 10);
    int c;
    /* slots 0 and 1 compute x concurrently; slot 0 commits first, slot 1's x is a dup */
    OK(kv_claim_prefix(kv, 0, xy, 4, &c));
    OK(kv_claim_prefix(kv, 1, xy, 9, &c));
    OK(kv_grow(kv, 0, 4));
    OK(kv_grow(kv, 1, 8));
    OK(kv_commit(kv, 0, xy, 4));
    OK(kv_commit(kv, 1, xy, 4));
    EXPECT_EQ("cached after the duplicate commit", stats(kv).n_cached, 1);
    kv_free(kv, 0);
    OK(kv_grow(kv, 2, 1)); /* evicts slot 0's x */
    EXPECT_EQ("evictions", stats(kv).evictions, 1);
    OK(kv_commit(kv, 1, xy, 8)); /* y must not hang under the evicted x */
    CHECK(kv);
    EXPECT_EQ("cached: slot 1's x and y", stats(kv).n_cached, 2);
    EXPECT_EQ("claim of x + y", claim(kv, 3, xy, 9), 2 * BS);
    EXPECT_EQ("claimed x", blk(kv, 3, 0), blk(kv, 1, 0));
    EXPECT_EQ("claimed y", blk(kv, 3, 1), blk(kv, 1, 1));
    kv_manager_destroy(&kv);
}

static void a_block_registered_under_an_evicted_duplicate_is_found_again(void **state)
{
    (void)state;
    kv_manager_t *kv = make(4, 4, 4, true); /* 3 usable */
    int32_t xy[9];
    fill(xy, 9, 10);
    int c;
    OK(kv_claim_prefix(kv, 0, xy, 4, &c));
    OK(kv_claim_prefix(kv, 1, xy, 9, &c));
    OK(kv_grow(kv, 0, 4));
    OK(kv_grow(kv, 1, 8));
    OK(kv_fork(kv, 1, 2)); /* slot 2 shares slot 1's x' and y, commits later */
    OK(kv_commit(kv, 0, xy, 4));
    OK(kv_commit(kv, 1, xy, 8)); /* x' duplicates slot 0's x; y registers under x */
    kv_free(kv, 0);
    kv_free(kv, 1);
    OK(kv_grow(kv, 3, 1)); /* evicts x: y is cached but unreachable */
    EXPECT_EQ("claim while y hangs under the evicted x", claim(kv, 0, xy, 9), 0);
    OK(kv_commit(kv, 2, xy, 8)); /* x' registers, and y moves under it */
    CHECK(kv);
    EXPECT_EQ("claim of x + y", claim(kv, 1, xy, 9), 2 * BS);
    EXPECT_EQ("claimed x'", blk(kv, 1, 0), blk(kv, 2, 0));
    EXPECT_EQ("claimed y", blk(kv, 1, 1), blk(kv, 2, 1));
    kv_manager_destroy(&kv);
}

static void prefix_caching_off_never_claims_or_registers(void **state)
{
    (void)state;
    kv_manager_t *kv = make(16, 2, 4, false);
    int32_t t[9];
    fill(t, 9, 1);
    EXPECT_EQ("first claim", admit(kv, 0, t, 8), 0);
    EXPECT_EQ("second claim", claim(kv, 1, t, 9), 0);
    kv_stats s = stats(kv);
    EXPECT_EQ("cached blocks", s.n_cached, 0);
    EXPECT_EQ("hit tokens", s.prefix_hit_tokens, 0);
    kv_manager_destroy(&kv);
}

/* ---- fork and copy-on-write ---- */

static void fork_shares_every_block_and_frees_balance(void **state)
{
    (void)state;
    kv_manager_t *kv = make(16, 4, 4, false);
    OK(kv_grow(kv, 0, 10));
    OK(kv_fork(kv, 0, 1));
    OK(kv_fork(kv, 1, 2));
    CHECK(kv);
    EXPECT_EQ("forked tokens", kv_slot_tokens(kv, 2), 10);
    assert_memory_equal(kv_block_table(kv, 0), kv_block_table(kv, 2), 4 * sizeof(int32_t));
    EXPECT_EQ("free after forks", n_free(kv), 15 - 3);
    kv_free(kv, 0);
    kv_free(kv, 2);
    CHECK(kv); /* check compares each reference count with the tables */
    EXPECT_EQ("free while one holder remains", n_free(kv), 15 - 3);
    kv_free(kv, 1);
    CHECK(kv);
    EXPECT_EQ("free after the last holder", n_free(kv), 15);
    kv_manager_destroy(&kv);
}

static void first_write_into_a_shared_partial_block_copies_it_once(void **state)
{
    (void)state;
    kv_manager_t *kv = make(16, 2, 4, false);
    OK(kv_grow(kv, 0, 10));
    OK(kv_fork(kv, 0, 1));
    int32_t orig[4];
    memcpy(orig, kv_block_table(kv, 0), sizeof orig);
    EXPECT_EQ("blocks needed for the first write (the copy)", kv_blocks_needed(kv, 1, 11), 1);
    OK(kv_grow(kv, 1, 11));
    CHECK(kv);
    EXPECT_EQ("shared full block 0", blk(kv, 1, 0), orig[0]);
    EXPECT_EQ("shared full block 1", blk(kv, 1, 1), orig[1]);
    EXPECT_NE("the writer's last block is new", blk(kv, 1, 2), orig[2]);
    assert_memory_equal(orig, kv_block_table(kv, 0), sizeof orig);
    kv_copy cp[4];
    int n = kv_take_copies(kv, cp, 4);
    EXPECT_EQ("copies recorded", n, 1);
    EXPECT_EQ("copy source", cp[0].src, orig[2]);
    EXPECT_EQ("copy destination", cp[0].dst, blk(kv, 1, 2));
    EXPECT_EQ("copies after taking", kv_take_copies(kv, cp, 4), 0);
    EXPECT_EQ("cow stat", stats(kv).cow_copies, 1);
    /* the other slot now holds the original alone: it writes in place */
    EXPECT_EQ("blocks needed by the original holder", kv_blocks_needed(kv, 0, 12), 0);
    OK(kv_grow(kv, 0, 12));
    EXPECT_EQ("original holder keeps its block", blk(kv, 0, 2), orig[2]);
    EXPECT_EQ("no second copy", kv_take_copies(kv, cp, 4), 0);
    kv_free(kv, 0);
    kv_free(kv, 1);
    CHECK(kv);
    EXPECT_EQ("free at the end", n_free(kv), 15);
    kv_manager_destroy(&kv);
}

static void full_shared_blocks_are_never_copied(void **state)
{
    (void)state;
    kv_manager_t *kv = make(16, 2, 4, false);
    OK(kv_grow(kv, 0, 2 * BS));
    OK(kv_fork(kv, 0, 1));
    EXPECT_EQ("blocks needed past full shared blocks", kv_blocks_needed(kv, 1, 3 * BS), 1);
    OK(kv_grow(kv, 1, 3 * BS));
    EXPECT_EQ("block 1 still shared", blk(kv, 1, 1), blk(kv, 0, 1));
    kv_copy cp[2];
    EXPECT_EQ("copies", kv_take_copies(kv, cp, 2), 0);
    EXPECT_EQ("cow stat", stats(kv).cow_copies, 0);
    kv_manager_destroy(&kv);
}

static void blocks_needed_and_can_grow_count_the_copy(void **state)
{
    (void)state;
    kv_manager_t *kv = make(5, 2, 4, false); /* 4 usable */
    OK(kv_grow(kv, 0, 10));                  /* 3 blocks, last partial */
    OK(kv_fork(kv, 0, 1));
    EXPECT_EQ("free", n_free(kv), 1);
    EXPECT_EQ("needed: copy + one new block", kv_blocks_needed(kv, 1, 13), 2);
    assert_false(kv_can_grow(kv, 1, 13));
    EXPECT_STATUS(kv_grow(kv, 1, 13), DERAS_EBUSY);
    CHECK(kv);
    EXPECT_EQ("cow stat after a refused grow", stats(kv).cow_copies, 0);
    kv_copy cp[2];
    EXPECT_EQ("copies after a refused grow", kv_take_copies(kv, cp, 2), 0);
    EXPECT_EQ("needed: the copy alone", kv_blocks_needed(kv, 1, 12), 1);
    assert_true(kv_can_grow(kv, 1, 12));
    OK(kv_grow(kv, 1, 12));
    EXPECT_EQ("free after the copy", n_free(kv), 0);
    kv_manager_destroy(&kv);
}

static void pending_copies_run_in_order_hold_their_sources_and_never_overflow(void **state)
{
    (void)state;
    kv_manager_t *kv = make(6, 4, 2, false); /* 5 usable */
    kv_copy cp[8];
    OK(kv_grow(kv, 0, 2));
    int32_t a = blk(kv, 0, 0);
    /* ten times more copy-on-writes than blocks, never taken: copies into freed blocks drop */
    for (int i = 0; i < 50; i++) {
        OK(kv_fork(kv, 0, 1));
        OK(kv_grow(kv, 1, 3));
        CHECK(kv);
        kv_free(kv, 1);
    }
    CHECK(kv);
    EXPECT_EQ("cow stat", stats(kv).cow_copies, 50);
    EXPECT_EQ("free once the copies' destinations are gone", n_free(kv), 4);
    EXPECT_EQ("copies into freed blocks", kv_take_copies(kv, cp, 8), 0);
    /* slot 1 copies a into b; slot 2, forked from slot 1 before that copy ran, copies b
     * into c: b must keep its place (and its own copy) even once slot 1 lets it go */
    OK(kv_fork(kv, 0, 1));
    OK(kv_grow(kv, 1, 3));
    int32_t b = blk(kv, 1, 0);
    OK(kv_fork(kv, 1, 2));
    OK(kv_grow(kv, 2, 4));
    int32_t c = blk(kv, 2, 0);
    kv_free(kv, 1);
    CHECK(kv);
    EXPECT_EQ("free while b is a queued copy's source: a, b, c out", n_free(kv), 2);
    OK(kv_fork(kv, 0, 3));
    EXPECT_EQ("a is shared by tables 0 and 3 (the queued copy's hold is no share)",
              kv_blocks_needed(kv, 0, 4), 1);
    OK(kv_grow(kv, 0, 4)); /* a' */
    CHECK(kv);
    EXPECT_EQ("first take, cap 1", kv_take_copies(kv, cp, 1), 1);
    EXPECT_EQ("1st copy src", cp[0].src, a);
    EXPECT_EQ("1st copy dst", cp[0].dst, b);
    EXPECT_EQ("second take", kv_take_copies(kv, cp, 8), 2);
    EXPECT_EQ("2nd copy src", cp[0].src, b);
    EXPECT_EQ("2nd copy dst", cp[0].dst, c);
    EXPECT_EQ("3rd copy src", cp[1].src, a);
    EXPECT_EQ("3rd copy dst", cp[1].dst, blk(kv, 0, 0));
    EXPECT_EQ("slot 3 keeps the original", blk(kv, 3, 0), a);
    CHECK(kv);
    EXPECT_EQ("free after taking: b went back", n_free(kv), 2);
    kv_manager_destroy(&kv);
}

/* ---- truncation ---- */

static void truncate_releases_the_blocks_beyond_the_kept_tokens_tail_first(void **state)
{
    (void)state;
    kv_manager_t *kv = make(5, 3, 4, true); /* 4 usable */
    int32_t t[17];
    fill(t, 17, 60);
    admit(kv, 0, t, 16);
    int32_t b0 = blk(kv, 0, 0);
    OK(kv_truncate(kv, 0, 5));
    CHECK(kv);
    EXPECT_EQ("tokens after truncate", kv_slot_tokens(kv, 0), 5);
    EXPECT_EQ("free after truncate", n_free(kv), 2);
    EXPECT_EQ("kept block 0", blk(kv, 0, 0), b0);
    EXPECT_EQ("released entry 2", blk(kv, 0, 2), 0);
    EXPECT_EQ("released entry 3", blk(kv, 0, 3), 0);
    EXPECT_EQ("truncation keeps cached blocks", stats(kv).n_cached, 4);
    /* released tail first: block 3 was freed before block 2, so it goes first */
    OK(kv_grow(kv, 1, 1));
    EXPECT_EQ("claim after one eviction", claim(kv, 2, t, 17), 3 * BS);
    OK(kv_truncate(kv, 2, 0));
    OK(kv_truncate(kv, 0, 0));
    CHECK(kv);
    EXPECT_EQ("truncate to 0 empties the slot", n_free(kv), 3);
    kv_manager_destroy(&kv);
}

static void truncate_into_a_cached_block_another_slot_holds_copies_on_the_next_write(void **state)
{
    (void)state;
    kv_manager_t *kv = make(16, 4, 4, true);
    int32_t t[9], u[9];
    fill(t, 9, 20);
    admit(kv, 0, t, 8);
    int32_t c = blk(kv, 0, 1);
    EXPECT_EQ("slot 1 claims", claim(kv, 1, t, 9), 2 * BS);
    OK(kv_truncate(kv, 0, 6)); /* block 1 is partial for slot 0, full for slot 1 */
    CHECK(kv);
    memcpy(u, t, sizeof u);
    u[6] = -1;
    u[7] = -2;
    EXPECT_EQ("blocks needed to rewrite tokens 6, 7 (the copy)", kv_blocks_needed(kv, 0, 8), 1);
    OK(kv_grow(kv, 0, 8));
    EXPECT_NE("slot 0 writes into its own copy", blk(kv, 0, 1), c);
    kv_copy cp[2];
    EXPECT_EQ("copies", kv_take_copies(kv, cp, 2), 1);
    EXPECT_EQ("copy src", cp[0].src, c);
    OK(kv_commit(kv, 0, u, 8));
    CHECK(kv);
    EXPECT_EQ("cached: x, y, and slot 0's new block", stats(kv).n_cached, 3);
    EXPECT_EQ("the old prefix still claims", claim(kv, 2, t, 9), 2 * BS);
    EXPECT_EQ("from the shared block", blk(kv, 2, 1), c);
    EXPECT_EQ("the new prefix claims", claim(kv, 3, u, 9), 2 * BS);
    EXPECT_EQ("from slot 0's block", blk(kv, 3, 1), blk(kv, 0, 1));
    kv_manager_destroy(&kv);
}

static void truncate_into_an_unshared_cached_block_uncaches_it_on_the_next_write(void **state)
{
    (void)state;
    kv_manager_t *kv = make(16, 4, 4, true);
    int32_t t[9], u[9];
    fill(t, 9, 20);
    memcpy(u, t, sizeof u);
    u[6] = -1;
    u[7] = -2;
    admit(kv, 0, t, 8);
    int32_t c = blk(kv, 0, 1);
    OK(kv_truncate(kv, 0, 6));
    EXPECT_EQ("cached until written", stats(kv).n_cached, 2);
    EXPECT_EQ("blocks needed (no copy: sole holder)", kv_blocks_needed(kv, 0, 8), 0);
    OK(kv_grow(kv, 0, 8));
    CHECK(kv);
    EXPECT_EQ("written in place", blk(kv, 0, 1), c);
    kv_copy cp[2];
    EXPECT_EQ("copies", kv_take_copies(kv, cp, 2), 0);
    EXPECT_EQ("cached after the write", stats(kv).n_cached, 1);
    EXPECT_EQ("the overwritten prefix no longer claims block 1", claim(kv, 1, t, 9), BS);
    OK(kv_commit(kv, 0, u, 8));
    EXPECT_EQ("the rewritten prefix claims", claim(kv, 2, u, 9), 2 * BS);
    EXPECT_EQ("from the rewritten block", blk(kv, 2, 1), c);
    CHECK(kv);
    kv_manager_destroy(&kv);
}

/* ---- property test ---- */

#define MAX_SEQS 6
#define MAX_BPS 12
#define MAX_BS 4
#define CAP (MAX_BPS * MAX_BS)
#define N_TEMPLATES 3

typedef struct model_slot {
    int n_tokens, n_computed;
    int32_t tok[CAP];
    uint64_t fp[CAP];       /* fingerprint of tok[0..i] */
    int32_t table[MAX_BPS]; /* expected block table */
} model_slot;

typedef struct model_copy {
    int32_t src, dst;
    bool live;
} model_copy;

typedef struct stress {
    uint64_t seed, rng;
    int seq, op;
    const char *what;
    bool trace; /* KV_TEST_TRACE=seed:sequence prints every operation of that sequence */
    kv_manager_opts o;
    int hash_bits;
    kv_manager_t *kv;
    model_slot slots[MAX_SEQS];
    int *tref;     /* (n_blocks) expected block-table references */
    int *pin;      /* (n_blocks) expected queued copies reading the block */
    uint64_t *mem; /* (n_blocks, block_size) simulated KV: fingerprints */
    model_copy *pend;
    int n_pend, pend_cap;
    int32_t templates[N_TEMPLATES][CAP];
    /* totals */
    long n_ops, n_claims, n_hit_claims, n_verified;
    uint64_t hits, evictions, cows;
} stress;

#define SFAIL(st, ...)                                                                     \
    do {                                                                                   \
        char m_[512];                                                                      \
        snprintf(m_, sizeof m_, __VA_ARGS__);                                              \
        fail_msg("seed %llu sequence %d op %d (%s; n_blocks %d bs %d seqs %d width %d "   \
                 "caching %d hash bits %d): %s [replay: KV_TEST_TRACE=%llu:%d]",           \
                 (unsigned long long)(st)->seed, (st)->seq, (st)->op, (st)->what,          \
                 (st)->o.n_blocks, (st)->o.block_size, (st)->o.max_seqs,                   \
                 (st)->o.max_blocks_per_seq, (st)->o.prefix_caching, (st)->hash_bits, m_,  \
                 (unsigned long long)(st)->seed, (st)->seq);                               \
    } while (0)

static int rnd(stress *st, int n)
{
    return n > 0 ? (int)(test_rng_next(&st->rng) % (uint64_t)n) : 0;
}

static uint64_t fingerprint(uint64_t prev, int32_t tok)
{
    uint64_t z = prev ^ ((uint64_t)(uint32_t)tok * 0x9E3779B97F4A7C15ull);
    return test_rng_next(&z) | 1; /* 0 means "never written" */
}

/* Fingerprints of positions [from, to) from the tokens already in m->tok. */
static void set_fingerprints(model_slot *m, int from, int to)
{
    for (int i = from; i < to; i++)
        m->fp[i] = fingerprint(i ? m->fp[i - 1] : 0, m->tok[i]);
}

static int cap_tokens(const stress *st)
{
    return st->o.max_blocks_per_seq * st->o.block_size;
}

static int nblk(const stress *st, int n)
{
    return (n + st->o.block_size - 1) / st->o.block_size;
}

static bool model_free(const stress *st, int32_t b)
{
    return st->tref[b] == 0 && st->pin[b] == 0;
}

/* Block b lost a reference: once it has none, a queued copy into it is dropped, and with
 * it the copy's hold on its source. */
static void model_drop(stress *st, int32_t b)
{
    while (model_free(st, b)) {
        int i = 0;
        while (i < st->n_pend && !(st->pend[i].live && st->pend[i].dst == b))
            i++;
        if (i == st->n_pend)
            return;
        st->pend[i].live = false;
        b = st->pend[i].src;
        st->pin[b]--;
    }
}

static void model_release(stress *st, int32_t b)
{
    st->tref[b]--;
    model_drop(st, b);
}

static void model_push_copy(stress *st, int32_t src, int32_t dst)
{
    if (st->n_pend == st->pend_cap) {
        int j = 0;
        for (int i = 0; i < st->n_pend; i++)
            if (st->pend[i].live)
                st->pend[j++] = st->pend[i];
        st->n_pend = j;
        if (j == st->pend_cap)
            SFAIL(st, "model copy queue overflow: %d live copies", j);
    }
    st->pend[st->n_pend++] = (model_copy){src, dst, true};
    st->pin[src]++;
}

static void apply_copy(stress *st, kv_copy c)
{
    size_t bs = (size_t)st->o.block_size;
    memcpy(st->mem + (size_t)c.dst * bs, st->mem + (size_t)c.src * bs, bs * sizeof *st->mem);
}

/* Take up to cap copies, compare them with the model's queue and run them on the
 * simulated memory. Returns how many came. */
static int take_copies(stress *st, int cap)
{
    kv_copy got[8];
    if (cap > 8)
        cap = 8;
    int n = kv_take_copies(st->kv, got, cap);
    if (n < 0 || n > cap)
        SFAIL(st, "take_copies(cap %d): expected 0..%d, got %d", cap, cap, n);
    int k = 0, i = 0;
    for (; i < st->n_pend && k < cap; i++) {
        if (!st->pend[i].live)
            continue;
        if (k >= n)
            SFAIL(st, "take_copies: expected copy {%d -> %d} at %d, got only %d copies",
                  st->pend[i].src, st->pend[i].dst, k, n);
        if (got[k].src != st->pend[i].src || got[k].dst != st->pend[i].dst)
            SFAIL(st, "take_copies: copy %d expected {%d -> %d}, got {%d -> %d}", k,
                  st->pend[i].src, st->pend[i].dst, got[k].src, got[k].dst);
        st->pend[i].live = false;
        apply_copy(st, got[k]);
        st->pin[got[k].src]--;
        model_drop(st, got[k].src);
        k++;
    }
    if (k != n)
        SFAIL(st, "take_copies: expected %d copies, got %d", k, n);
    memmove(st->pend, st->pend + i, (size_t)(st->n_pend - i) * sizeof *st->pend);
    st->n_pend -= i;
    return n;
}

/* Every computed position of every slot reads its own fingerprint. */
static void verify_memory(stress *st)
{
    int bs = st->o.block_size;
    for (int s = 0; s < st->o.max_seqs; s++) {
        const model_slot *m = &st->slots[s];
        for (int p = 0; p < m->n_computed; p++) {
            int32_t b = m->table[p / bs];
            if (st->mem[(size_t)b * (size_t)bs + (size_t)(p % bs)] != m->fp[p])
                SFAIL(st, "slot %d position %d in block %d: expected the KV of its own prefix "
                      "(%016llx), got %016llx", s, p, b, (unsigned long long)m->fp[p],
                      (unsigned long long)st->mem[(size_t)b * (size_t)bs + (size_t)(p % bs)]);
            st->n_verified++;
        }
    }
}

/* The manager agrees with the model: invariants, tables, token counts, free blocks. */
static void compare(stress *st)
{
    int st_ = kv_manager_check(st->kv);
    if (st_)
        SFAIL(st, "kv_manager_check: %s", deras_errmsg());
    for (int s = 0; s < st->o.max_seqs; s++) {
        const model_slot *m = &st->slots[s];
        int n = kv_slot_tokens(st->kv, s);
        if (n != m->n_tokens)
            SFAIL(st, "slot %d: expected %d tokens, got %d", s, m->n_tokens, n);
        const int32_t *t = kv_block_table(st->kv, s);
        for (int i = 0; i < st->o.max_blocks_per_seq; i++)
            if (t[i] != m->table[i])
                SFAIL(st, "slot %d table entry %d: expected block %d, got %d", s, i,
                      m->table[i], t[i]);
    }
    int want_free = 0;
    for (int b = 1; b < st->o.n_blocks; b++)
        want_free += model_free(st, b);
    kv_stats ks;
    kv_get_stats(st->kv, &ks);
    if (ks.n_free != want_free || ks.n_usable != st->o.n_blocks - 1)
        SFAIL(st, "stats: expected %d free of %d, got %d of %d", want_free,
              st->o.n_blocks - 1, ks.n_free, ks.n_usable);
}

static int pick_slot(stress *st, bool empty)
{
    int start = rnd(st, st->o.max_seqs);
    for (int k = 0; k < st->o.max_seqs; k++) {
        int s = (start + k) % st->o.max_seqs;
        if ((st->slots[s].n_tokens == 0) == empty)
            return s;
    }
    return -1;
}

static int32_t random_token(stress *st)
{
    return 1 + rnd(st, 2); /* two symbols: blocks repeat often */
}

/* Grow slot s to n_total; tokens [n_tokens, n_total) must already be in the model. */
static int grow(stress *st, int s, int n_total)
{
    model_slot *m = &st->slots[s];
    const int bs = st->o.block_size, n = m->n_tokens;
    int have = nblk(st, n), want = nblk(st, n_total);
    bool cow = n_total > n && n % bs && st->tref[m->table[have - 1]] > 1;
    int need = n_total > n ? want - have + cow : 0;
    int n_free = 0;
    for (int b = 1; b < st->o.n_blocks; b++)
        n_free += model_free(st, b);
    bool range = n_total > cap_tokens(st);
    int got_need = kv_blocks_needed(st->kv, s, n_total);
    if (got_need != need)
        SFAIL(st, "blocks_needed(slot %d, %d -> %d): expected %d, got %d", s, n, n_total, need,
              got_need);
    bool can = !range && need <= n_free;
    if (kv_can_grow(st->kv, s, n_total) != can)
        SFAIL(st, "can_grow(slot %d, %d -> %d, need %d, free %d): expected %d", s, n, n_total,
              need, n_free, can);
    int rc = kv_grow(st->kv, s, n_total);
    int want_rc = range ? DERAS_ERANGE : !can ? DERAS_EBUSY : DERAS_OK;
    if (rc != want_rc)
        SFAIL(st, "grow(slot %d, %d -> %d): expected %s, got %s (%s)", s, n, n_total,
              deras_status_name(want_rc), deras_status_name(rc), deras_errmsg());
    if (rc)
        return rc;
    const int32_t *t = kv_block_table(st->kv, s);
    for (int i = 0; i < have - cow; i++)
        if (t[i] != m->table[i])
            SFAIL(st, "grow(slot %d): kept entry %d changed from %d to %d (copy expected: %d)",
                  s, i, m->table[i], t[i], cow);
    if (cow) {
        int32_t old = m->table[have - 1], dst = t[have - 1];
        if (dst <= 0 || dst >= st->o.n_blocks || !model_free(st, dst))
            SFAIL(st, "grow(slot %d): copy of shared block %d went into block %d, which is "
                  "not free", s, old, dst);
        st->tref[dst] = 1;
        model_push_copy(st, old, dst);
        model_release(st, old);
        m->table[have - 1] = dst;
        st->cows++;
    }
    for (int i = have; i < want; i++) {
        int32_t b = t[i];
        if (b <= 0 || b >= st->o.n_blocks || !model_free(st, b))
            SFAIL(st, "grow(slot %d): entry %d got block %d, expected a free block", s, i, b);
        st->tref[b] = 1;
        m->table[i] = b;
    }
    m->n_tokens = n_total;
    return rc;
}

static void op_admit(stress *st)
{
    int s = pick_slot(st, true);
    if (s < 0)
        return;
    model_slot *m = &st->slots[s];
    int cap = cap_tokens(st);
    int len = 1 + rnd(st, cap + st->o.block_size); /* sometimes too long */
    if (len > CAP)
        len = CAP;
    /* a quarter of prompts repeat a live slot's tokens: the same prefix computed twice
     * before either commits, the way identical requests arriving together are */
    int other = rnd(st, 4) ? -1 : pick_slot(st, false);
    const int32_t *tpl = other >= 0 ? st->slots[other].tok : st->templates[rnd(st, N_TEMPLATES)];
    int same = other >= 0 ? st->slots[other].n_tokens : rnd(st, len + 1);
    if (same > len)
        same = len;
    for (int i = 0; i < len; i++)
        m->tok[i] = i < same ? tpl[i] : random_token(st);
    set_fingerprints(m, 0, len);
    int cached = -1;
    int rc = kv_claim_prefix(st->kv, s, m->tok, len, &cached);
    if (rc)
        SFAIL(st, "claim(slot %d, %d tokens): expected ok, got %s (%s)", s, len,
              deras_status_name(rc), deras_errmsg());
    int max = ((len - 1) / st->o.block_size) * st->o.block_size;
    if (max > cap)
        max = cap;
    if (cached < 0 || cached % st->o.block_size || cached > max ||
        (!st->o.prefix_caching && cached))
        SFAIL(st, "claim(slot %d, %d tokens): expected whole blocks up to %d, got %d", s, len,
              st->o.prefix_caching ? max : 0, cached);
    const int32_t *t = kv_block_table(st->kv, s);
    int bs = st->o.block_size;
    for (int i = 0; i < cached / bs; i++) {
        int32_t b = t[i];
        if (b <= 0 || b >= st->o.n_blocks)
            SFAIL(st, "claim(slot %d): entry %d is block %d", s, i, b);
        for (int j = 0; j < bs; j++)
            if (st->mem[(size_t)b * (size_t)bs + (size_t)j] != m->fp[i * bs + j])
                SFAIL(st, "claim(slot %d, %d tokens): block %d (entry %d) position %d holds "
                      "KV of another prefix", s, len, b, i, j);
        st->tref[b]++;
        m->table[i] = b;
    }
    m->n_tokens = m->n_computed = cached;
    st->n_claims++;
    st->n_hit_claims += cached > 0;
    /* a second claim on the now non-empty slot is refused and changes nothing */
    if (cached && !rnd(st, 8)) {
        int again;
        if (kv_claim_prefix(st->kv, s, m->tok, len, &again) != DERAS_EINVAL)
            SFAIL(st, "claim on non-empty slot %d: expected invalid_argument", s);
    }
    if (rnd(st, 8) && grow(st, s, len) && rnd(st, 2)) {
        /* it does not fit: give the claim back, as a scheduler would */
        for (int i = nblk(st, m->n_tokens) - 1; i >= 0; i--) {
            model_release(st, m->table[i]);
            m->table[i] = 0;
        }
        m->n_tokens = m->n_computed = 0;
        kv_free(st->kv, s);
    }
}

static void op_grow(stress *st)
{
    int s = pick_slot(st, false);
    if (s < 0)
        return;
    model_slot *m = &st->slots[s];
    int n = m->n_tokens;
    int add = rnd(st, 8) ? 1 + rnd(st, 2 * st->o.block_size + 1) : 0;
    int n_total = n + add;
    if (n_total > CAP)
        n_total = CAP;
    for (int i = n; i < n_total; i++)
        m->tok[i] = random_token(st);
    set_fingerprints(m, n, n_total);
    grow(st, s, n_total);
}

/* One forward pass: run every pending copy, then compute the pending tokens of some slots
 * into their blocks, then check every slot reads its own KV. */
static void op_forward(stress *st)
{
    while (take_copies(st, 8) > 0) {
    }
    if (st->n_pend)
        SFAIL(st, "forward: %d copies expected still pending, got none", st->n_pend);
    int bs = st->o.block_size;
    for (int s = 0; s < st->o.max_seqs; s++) {
        model_slot *m = &st->slots[s];
        if (!rnd(st, 4))
            continue;
        for (int p = m->n_computed; p < m->n_tokens; p++)
            st->mem[(size_t)m->table[p / bs] * (size_t)bs + (size_t)(p % bs)] = m->fp[p];
        m->n_computed = m->n_tokens;
    }
    verify_memory(st);
}

static void op_commit(stress *st)
{
    int s = pick_slot(st, false);
    if (s < 0)
        return;
    model_slot *m = &st->slots[s];
    int n = rnd(st, 4) ? m->n_computed : rnd(st, m->n_computed + 1);
    int rc = kv_commit(st->kv, s, m->tok, n);
    if (rc)
        SFAIL(st, "commit(slot %d, %d tokens): expected ok, got %s (%s)", s, n,
              deras_status_name(rc), deras_errmsg());
}

static void op_fork(stress *st)
{
    int src = pick_slot(st, false), dst = pick_slot(st, true);
    if (src < 0 || dst < 0)
        return;
    int rc = kv_fork(st->kv, src, dst);
    if (rc)
        SFAIL(st, "fork(%d -> %d): expected ok, got %s (%s)", src, dst, deras_status_name(rc),
              deras_errmsg());
    st->slots[dst] = st->slots[src];
    for (int i = 0; i < nblk(st, st->slots[src].n_tokens); i++)
        st->tref[st->slots[src].table[i]]++;
}

static void op_truncate(stress *st, bool to_zero)
{
    int s = pick_slot(st, false);
    if (s < 0)
        return;
    model_slot *m = &st->slots[s];
    int n = to_zero ? 0 : rnd(st, m->n_tokens + 1);
    if (to_zero)
        kv_free(st->kv, s);
    else if (kv_truncate(st->kv, s, n))
        SFAIL(st, "truncate(slot %d, %d -> %d): expected ok, got %s", s, m->n_tokens, n,
              deras_errmsg());
    for (int i = nblk(st, m->n_tokens) - 1; i >= nblk(st, n); i--) {
        model_release(st, m->table[i]);
        m->table[i] = 0;
    }
    m->n_tokens = n;
    if (m->n_computed > n)
        m->n_computed = n;
}

static void trace_state(const stress *st)
{
    printf("op %d %s:", st->op, st->what);
    for (int s = 0; s < st->o.max_seqs; s++) {
        const model_slot *m = &st->slots[s];
        if (!m->n_tokens)
            continue;
        printf(" [slot %d n %d computed %d:", s, m->n_tokens, m->n_computed);
        for (int i = 0; i < nblk(st, m->n_tokens); i++)
            printf(" %d", m->table[i]);
        printf(" tok");
        for (int i = 0; i < m->n_tokens; i++)
            printf("%s%d", i % st->o.block_size ? "" : " ", m->tok[i]);
        printf("]");
    }
    printf(" pending");
    for (int i = 0; i < st->n_pend; i++)
        if (st->pend[i].live)
            printf(" {%d->%d}", st->pend[i].src, st->pend[i].dst);
    printf("\n");
}

static void run_sequence(stress *st, int n_ops)
{
    const char *tr = getenv("KV_TEST_TRACE");
    unsigned long long tr_seed;
    int tr_seq;
    st->trace = tr && sscanf(tr, "%llu:%d", &tr_seed, &tr_seq) == 2 && tr_seed == st->seed &&
                tr_seq == st->seq;
    static const int bits_choice[] = {64, 64, 0, 0, 1, 2};
    st->o = (kv_manager_opts){
        .n_blocks = 2 + rnd(st, 40),
        .block_size = 1 + rnd(st, MAX_BS),
        .max_seqs = 1 + rnd(st, MAX_SEQS),
        .max_blocks_per_seq = 1 + rnd(st, MAX_BPS),
        .prefix_caching = rnd(st, 10) != 0,
    };
    st->what = "new";
    uint64_t cows_before = st->cows;
    int rc = kv_manager_new(&st->o, &st->kv);
    if (rc)
        SFAIL(st, "kv_manager_new: %s", deras_errmsg());
    st->hash_bits = bits_choice[rnd(st, 6)];
    kv_manager_set_hash_bits(st->kv, st->hash_bits);
    size_t nb = (size_t)st->o.n_blocks;
    st->tref = calloc(nb, sizeof *st->tref);
    st->pin = calloc(nb, sizeof *st->pin);
    st->mem = calloc(nb * (size_t)st->o.block_size, sizeof *st->mem);
    st->pend_cap = 2 * st->o.n_blocks;
    st->pend = calloc((size_t)st->pend_cap, sizeof *st->pend);
    assert_non_null(st->tref);
    assert_non_null(st->pin);
    assert_non_null(st->mem);
    assert_non_null(st->pend);
    st->n_pend = 0;
    memset(st->slots, 0, sizeof st->slots);
    for (int k = 0; k < N_TEMPLATES; k++)
        for (int i = 0; i < CAP; i++)
            st->templates[k][i] = random_token(st);
    for (st->op = 0; st->op < n_ops; st->op++) {
        int r = rnd(st, 100);
        if (r < 20) {
            st->what = "admit";
            op_admit(st);
        } else if (r < 40) {
            st->what = "grow";
            op_grow(st);
        } else if (r < 58) {
            st->what = "forward";
            op_forward(st);
        } else if (r < 70) {
            st->what = "commit";
            op_commit(st);
        } else if (r < 78) {
            st->what = "fork";
            op_fork(st);
        } else if (r < 86) {
            st->what = "truncate";
            op_truncate(st, false);
        } else if (r < 94) {
            st->what = "free";
            op_truncate(st, true);
        } else {
            st->what = "take_copies";
            take_copies(st, 1 + rnd(st, 3));
        }
        if (st->trace)
            trace_state(st);
        compare(st);
        st->n_ops++;
    }
    kv_stats ks;
    kv_get_stats(st->kv, &ks);
    st->hits += ks.prefix_hit_tokens;
    st->evictions += ks.evictions;
    if (ks.cow_copies != st->cows - cows_before)
        SFAIL(st, "stats: expected %llu copy-on-writes, got %llu",
              (unsigned long long)(st->cows - cows_before), (unsigned long long)ks.cow_copies);
    kv_manager_destroy(&st->kv);
    free(st->tref);
    free(st->pin);
    free(st->mem);
    free(st->pend);
}

static void random_operation_sequences_keep_every_invariant_and_read_only_their_own_kv(void **state)
{
    (void)state;
    static const uint64_t seeds[] = {1, 2, 3, 4, 0xdecafbad, 20240611, 77, 0x5eed};
    const int n_seqs = 2000, n_ops = 150;
    stress *st = calloc(1, sizeof *st);
    assert_non_null(st);
    long total_ops = 0, total_claims = 0, total_hit_claims = 0, total_verified = 0;
    uint64_t total_hits = 0, total_evict = 0, total_cows = 0;
    for (size_t k = 0; k < sizeof seeds / sizeof *seeds; k++) {
        memset(st, 0, sizeof *st);
        st->seed = seeds[k];
        st->rng = seeds[k];
        for (st->seq = 0; st->seq < n_seqs; st->seq++)
            run_sequence(st, n_ops);
        printf("  seed %-10llu: %ld ops, %ld claims (%ld hit), %llu hit tokens, %llu evictions, "
               "%llu copy-on-writes, %ld KV positions verified\n",
               (unsigned long long)st->seed, st->n_ops, st->n_claims, st->n_hit_claims,
               (unsigned long long)st->hits, (unsigned long long)st->evictions,
               (unsigned long long)st->cows, st->n_verified);
        if (!st->hits || !st->evictions || !st->cows)
            fail_msg("seed %llu: expected hits, evictions and copy-on-writes to be exercised, "
                     "got %llu, %llu, %llu", (unsigned long long)st->seed,
                     (unsigned long long)st->hits, (unsigned long long)st->evictions,
                     (unsigned long long)st->cows);
        total_ops += st->n_ops;
        total_claims += st->n_claims;
        total_hit_claims += st->n_hit_claims;
        total_verified += st->n_verified;
        total_hits += st->hits;
        total_evict += st->evictions;
        total_cows += st->cows;
    }
    printf("  total: %ld ops (%d sequences x %zu seeds), %ld claims (%ld hit), %llu hit tokens, "
           "%llu evictions, %llu copy-on-writes, %ld KV positions verified\n",
           total_ops, n_seqs, sizeof seeds / sizeof *seeds, total_claims, total_hit_claims,
           (unsigned long long)total_hits, (unsigned long long)total_evict,
           (unsigned long long)total_cows, total_verified);
    free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(new_rejects_bad_options_and_destroy_nulls_the_pointer),
        cmocka_unit_test(grow_hands_out_distinct_blocks_and_free_returns_them),
        cmocka_unit_test(null_block_is_never_handed_out),
        cmocka_unit_test(exhaustion_answers_ebusy_and_changes_nothing),
        cmocka_unit_test(growth_beyond_max_blocks_per_seq_is_erange),
        cmocka_unit_test(invalid_arguments_are_rejected_without_change),
        cmocka_unit_test(same_prompt_in_a_second_slot_claims_full_blocks_but_never_the_last_token),
        cmocka_unit_test(prompts_sharing_a_prefix_share_exactly_the_common_whole_blocks),
        cmocka_unit_test(hit_stats_count_queried_and_found_tokens),
        cmocka_unit_test(allocation_evicts_the_least_recently_freed_cached_block_first),
        cmocka_unit_test(freeing_tail_first_lets_a_prefix_head_outlive_its_tail),
        cmocka_unit_test(a_cached_block_is_never_handed_out_while_referenced),
        cmocka_unit_test(same_tokens_under_a_different_parent_are_not_a_hit),
        cmocka_unit_test(a_reused_parent_block_does_not_revive_its_old_children),
        cmocka_unit_test(a_duplicate_prefix_registers_its_own_blocks_once_the_original_is_evicted),
        cmocka_unit_test(a_block_registered_under_an_evicted_duplicate_is_found_again),
        cmocka_unit_test(prefix_caching_off_never_claims_or_registers),
        cmocka_unit_test(fork_shares_every_block_and_frees_balance),
        cmocka_unit_test(first_write_into_a_shared_partial_block_copies_it_once),
        cmocka_unit_test(full_shared_blocks_are_never_copied),
        cmocka_unit_test(blocks_needed_and_can_grow_count_the_copy),
        cmocka_unit_test(pending_copies_run_in_order_hold_their_sources_and_never_overflow),
        cmocka_unit_test(truncate_releases_the_blocks_beyond_the_kept_tokens_tail_first),
        cmocka_unit_test(truncate_into_a_cached_block_another_slot_holds_copies_on_the_next_write),
        cmocka_unit_test(truncate_into_an_unshared_cached_block_uncaches_it_on_the_next_write),
        cmocka_unit_test(random_operation_sequences_keep_every_invariant_and_read_only_their_own_kv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
