/* SPDX-License-Identifier: Apache-2.0 */
/* test_kv_manager.h - what the three files of test_kv_manager share: status and value
 * checks that name the failing call, a small manager (block_size 4, so every block can be
 * named) and the scheduler's admit/claim paths, and the tests main() runs from the other
 * two files. Header only; helpers are static inline.
 */
#ifndef DERAS_TEST_KV_MANAGER_H
#define DERAS_TEST_KV_MANAGER_H

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

static inline kv_manager_t *make(int n_blocks, int max_seqs, int max_blocks_per_seq, bool caching)
{
    kv_manager_opts o = {.n_blocks = n_blocks, .block_size = BS, .max_seqs = max_seqs,
                         .max_blocks_per_seq = max_blocks_per_seq, .prefix_caching = caching};
    kv_manager_t *kv = NULL;
    OK(kv_manager_new(&o, &kv));
    CHECK(kv);
    return kv;
}

static inline kv_stats stats(const kv_manager_t *kv)
{
    kv_stats s;
    kv_get_stats(kv, &s);
    return s;
}

static inline int n_free(const kv_manager_t *kv)
{
    return stats(kv).n_free;
}

static inline int32_t blk(const kv_manager_t *kv, int slot, int i)
{
    return kv_block_table(kv, slot)[i];
}

/* tokens[i] = base + i */
static inline void fill(int32_t *t, int n, int32_t base)
{
    for (int i = 0; i < n; i++)
        t[i] = base + i;
}

/* The scheduler's path for a new prompt: claim what is cached, grow to the whole prompt,
 * (compute it,) commit it. Returns the tokens claimed. */
static inline int admit(kv_manager_t *kv, int slot, const int32_t *t, int n)
{
    int cached = -1;
    OK(kv_claim_prefix(kv, slot, t, n, &cached));
    OK(kv_grow(kv, slot, n));
    OK(kv_commit(kv, slot, t, n));
    CHECK(kv);
    return cached;
}

static inline int claim(kv_manager_t *kv, int slot, const int32_t *t, int n)
{
    int cached = -1;
    OK(kv_claim_prefix(kv, slot, t, n, &cached));
    CHECK(kv);
    return cached;
}

/* test_kv_manager_cow.c: fork, copy-on-write, truncation */
void fork_shares_every_block_and_frees_balance(void **state);
void first_write_into_a_shared_partial_block_copies_it_once(void **state);
void full_shared_blocks_are_never_copied(void **state);
void blocks_needed_and_can_grow_count_the_copy(void **state);
void pending_copies_run_in_order_hold_their_sources_and_never_overflow(void **state);
void truncate_releases_the_blocks_beyond_the_kept_tokens_tail_first(void **state);
void truncate_into_a_cached_block_another_slot_holds_copies_on_the_next_write(void **state);
void truncate_into_an_unshared_cached_block_uncaches_it_on_the_next_write(void **state);

/* test_kv_manager_property.c: random operation sequences against a model */
void random_operation_sequences_keep_every_invariant_and_read_only_their_own_kv(void **state);

#endif
