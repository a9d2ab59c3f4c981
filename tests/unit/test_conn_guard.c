/* SPDX-License-Identifier: Apache-2.0 */
/* test_conn_guard.c - the connection cap (router/conn_guard.h) against a reference: random
 * opens, proofs and closes on random descriptors, each victim checked to be the oldest
 * unproven open connection (or the new one when nothing else is unproven), the open count
 * never above the cap once named connections are closed, and the head timeout naming the
 * oldest silent connections in order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/base/status.h"
#include "router/conn_guard.h"
#include "test_util.h"

enum { FD_CAP = 200, MAX = 24 };
enum { FREE = 0, UNPROVEN, PROVEN, NAMED };

typedef struct ref {
    int state[FD_CAP];
    double t[FD_CAP];
    long seq[FD_CAP]; /* opening order: ties of t broken by it */
} ref;

static int ref_oldest_unproven(const ref *r)
{
    int best = -1;
    for (int fd = 0; fd < FD_CAP; fd++)
        if (r->state[fd] == UNPROVEN && (best < 0 || r->seq[fd] < r->seq[best]))
            best = fd;
    return best;
}

static int ref_count(const ref *r, int state)
{
    int n = 0;
    for (int fd = 0; fd < FD_CAP; fd++)
        n += state < 0 ? r->state[fd] != FREE : r->state[fd] == state;
    return n;
}

static void random_operations_match_the_reference(void **state)
{
    (void)state;
    uint64_t seed = 0xc0ffeeull ^ (uint64_t)time(NULL);
    print_message("conn_guard: seed %llu\n", (unsigned long long)seed);
    conn_guard_t *g = NULL;
    assert_int_equal(conn_guard_new(MAX, FD_CAP, &g), DERAS_OK);
    ref r;
    memset(&r, 0, sizeof r);
    double now = 0;
    long seq = 0;
    int victims = 0;
    for (int step = 0; step < 20000; step++) {
        now += (double)(test_rng_next(&seed) % 100) / 1000.0;
        int fd = (int)(test_rng_next(&seed) % FD_CAP);
        int op = (int)(test_rng_next(&seed) % 10);
        if (op < 5 && r.state[fd] == FREE) {
            r.state[fd] = UNPROVEN;
            r.t[fd] = now;
            r.seq[fd] = seq++;
            int want = -1;
            if (ref_count(&r, -1) - ref_count(&r, NAMED) > MAX)
                want = ref_oldest_unproven(&r);
            int got = conn_guard_open(g, fd, now);
            assert_int_equal(got, want);
            if (want >= 0) {
                r.state[want] = NAMED;
                victims++;
                assert_true(conn_guard_named(g, want));
            }
        } else if (op < 7) {
            if (r.state[fd] == UNPROVEN)
                r.state[fd] = PROVEN;
            conn_guard_proven(g, fd);
        } else if (op < 9 || r.state[fd] == NAMED) {
            r.state[fd] = FREE;
            conn_guard_closed(g, fd);
        } else {
            for (;;) { /* the head timeout names the oldest silent ones, in order */
                int o = ref_oldest_unproven(&r);
                int want = o >= 0 && now - r.t[o] >= 1.0 ? o : -1;
                assert_int_equal(conn_guard_expired(g, now, 1.0), want);
                if (want < 0)
                    break;
                r.state[want] = NAMED;
            }
        }
        conn_guard_stats s;
        conn_guard_get_stats(g, &s);
        assert_int_equal(s.open, ref_count(&r, -1));
        assert_int_equal(s.unproven, ref_count(&r, UNPROVEN));
        assert_true(s.open - ref_count(&r, NAMED) <= MAX);
    }
    assert_true(victims > 100); /* the cap was exercised */
    /* outside the table: its own victim, untracked */
    assert_int_equal(conn_guard_open(g, FD_CAP, now), FD_CAP);
    assert_int_equal(conn_guard_open(g, -1, now), -1);
    conn_guard_destroy(&g);
    assert_null(g);
}

static void arguments_are_checked(void **state)
{
    (void)state;
    conn_guard_t *g = (conn_guard_t *)1;
    assert_int_equal(conn_guard_new(0, 10, &g), DERAS_EINVAL);
    assert_null(g);
    assert_int_equal(conn_guard_new(1, 0, &g), DERAS_EINVAL);
    assert_int_equal(conn_guard_new(1, 1, NULL), DERAS_EINVAL);
    conn_guard_destroy(NULL);
    conn_guard_destroy(&g); /* NULL inside: nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_operations_match_the_reference),
        cmocka_unit_test(arguments_are_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
