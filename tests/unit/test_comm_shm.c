/* SPDX-License-Identifier: Apache-2.0 */
/* test_comm_shm.c - the shared-memory communicator: sums in rank order on every rank,
 * chunking and buffer reuse, all-gather placement, and what a dead, missing or failing
 * rank does to the others (a bounded failure, never a hang).
 *
 * Ranks are threads over ordinary memory for the arithmetic, and processes (fork) over a
 * MAP_SHARED mapping for deaths: a rank killed with SIGKILL must be seen as gone while it
 * is still an unreaped zombie, through the robust liveness mutex it held.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/status.h"
#include "test_util.h"
#include "worker/comm_shm.h"
#include "worker/shm_sync.h"

#define MAXR 4

/* deterministic, rank- and op-dependent values with awkward magnitudes */
static float value(int rank, int op, size_t i)
{
    uint32_t x = (uint32_t)(rank * 7919 + op * 104729 + (int)i * 31 + 17);
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return ((float)(x % 20001) - 10000.0f) * (rank % 2 ? 1e-3f : 3.7f);
}

typedef struct rank_ctx {
    void *region;
    size_t bytes;
    int rank, size, n_ops;
    size_t sizes[16];
    int status;
    char msg[256];
} rank_ctx;

static void *run_rank(void *arg)
{
    rank_ctx *rc = arg;
    comm_shm_opts o = {.timeout_s = 20};
    comm_t *c = NULL;
    rc->status = comm_shm_new(rc->region, rc->bytes, rc->rank, rc->size, &o, &c);
    for (int op = 0; op < rc->n_ops && !rc->status; op++) {
        size_t n = rc->sizes[op % 16];
        float *buf = malloc(n * sizeof(float));
        float *all = malloc(n * (size_t)rc->size * sizeof(float));
        for (size_t i = 0; i < n; i++)
            buf[i] = value(rc->rank, op, i);
        if (op % 3 == 2) { /* every third op an all-gather */
            rc->status = comm_all_gather(c, buf, n, all);
            for (int r = 0; r < rc->size && !rc->status; r++)
                for (size_t i = 0; i < n; i++)
                    if (all[(size_t)r * n + i] != value(r, op, i)) {
                        snprintf(rc->msg, sizeof rc->msg, "rank %d op %d: gathered [%d][%zu] "
                                 "expected %g got %g", rc->rank, op, r, i, value(r, op, i),
                                 all[(size_t)r * n + i]);
                        rc->status = -100;
                        break;
                    }
        } else {
            rc->status = comm_all_reduce(c, buf, n);
            for (size_t i = 0; i < n && !rc->status; i++) {
                float want = value(0, op, i);
                for (int r = 1; r < rc->size; r++)
                    want += value(r, op, i); /* rank order: bit for bit */
                if (buf[i] != want) {
                    snprintf(rc->msg, sizeof rc->msg, "rank %d op %d: sum[%zu] expected %.9g got "
                             "%.9g", rc->rank, op, i, want, buf[i]);
                    rc->status = -100;
                }
            }
        }
        if (rc->status && !rc->msg[0])
            snprintf(rc->msg, sizeof rc->msg, "%s", deras_errmsg());
        free(buf);
        free(all);
    }
    comm_destroy(&c);
    return NULL;
}

static void run_group(int size, size_t cap, const size_t *sizes, int n_sizes, int n_ops)
{
    size_t bytes = comm_shm_bytes(size, cap);
    void *region = aligned_alloc(64, (bytes + 63) / 64 * 64);
    memset(region, 0, bytes);
    assert_int_equal(comm_shm_init(region, bytes, size, cap), DERAS_OK);
    rank_ctx ctx[MAXR];
    pthread_t th[MAXR];
    for (int r = 0; r < size; r++) {
        memset(&ctx[r], 0, sizeof ctx[r]);
        ctx[r] = (rank_ctx){.region = region, .bytes = bytes, .rank = r, .size = size,
                            .n_ops = n_ops};
        for (int k = 0; k < 16; k++)
            ctx[r].sizes[k] = sizes[k % n_sizes];
        pthread_create(&th[r], NULL, run_rank, &ctx[r]);
    }
    for (int r = 0; r < size; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < size; r++)
        if (ctx[r].status)
            fail_msg("%d ranks: rank %d failed: %s", size, r, ctx[r].msg);
    free(region);
}

