/* SPDX-License-Identifier: Apache-2.0 */
/* test_cpu_pool.c - the CPU backend's thread pool (kernels/cpu/cpu_pool.h): every item of
 * every job runs exactly once, jobs back to back never mix, max_threads caps who joins,
 * a pool used from a second thread while busy still runs everything (inline), a sleeping
 * pool wakes, and bad arguments fail cleanly. Nothing here depends on timing: counts are
 * checked, never durations.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/status.h"
#include "kernels/cpu/cpu_pool.h"

#define MAX_ITEMS 4096

typedef struct counts {
    _Atomic int hits[MAX_ITEMS];
    _Atomic int running, max_running;
    int job;          /* which job wrote: checked against stamp */
    int stamp[MAX_ITEMS];
} counts;

static void count_item(void *ctx, int i)
{
    counts *c = ctx;
    int now = atomic_fetch_add(&c->running, 1) + 1, m = atomic_load(&c->max_running);
    while (now > m && !atomic_compare_exchange_weak(&c->max_running, &m, now))
        ;
    atomic_fetch_add(&c->hits[i], 1);
    c->stamp[i] = c->job;
    for (volatile int k = 0; k < 200; k++) /* long enough for others to join */
        ;
    atomic_fetch_sub(&c->running, 1);
}

static void every_item_runs_exactly_once(void **state)
{
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        cpu_pool_t *p = NULL;
        assert_int_equal(cpu_pool_new(nt, &p), DERAS_OK);
        assert_int_equal(cpu_pool_threads(p), nt);
        counts *c = calloc(1, sizeof *c);
        const int sizes[] = {1, 2, 3, 7, 64, 1000, MAX_ITEMS};
        for (int job = 0; job < 3000; job++) { /* back to back: generations must not mix */
            const int n = sizes[job % 7];
            memset(c->hits, 0, sizeof c->hits);
            c->job = job;
            cpu_pool_run(p, n, 0, count_item, c);
            for (int i = 0; i < n; i++) {
                if (atomic_load(&c->hits[i]) != 1 || c->stamp[i] != job)
                    fail_msg("%d threads, job %d of %d items: item %d ran %d times", nt, job, n,
                             i, atomic_load(&c->hits[i]));
            }
            for (int i = n; i < (n < MAX_ITEMS ? n + 1 : n); i++)
                assert_int_equal(atomic_load(&c->hits[i]), 0);
        }
        assert_true(atomic_load(&c->max_running) <= nt);
        free(c);
        cpu_pool_destroy(&p);
        assert_null(p);
    }
}

static void max_threads_caps_the_team(void **state)
{
    (void)state;
    cpu_pool_t *p = NULL;
    assert_int_equal(cpu_pool_new(4, &p), DERAS_OK);
    counts *c = calloc(1, sizeof *c);
    for (int cap = 1; cap <= 4; cap++) {
        atomic_store(&c->max_running, 0);
        for (int rep = 0; rep < 50; rep++) {
            memset(c->hits, 0, sizeof c->hits);
            cpu_pool_run(p, 500, cap, count_item, c);
            for (int i = 0; i < 500; i++)
                assert_int_equal(atomic_load(&c->hits[i]), 1);
        }
        assert_true(atomic_load(&c->max_running) <= cap);
    }
    free(c);
    cpu_pool_destroy(&p);
}

static void null_pool_and_empty_jobs_run_inline(void **state)
{
    (void)state;
    counts *c = calloc(1, sizeof *c);
    cpu_pool_run(NULL, 100, 0, count_item, c);
    for (int i = 0; i < 100; i++)
        assert_int_equal(atomic_load(&c->hits[i]), 1);
    assert_int_equal(atomic_load(&c->max_running), 1);
    cpu_pool_run(NULL, 0, 0, count_item, c);
    cpu_pool_run(NULL, -5, 0, count_item, c);
    assert_int_equal(atomic_load(&c->hits[0]), 1);
    assert_int_equal(cpu_pool_threads(NULL), 1);
    free(c);
}

/* Two threads share one pool: whoever finds it busy runs its own items alone. */
typedef struct sharer {
    cpu_pool_t *p;
    counts *c;
    int fails;
} sharer;

static void *share_main(void *arg)
{
    sharer *s = arg;
    for (int rep = 0; rep < 300; rep++) {
        memset(s->c->hits, 0, sizeof s->c->hits);
        cpu_pool_run(s->p, 300, 0, count_item, s->c);
        for (int i = 0; i < 300; i++)
            s->fails += atomic_load(&s->c->hits[i]) != 1;
    }
    return NULL;
}

static void a_busy_pool_runs_a_second_caller_inline(void **state)
{
    (void)state;
    cpu_pool_t *p = NULL;
    assert_int_equal(cpu_pool_new(2, &p), DERAS_OK);
    sharer a = {p, calloc(1, sizeof(counts)), 0}, b = {p, calloc(1, sizeof(counts)), 0};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, share_main, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, share_main, &b), 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    assert_int_equal(a.fails, 0);
    assert_int_equal(b.fails, 0);
    free(a.c), free(b.c);
    cpu_pool_destroy(&p);
}

/* Workers that went to sleep (idle past their spin) wake for the next job. */
static void sleeping_workers_wake(void **state)
{
    (void)state;
    cpu_pool_t *p = NULL;
    assert_int_equal(cpu_pool_new(3, &p), DERAS_OK);
    counts *c = calloc(1, sizeof *c);
    for (int rep = 0; rep < 3; rep++) {
        usleep(20000); /* well past the spin: the workers sleep on the futex */
        memset(c->hits, 0, sizeof c->hits);
        cpu_pool_run(p, 1000, 0, count_item, c);
        for (int i = 0; i < 1000; i++)
            assert_int_equal(atomic_load(&c->hits[i]), 1);
    }
    free(c);
    cpu_pool_destroy(&p);
    cpu_pool_destroy(&p); /* NULL-safe */
    cpu_pool_destroy(NULL);
}

static void bad_arguments_fail_cleanly(void **state)
{
    (void)state;
    cpu_pool_t *p = (cpu_pool_t *)1;
    assert_int_equal(cpu_pool_new(0, &p), DERAS_EINVAL);
    assert_int_equal(cpu_pool_new(1025, &p), DERAS_EINVAL);
    assert_int_equal(cpu_pool_new(2, NULL), DERAS_EINVAL);
    assert_int_equal(cpu_pool_new(1, &p), DERAS_OK);
    counts *c = calloc(1, sizeof *c);
    cpu_pool_run(p, 10, 8, count_item, c); /* one thread: inline */
    for (int i = 0; i < 10; i++)
        assert_int_equal(atomic_load(&c->hits[i]), 1);
    free(c);
    cpu_pool_destroy(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_item_runs_exactly_once),
        cmocka_unit_test(max_threads_caps_the_team),
        cmocka_unit_test(null_pool_and_empty_jobs_run_inline),
        cmocka_unit_test(a_busy_pool_runs_a_second_caller_inline),
        cmocka_unit_test(sleeping_workers_wake),
        cmocka_unit_test(bad_arguments_fail_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
