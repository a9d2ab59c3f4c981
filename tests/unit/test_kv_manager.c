/* SPDX-License-Identifier: Apache-2.0 */
/* test_kv_manager.c - KV block accounting: allocation, reference counts and prefix
 * caching here; fork, copy-on-write and truncation in test_kv_manager_cow.c; a property
 * test over random operation sequences in test_kv_manager_property.c (helpers shared
 * through test_kv_manager.h). One executable, one ctest.
 *
 * Unit tests use block_size 4 and small pools so that every block can be named. Seconds
 * in all, most of them the property test's.
 */
#include "test_kv_manager.h"

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