static void all_reduce_sums_in_rank_order_on_every_rank(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 7, 1000, 4096};
    for (int size = 2; size <= MAXR; size++)
        run_group(size, 4096, sizes, 4, 24);
}

static void messages_larger_than_a_chunk_go_in_pieces(void **state)
{
    (void)state;
    /* chunk of 64 floats (one cache line pads nothing): 1000 floats take 16 chunks, and
     * consecutive operations alternate the two buffer sets many times */
    const size_t sizes[] = {1000, 63, 64, 65, 129};
    run_group(3, 64, sizes, 5, 30);
    run_group(4, 64, sizes, 5, 30);
}

static void region_checks_refuse_mismatches(void **state)
{
    (void)state;
    size_t bytes = comm_shm_bytes(2, 128);
    assert_true(bytes > 0);
    assert_int_equal(comm_shm_bytes(0, 128), 0);
    assert_int_equal(comm_shm_bytes(2, 0), 0);
    void *region = calloc(1, bytes);
    comm_shm_opts o = {.timeout_s = 1};
    comm_t *c = NULL;
    assert_int_equal(comm_shm_new(region, bytes, 0, 2, &o, &c), DERAS_EFORMAT); /* not laid out */
    assert_int_equal(comm_shm_init(region, bytes - 1, 2, 128), DERAS_EINVAL);
    assert_int_equal(comm_shm_init(region, bytes, 2, 128), DERAS_OK);
    assert_int_equal(comm_shm_new(region, bytes, 0, 3, &o, &c), DERAS_EFORMAT); /* other size */
    assert_int_equal(comm_shm_new(region, bytes, 2, 2, &o, &c), DERAS_EINVAL);  /* no such rank */
    /* a region smaller than the layout it holds claims: refused before any use */
    assert_int_equal(comm_shm_new(region, bytes - 64, 0, 2, &o, &c), DERAS_EFORMAT);
    assert_null(c);
    assert_null(c);
    free(region);
}

/* ---- failures ---- */

typedef struct shared {
    shm_life life[MAXR];
    char region[];
} shared;

/* rank 0's check: is its one peer, rank 1, alive? */
static int peers_alive(void *ctx)
{
    shared *sh = ctx;
    return shm_life_alive(&sh->life[1]) ? DERAS_OK
                                         : deras_fail(DERAS_ECLOSED, "rank 1 is gone");
}

static shared *map_shared(int size, size_t cap)
{
    size_t bytes = sizeof(shared) + comm_shm_bytes(size, cap);
    shared *sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    for (int r = 0; r < MAXR; r++)
        assert_int_equal(shm_life_init(&sh->life[r]), DERAS_OK);
    assert_int_equal(comm_shm_init(sh->region, comm_shm_bytes(size, cap), size, cap), DERAS_OK);
    return sh;
}

