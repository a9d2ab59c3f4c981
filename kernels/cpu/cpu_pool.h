/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_pool.h - the CPU backend's persistent thread pool: run fn(ctx, i) for i in
 * [0, n_items) on the calling thread and the pool's workers, with a join that waits only
 * for items actually started.
 *
 * Why not an OpenMP region per op: a decode step of a 135M model is ~200 small ops, and a
 * region's join waits for every thread of the team to arrive, including one the kernel has
 * not scheduled yet; on a shared (or oversubscribed) machine that costs a scheduler time
 * slice per op. Here the items are claimed one by one from one atomic word (generation |
 * next item), the caller claims too, and the caller waits only until every claimed item
 * is done: a worker that wakes late finds nothing left and blocks nobody. Workers spin
 * for a while after each job (CPU_POOL_SPIN_US, so the next op of a step starts in well
 * under a microsecond), then sleep on a futex until the next one.
 *
 * One job at a time per pool: a second thread calling cpu_pool_run while a job runs (a
 * misuse the backend never makes) runs its items alone on its own thread, correct but
 * unparallel. Items must not call cpu_pool_run on the same pool (they would run inline).
 * Cost per job: one atomic store and, where a worker sleeps, one futex wake; per item one
 * compare-and-swap and one atomic add; the caller's wait is for the slowest started item.
 */
#ifndef DERAS_CPU_POOL_H
#define DERAS_CPU_POOL_H

typedef struct cpu_pool cpu_pool_t;

/* fn(ctx, item): one item of a job; items of a job run in any order, concurrently. */
typedef void (*cpu_pool_fn)(void *ctx, int item);

/* A pool of n_threads threads in all: the caller of cpu_pool_run plus n_threads - 1
 * workers (none for 1). DERAS_EINVAL for n_threads outside [1, 1024], DERAS_ENOMEM,
 * DERAS_EBACKEND when a thread cannot be started. */
int cpu_pool_new(int n_threads, cpu_pool_t **out);

/* Stops and joins the workers; NULL-safe, sets *p to NULL. */
void cpu_pool_destroy(cpu_pool_t **p);

/* Threads in the pool, the caller included (1 for a NULL pool). */
int cpu_pool_threads(const cpu_pool_t *p);

/* Runs every item once and returns when all are done. At most max_threads threads take
 * part (<= 0: all of the pool's); a NULL pool, max_threads 1 or n_items 1 runs them in order on
 * the calling thread. n_items <= 0 does nothing. */
void cpu_pool_run(cpu_pool_t *p, int n_items, int max_threads, cpu_pool_fn fn, void *ctx);

#endif
