/* SPDX-License-Identifier: Apache-2.0 */
/* comm_shm.h - the shared-memory communicator (engine/comm.h) for CPU ranks of a worker
 * group: this machine's processes, or threads in tests and benchmarks.
 */
#ifndef DERAS_COMM_SHM_H
#define DERAS_COMM_SHM_H

#include <stddef.h>

#include "engine/comm.h"
#include "worker/shm_sync.h"

/* ---- shared memory ----
 *
 * The ranks share one region (a POSIX shm segment, or ordinary memory for threads):
 * per-rank input slots of cap_elems floats, double-buffered, an output slot and one
 * sequence flag per rank. An all-reduce of n floats runs in chunks of cap_elems: every
 * rank copies its chunk in, a barrier, rank r sums slice r of the chunk over all ranks
 * (reduce-scatter), a barrier, every rank copies the whole sum out (all-gather). Double
 * buffering lets the next operation start while a slow rank still copies out, so an
 * all-reduce costs two barriers and an all-gather one. */

/* Bytes of a region for `size` ranks with chunks of cap_elems floats; 0 on overflow. */
size_t comm_shm_bytes(int size, size_t cap_elems);

/* Lay out a zeroed region; one rank (the group leader) calls it before any rank attaches.
 * DERAS_EINVAL if bytes is less than comm_shm_bytes(size, cap_elems). */
int comm_shm_init(void *region, size_t bytes, int size, size_t cap_elems);

typedef struct comm_shm_opts {
    double timeout_s;  /* longest any one wait may take */
    shm_check_fn check;/* run every SHM_SLICE_MS while waiting (peers alive?), or NULL */
    void *check_ctx;
} comm_shm_opts;

/* Attach rank `rank` to an initialised region of `bytes`. DERAS_EFORMAT if the region was
 * not initialised for this size or its chunk size (read from it) does not fit `bytes`. The
 * region must outlive the communicator. */
int comm_shm_new(void *region, size_t bytes, int rank, int size, const comm_shm_opts *o,
                 comm_t **out);

/* Mark the region broken (a rank failed for a reason of its own, e.g. a load error) so
 * that every rank's next or current wait fails at once. */
void comm_shm_abort(void *region);

#endif
