/* SPDX-License-Identifier: Apache-2.0 */
/* comm.h - collectives between the tensor-parallel ranks of a worker group.
 *
 * One interface, two implementations, both in worker/ (they are process-group code: the
 * engine only calls the interface): a shared-memory communicator for CPU ranks
 * (worker/comm_shm.h, this machine's processes or threads) and NCCL for GPU ranks
 * (worker/comm_nccl.h, built only where CUDA is). The model calls comm_all_reduce after the
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

#include <stddef.h>

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

#endif
