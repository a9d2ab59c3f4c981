/* SPDX-License-Identifier: Apache-2.0 */
/* test_kv_manager_cow.c - part of test_kv_manager: fork shares blocks, the first write
 * into a shared partial block copies it (once, in order, never overflowing the copy
 * queue), and truncation releases blocks tail first and uncaches or copies a block it
 * cuts into. Scripted cases on named blocks; milliseconds.
 */
#include "test_kv_manager.h"

void fork_shares_every_block_and_frees_balance(void **state)
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

void first_write_into_a_shared_partial_block_copies_it_once(void **state)
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

void full_shared_blocks_are_never_copied(void **state)
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

void blocks_needed_and_can_grow_count_the_copy(void **state)
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

void pending_copies_run_in_order_hold_their_sources_and_never_overflow(void **state)
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

void truncate_releases_the_blocks_beyond_the_kept_tokens_tail_first(void **state)
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

void truncate_into_a_cached_block_another_slot_holds_copies_on_the_next_write(void **state)
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

void truncate_into_an_unshared_cached_block_uncaches_it_on_the_next_write(void **state)
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
