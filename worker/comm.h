/* comm.h - collectives between the tensor-parallel ranks of a worker group.
 *
 * One interface, two implementations: a shared-memory communicator for CPU ranks
 * (comm_shm_*, this machine's processes or threads) and NCCL for GPU ranks (comm_nccl_*,
 * built only where CUDA is, see below). The model calls comm_all_reduce after the
 * row-parallel projections (attention output, MLP down) and after the vocab-parallel
 * embedding, and comm_all_gather for the vocab-parallel logits.
 *
 * Every rank of the group must make the same calls in the same order with the same
 * sizes (the forward pass guarantees it: every rank runs the same step plan). Buffers are
 * backend buffers of f32: host memory for the shared-memory communicator, device memory
 * for NCCL. Every wait has a deadline and a liveness check, so a dead rank makes the
 * others fail with DERAS_ECLOSED or DERAS_ETIMEOUT (message naming the rank) instead of
 * hanging; after a failure the communicator is broken (every later call fails at once),
 * and the shared-memory one also tells the other ranks, so they fail fast too.
 *
 * Results are deterministic: the sum of an all-reduce adds the ranks' values in rank
 * order, so a step gives bit-identical results on every run and on every rank.
 */
#ifndef DERAS_COMM_H
#define DERAS_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "worker/shm_sync.h"

typedef struct comm comm_t;

int comm_rank(const comm_t *c);
int comm_size(const comm_t *c);
const char *comm_kind(const comm_t *c); /* "shm" or "nccl" */

/* buf (n) = the element-wise sum over ranks of every rank's buf (n), in rank order.
 * DERAS_EINVAL for a NULL buffer with n > 0; failures as above. */
int comm_all_reduce(comm_t *c, float *buf, size_t n);

/* recv (size, n) = every rank's send (n), rank r's at recv + r * n. recv may be NULL on a
 * rank that does not need the result (shared memory only; NCCL needs a buffer). */
int comm_all_gather(comm_t *c, const float *send, size_t n, float *recv);

void comm_destroy(comm_t **c);

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

/* Attach rank `rank` to an initialised region. DERAS_EFORMAT if the region was not
 * initialised for this size. The region must outlive the communicator. */
int comm_shm_new(void *region, int rank, int size, const comm_shm_opts *o, comm_t **out);

/* Mark the region broken (a rank failed for a reason of its own, e.g. a load error) so
 * that every rank's next or current wait fails at once. */
void comm_shm_abort(void *region);

/* ---- NCCL ----
 *
 * Built when CMake finds nvcc and NCCL (DERAS_HAVE_NCCL); elsewhere these return
 * DERAS_EUNSUPPORTED. The leader makes the unique id and passes it to the followers
 * through the group's shared-memory segment. Collectives run on the given CUDA stream
 * and are waited for with a deadline; on timeout or an asynchronous NCCL error the
 * communicator is aborted (ncclCommAbort), so no rank hangs. Not yet run on a GPU: the
 * CUDA model backend does not exist yet. */
#define COMM_NCCL_ID_BYTES 128

bool comm_nccl_available(void);
int comm_nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES]);
int comm_nccl_new(const unsigned char id[COMM_NCCL_ID_BYTES], int rank, int size, int device,
                  void *cuda_stream, double timeout_s, comm_t **out);

#endif
