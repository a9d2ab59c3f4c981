/* SPDX-License-Identifier: Apache-2.0 */
/* shm_sync.h - waiting and waking across processes that share memory, and telling whether
 * a peer process is still alive.
 *
 * shm_flag is a 32-bit sequence word on its own cache line. A writer stores a new value
 * (release) and wakes sleepers only when there are some; a reader waits until the value
 * reaches a target (acquire), spinning briefly and then sleeping on a futex in slices of
 * SHM_SLICE_MS. After every slice the wait runs a check callback (is a peer dead, did
 * someone abort?) and gives up at its deadline, so no wait in deras can hang on a dead
 * process. Values compare modulo 2^32, so sequences may wrap.
 *
 * shm_life is a robust, process-shared mutex a process holds for as long as it lives.
 * The kernel releases it when its holder dies (however it dies: kill -9 included, and a
 * zombie that is not yet reaped already counts as dead), so a peer asks "alive?" with a
 * trylock: busy means alive. Pids can be reused; a robust mutex cannot be fooled that way.
 *
 * Both live in memory shared between the processes (a POSIX shm segment), or in ordinary
 * memory when the "processes" are threads of one test.
 */
#ifndef DERAS_SHM_SYNC_H
#define DERAS_SHM_SYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SHM_SLICE_MS 100 /* a sleeping wait wakes this often to run its check */

typedef struct shm_flag {
    _Atomic uint32_t value;
    _Atomic uint32_t sleepers;
    char pad_[56];
} shm_flag;

_Static_assert(sizeof(shm_flag) == 64, "one flag per cache line");

/* Run between sleeps of a wait: DERAS_OK to keep waiting, or the status (with its
 * message set) that ends the wait. */
typedef int (*shm_check_fn)(void *ctx);

void shm_flag_init(shm_flag *f, uint32_t v);
/* Publish v (release: everything written before is visible to whoever sees v) and wake
 * every sleeper. A futex syscall only when somebody sleeps. */
void shm_flag_store(shm_flag *f, uint32_t v);
uint32_t shm_flag_load(const shm_flag *f);

/* Wait until value - target, as a signed 32-bit number, is >= 0. timeout_s < 0: no
 * deadline (the check still runs every slice). Returns DERAS_OK, DERAS_ETIMEOUT ("timed
 * out after S s waiting for WHAT") or the check's status. `what` names the wait for
 * messages. */
int shm_flag_wait_ge(shm_flag *f, uint32_t target, double timeout_s, shm_check_fn check,
                     void *ctx, const char *what);

typedef struct shm_life {
    pthread_mutex_t mu;
} shm_life;

/* Make a free, robust, process-shared mutex. DERAS_EINTERNAL if pthreads refuses. */
int shm_life_init(shm_life *l);
/* Take it for this process's (this thread's) lifetime. DERAS_EBUSY if a live holder has
 * it. A holder that died is taken over. Call from a thread that lives as long as the
 * process means to be seen alive (the main thread). */
int shm_life_hold(shm_life *l);
/* Give it back (a clean exit). */
void shm_life_release(shm_life *l);
/* True while some live thread holds it. Never blocks; O(1) syscall-free unless free. */
bool shm_life_alive(shm_life *l);

double shm_now(void); /* CLOCK_MONOTONIC seconds */

#endif
