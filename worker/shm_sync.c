/* SPDX-License-Identifier: Apache-2.0 */
/* shm_sync.c - futex sequence words and robust liveness mutexes (see shm_sync.h).
 *
 * Waking: the writer stores the value, then reads `sleepers`; a reader increments
 * `sleepers`, then re-reads the value before it sleeps. Both sides use sequentially
 * consistent operations, so at least one of them sees the other (the writer sees a
 * sleeper, or the sleeper sees the new value): no lost wake-up, and no syscall on the
 * writer's side while nobody sleeps. FUTEX_WAIT (not _PRIVATE) because the word may be
 * shared between processes.
 *
 * Spinning is brief (SPIN_ROUNDS pauses, a few microseconds): collectives between ranks
 * usually meet within that, and a machine with fewer cores than ranks is not made to
 * burn its cores waiting.
 */
#include "shm_sync.h"

#include <errno.h>
#include <linux/futex.h>
#include <math.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/base/status.h"

#define SPIN_ROUNDS 256

double shm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

void shm_flag_init(shm_flag *f, uint32_t v)
{
    memset(f, 0, sizeof *f);
    atomic_init(&f->value, v);
    atomic_init(&f->sleepers, 0);
}

void shm_flag_store(shm_flag *f, uint32_t v)
{
    atomic_store(&f->value, v);
    if (atomic_load(&f->sleepers))
        syscall(SYS_futex, &f->value, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

uint32_t shm_flag_load(const shm_flag *f)
{
    return atomic_load_explicit(&((shm_flag *)f)->value, memory_order_acquire);
}

static bool reached(uint32_t v, uint32_t target)
{
    return (int32_t)(v - target) >= 0;
}

int shm_flag_wait_ge(shm_flag *f, uint32_t target, double timeout_s, shm_check_fn check,
                     void *ctx, const char *what)
{
    for (int i = 0; i < SPIN_ROUNDS; i++) {
        if (reached(atomic_load_explicit(&f->value, memory_order_acquire), target))
            return DERAS_OK;
        cpu_relax();
    }
    const double start = shm_now(), deadline = timeout_s < 0 ? INFINITY : start + timeout_s;
    for (;;) {
        uint32_t v = atomic_load(&f->value);
        if (reached(v, target))
            return DERAS_OK;
        double t = shm_now();
        if (t >= deadline)
            return deras_fail(DERAS_ETIMEOUT, "timed out after %.1f s waiting for %s", t - start,
                              what);
        double slice = SHM_SLICE_MS / 1000.0;
        if (deadline - t < slice)
            slice = deadline - t;
        struct timespec ts = {(time_t)slice, (long)((slice - floor(slice)) * 1e9)};
        atomic_fetch_add(&f->sleepers, 1);
        v = atomic_load(&f->value);
        if (!reached(v, target))
            syscall(SYS_futex, &f->value, FUTEX_WAIT, v, &ts, NULL, 0);
        atomic_fetch_sub(&f->sleepers, 1);
        if (reached(atomic_load_explicit(&f->value, memory_order_acquire), target))
            return DERAS_OK;
        if (check) {
            int rc = check(ctx);
            if (rc)
                return rc;
        }
    }
}

int shm_life_init(shm_life *l)
{
    pthread_mutexattr_t a;
    int err = pthread_mutexattr_init(&a);
    if (!err)
        err = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    if (!err)
        err = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (!err)
        err = pthread_mutex_init(&l->mu, &a);
    pthread_mutexattr_destroy(&a);
    return err ? deras_fail(DERAS_EINTERNAL, "robust process-shared mutex: %s", strerror(err))
               : DERAS_OK;
}

int shm_life_hold(shm_life *l)
{
    int err = pthread_mutex_trylock(&l->mu);
    if (err == EOWNERDEAD)
        err = pthread_mutex_consistent(&l->mu);
    if (err == EBUSY)
        return deras_fail(DERAS_EBUSY, "held by a live process");
    return err ? deras_fail(DERAS_EINTERNAL, "liveness mutex: %s", strerror(err)) : DERAS_OK;
}

void shm_life_release(shm_life *l)
{
    pthread_mutex_unlock(&l->mu);
}

bool shm_life_alive(shm_life *l)
{
    int err = pthread_mutex_trylock(&l->mu);
    if (err == EBUSY)
        return true;
    if (err == EOWNERDEAD)
        pthread_mutex_consistent(&l->mu);
    if (err == 0 || err == EOWNERDEAD)
        pthread_mutex_unlock(&l->mu);
    return false;
}
