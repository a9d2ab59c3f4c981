/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_pool.c - the persistent thread pool of cpu_pool.h.
 *
 * State: `claim` holds (generation << 32) | next item. A job is published by storing
 * (g, CLOSED), then the job's fields, then (g, 0); a thread that read the fields takes
 * an item only by a compare-and-swap from (g, i) to (g, i + 1), which fails once the
 * generation moved on, so fields read while the next job was being written are never
 * used (every access to claim and the fields is sequentially consistent: the store of
 * (g + 1, CLOSED) comes before the new fields in the single total order, so a CAS that
 * follows a read of a new field sees the new generation). `done` counts the finished items
 * of the current job; only a thread holding one of its items can add to it, so a late
 * worker cannot disturb the next job. `seq` is the futex word sleeping workers wait on;
 * `sleepers` says whether a publish must wake them. `slots` (generation | count) caps
 * how many workers join a job (max_threads); a slot counts only for its own generation. Workers spin CPU_POOL_SPIN_US after their last job (pause, with a
 * yield every so often so a preempted caller gets the core back on a busy machine), then
 * sleep.
 */
#include "kernels/cpu/cpu_pool.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/base/status.h"

#define CLOSED 0xffffffffu
#define CPU_POOL_SPIN_US 200 /* a decode step's gaps between ops are a few us; idle: sleep */
#define YIELD_AFTER 4096      /* the caller's spins on unfinished items before it yields */

struct cpu_pool {
    int n_threads;
    pthread_t *threads;
    _Atomic uint64_t claim;
    _Atomic int done;
    _Atomic uint64_t slots; /* (generation << 32) | workers that may still join it */
    _Atomic uint32_t seq;
    _Atomic int sleepers;
    _Atomic int stop;
    atomic_flag busy;
    /* the current job */
    _Atomic(cpu_pool_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int n_items;
};

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* Take and run items of the job published in claim until none are left. */
static void work(cpu_pool_t *p, uint64_t c)
{
    const uint64_t g = c >> 32;
    if ((uint32_t)c == CLOSED)
        return;
    const cpu_pool_fn fn = atomic_load(&p->fn);
    void *const ctx = atomic_load(&p->ctx);
    const uint32_t n = (uint32_t)atomic_load(&p->n_items);
    while ((uint32_t)c < n) {
        if (atomic_compare_exchange_weak(&p->claim, &c, c + 1)) {
            fn(ctx, (int)(uint32_t)c);
            atomic_fetch_add(&p->done, 1);
            c++;
        } else if (c >> 32 != g || (uint32_t)c == CLOSED) {
            return;
        }
    }
}

static void *worker_main(void *arg)
{
    cpu_pool_t *p = arg;
    uint32_t seen = atomic_load(&p->seq);
    for (;;) {
        double t0 = 0;
        for (int spins = 0; atomic_load(&p->seq) == seen && !atomic_load(&p->stop); spins++) {
            relax();
            if (spins % 256 == 255) {
                double t = now_us();
                if (t0 == 0)
                    t0 = t;
                else if (t - t0 > CPU_POOL_SPIN_US) {
                    atomic_fetch_add(&p->sleepers, 1);
                    if (atomic_load(&p->seq) == seen && !atomic_load(&p->stop))
                        syscall(SYS_futex, &p->seq, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
                    atomic_fetch_sub(&p->sleepers, 1);
                    t0 = 0;
                }
            }
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = atomic_load(&p->seq);
        /* a slot of the job now published, if the caller left any; work() then takes items
         * only while that job is the current one */
        const uint64_t c = atomic_load(&p->claim);
        uint64_t s = (uint32_t)c == CLOSED ? 0 : atomic_load(&p->slots);
        while (s >> 32 == c >> 32 && (uint32_t)s > 0 &&
               !atomic_compare_exchange_weak(&p->slots, &s, s - 1))
            ;
        if (s >> 32 == c >> 32 && (uint32_t)s > 0)
            work(p, c);
    }
}

int cpu_pool_new(int n_threads, cpu_pool_t **out)
{
    if (!out || n_threads < 1 || n_threads > 1024)
        return deras_fail(DERAS_EINVAL, "cpu pool: %d threads, expected 1 to 1024", n_threads);
    cpu_pool_t *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc((size_t)n_threads, sizeof *p->threads))) {
        free(p);
        return deras_fail(DERAS_ENOMEM, "cpu pool: out of memory");
    }
    atomic_init(&p->claim, CLOSED);
    atomic_flag_clear(&p->busy);
    for (int i = 1; i < n_threads; i++) {
        int rc = pthread_create(&p->threads[i], NULL, worker_main, p);
        if (rc) {
            p->n_threads = i;
            cpu_pool_destroy(&p);
            return deras_fail(DERAS_EBACKEND, "cpu pool: cannot start thread %d (errno %d)", i, rc);
        }
    }
    p->n_threads = n_threads;
    *out = p;
    return DERAS_OK;
}

void cpu_pool_destroy(cpu_pool_t **pp)
{
    if (!pp || !*pp)
        return;
    cpu_pool_t *p = *pp;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->seq, 1);
    syscall(SYS_futex, &p->seq, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p);
    *pp = NULL;
}

int cpu_pool_threads(const cpu_pool_t *p)
{
    return p ? p->n_threads : 1;
}

void cpu_pool_run(cpu_pool_t *p, int n_items, int max_threads, cpu_pool_fn fn, void *ctx)
{
    if (n_items <= 0)
        return;
    const int nt = !p ? 1 : max_threads > 0 && max_threads < p->n_threads ? max_threads
                                                                             : p->n_threads;
    if (nt == 1 || n_items == 1 || atomic_flag_test_and_set(&p->busy)) {
        for (int i = 0; i < n_items; i++)
            fn(ctx, i);
        return;
    }
    const uint64_t g = (atomic_load(&p->claim) >> 32) + 1;
    atomic_store(&p->claim, g << 32 | CLOSED);
    atomic_store(&p->done, 0);
    atomic_store(&p->fn, fn);
    atomic_store(&p->ctx, ctx);
    atomic_store(&p->n_items, n_items);
    atomic_store(&p->slots, g << 32 | (uint64_t)(nt - 1));
    atomic_store(&p->claim, g << 32);
    atomic_fetch_add(&p->seq, 1);
    if (atomic_load(&p->sleepers) > 0)
        syscall(SYS_futex, &p->seq, FUTEX_WAKE_PRIVATE, nt - 1, NULL, NULL, 0);
    work(p, atomic_load(&p->claim));
    for (int spins = 1; atomic_load(&p->done) < n_items; spins++) {
        relax();
        if (spins >= YIELD_AFTER && spins % 64 == 0)
            sched_yield();
    }
    atomic_flag_clear(&p->busy);
}