static void a_killed_rank_fails_the_collective_within_a_second(void **state)
{
    (void)state;
    shared *sh = map_shared(2, 256);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) { /* rank 1: join, do one all-reduce, say so, then wait to be killed */
        if (shm_life_hold(&sh->life[1]))
            _exit(3);
        comm_shm_opts o = {.timeout_s = 30};
        comm_t *c = NULL;
        float x[4] = {1, 2, 3, 4};
        if (comm_shm_new(sh->region, comm_shm_bytes(2, 256), 1, 2, &o, &c) ||
            comm_all_reduce(c, x, 4))
            _exit(4);
        char b = 'r';
        if (write(pipefd[1], &b, 1) != 1)
            _exit(5);
        pause();
        _exit(0);
    }
    assert_int_equal(shm_life_hold(&sh->life[0]), DERAS_OK);
    comm_shm_opts o = {.timeout_s = 30, .check = peers_alive, .check_ctx = sh};
    comm_t *c = NULL;
    assert_int_equal(comm_shm_new(sh->region, comm_shm_bytes(2, 256), 0, 2, &o, &c), DERAS_OK);
    float x[4] = {10, 20, 30, 40};
    assert_int_equal(comm_all_reduce(c, x, 4), DERAS_OK);
    assert_true(x[0] == 11 && x[3] == 44);
    char b;
    assert_int_equal(read(pipefd[0], &b, 1), 1);
    assert_true(shm_life_alive(&sh->life[1]));
    kill(pid, SIGKILL);
    /* not reaped yet: the zombie must already count as dead */
    double t0 = shm_now();
    while (shm_life_alive(&sh->life[1]) && shm_now() - t0 < 60)
        usleep(1000);
    if (shm_life_alive(&sh->life[1]))
        fail_msg("rank 1, killed, still counts as alive after 60 s");
    /* the collective alone is timed, from when the peer is known dead: closed (not timeout)
     * says the check found it; within a sixth of the 30 s timeout says it did not wait the
     * timeout out, with room for a loaded machine (it takes milliseconds) */
    double t1 = shm_now();
    int rc = comm_all_reduce(c, x, 4);
    double dt = shm_now() - t1;
    printf("all-reduce with a killed peer failed after %.3f s (%.3f s after the kill): %s\n", dt,
           shm_now() - t0, deras_errmsg());
    if (rc != DERAS_ECLOSED)
        fail_msg("expected closed (rank 1 is gone), got %s: %s", deras_status_name(rc),
                 deras_errmsg());
    if (dt > 5.0)
        fail_msg("expected the failure within 5 s (timeout 30 s), took %.3f s", dt);
    assert_non_null(strstr(deras_errmsg(), "rank 1 is gone"));
    /* broken for good: the next call fails at once */
    assert_int_equal(comm_all_reduce(c, x, 4), DERAS_ECLOSED);
    int st;
    waitpid(pid, &st, 0);
    comm_destroy(&c);
    shm_life_release(&sh->life[0]);
    munmap(sh, sizeof(shared) + comm_shm_bytes(2, 256));
}

typedef struct waiter {
    void *region;
    int rank;
    double timeout_s;
    int status;
    double seconds;
} waiter;

static void *wait_rank(void *arg)
{
    waiter *w = arg;
    comm_shm_opts o = {.timeout_s = w->timeout_s};
    comm_t *c = NULL;
    float x[8] = {0};
    double t0 = shm_now();
    w->status = comm_shm_new(w->region, comm_shm_bytes(3, 64), w->rank, 3, &o, &c);
    if (!w->status)
        w->status = comm_all_reduce(c, x, 8);
    w->seconds = shm_now() - t0;
    comm_destroy(&c);
    return NULL;
}

static void a_rank_that_never_comes_times_out_and_fails_the_others_fast(void **state)
{
    (void)state;
    /* 3 ranks, rank 2 never arrives: rank 0 gives up after 0.3 s and marks the region
     * broken; rank 1, willing to wait 30 s, must fail soon after rank 0 does */
    size_t bytes = comm_shm_bytes(3, 64);
    void *region = calloc(1, bytes);
    assert_int_equal(comm_shm_init(region, bytes, 3, 64), DERAS_OK);
    waiter w[2] = {{region, 0, 0.3, 0, 0}, {region, 1, 30, 0, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, wait_rank, &w[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    printf("rank 0: %s after %.3f s; rank 1: %s after %.3f s\n", deras_status_name(w[0].status),
           w[0].seconds, deras_status_name(w[1].status), w[1].seconds);
    if (w[0].status != DERAS_ETIMEOUT)
        fail_msg("rank 0: expected timeout, got %s", deras_status_name(w[0].status));
    if (w[1].status != DERAS_ECLOSED)
        fail_msg("rank 1: expected closed (rank 0 failed), got %s", deras_status_name(w[1].status));
    /* a timeout never fires early; late only by scheduling, so the upper bounds are loose:
     * rank 1 failing (closed, not timeout) well before its own 30 s shows rank 0's failure
     * reached it */
    if (w[0].seconds < 0.29 || w[0].seconds > 10)
        fail_msg("rank 0: expected to give up after ~0.3 s, took %.3f s", w[0].seconds);
    if (w[1].seconds > 15)
        fail_msg("rank 1: expected to fail soon after rank 0 (its own timeout: 30 s), took "
                 "%.3f s", w[1].seconds);
    free(region);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(all_reduce_sums_in_rank_order_on_every_rank),
        cmocka_unit_test(messages_larger_than_a_chunk_go_in_pieces),
        cmocka_unit_test(region_checks_refuse_mismatches),
        cmocka_unit_test(a_killed_rank_fails_the_collective_within_a_second),
        cmocka_unit_test(a_rank_that_never_comes_times_out_and_fails_the_others_fast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
