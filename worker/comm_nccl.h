/* SPDX-License-Identifier: Apache-2.0 */
/* comm_nccl.h - the NCCL communicator (engine/comm.h) for GPU ranks of a worker group.
 */
#ifndef DERAS_COMM_NCCL_H
#define DERAS_COMM_NCCL_H

#include <stdbool.h>

#include "engine/comm.h"

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
