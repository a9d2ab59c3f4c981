/* SPDX-License-Identifier: Apache-2.0 */
/* comm_impl.h - what a communicator implementation provides: engine/comm.c dispatches
 * through it, worker/comm_shm.c and worker/comm_nccl.c implement it. Private to those. */
#ifndef DERAS_COMM_IMPL_H
#define DERAS_COMM_IMPL_H

#include "engine/comm.h"

typedef struct comm_ops {
    const char *kind;
    int (*all_reduce)(comm_t *c, float *buf, size_t n);
    int (*all_gather)(comm_t *c, const float *send, size_t n, float *recv);
    void (*destroy)(comm_t *c);
} comm_ops;

/* The first member of every implementation's struct. */
struct comm {
    const comm_ops *ops;
    int rank, size;
    int failed; /* the first failure's status; later calls return it at once */
};

#endif
