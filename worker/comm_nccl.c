/* SPDX-License-Identifier: Apache-2.0 */
/* comm_nccl.c - the communicator over NCCL, for GPU ranks (see comm.h).
 *
 * Built with DERAS_HAVE_NCCL (CMake found nvcc and libnccl); otherwise the functions say
 * DERAS_EUNSUPPORTED. Collectives are enqueued on the caller's stream and then waited for
 * by polling cudaStreamQuery and ncclCommGetAsyncError until a deadline: a rank that
 * died never completes its half of a collective, and NCCL itself would wait forever, so
 * on timeout or an asynchronous error the communicator is aborted (ncclCommAbort) and the
 * call fails; the process then exits and its group restarts. The communicator is created
 * non-blocking for the same reason: initialisation with a rank that never arrives is
 * bounded too. NOT YET RUN: the CUDA model backend does not exist, so this file is built
 * and linked in CI but has never executed on a GPU.
 */
#include "worker/comm_nccl.h"
#include "worker/shm_sync.h"

#include "common/base/status.h"

#ifdef DERAS_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/comm_impl.h"

_Static_assert(sizeof(ncclUniqueId) == COMM_NCCL_ID_BYTES, "NCCL unique id size");

#define NCCL_CHECK(call)                                                                   \
    do {                                                                                   \
        ncclResult_t r_ = (call);                                                          \
        if (r_ != ncclSuccess && r_ != ncclInProgress)                                     \
            return deras_fail(DERAS_EBACKEND, "%s failed at %s:%d: %s", #call, __FILE__,   \
                              __LINE__, ncclGetErrorString(r_));                           \
    } while (0)

#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess)                                                             \
            return deras_fail(DERAS_EBACKEND, "%s failed at %s:%d: %s", #call, __FILE__,   \
                              __LINE__, cudaGetErrorString(e_));                           \
    } while (0)

typedef struct comm_nccl {
    comm_t base;
    ncclComm_t nc;
    cudaStream_t stream;
    double timeout_s;
} comm_nccl;

static void sleep_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Wait for the communicator's pending work: initialisation (stream NULL) or the stream. */
static int wait_done(comm_nccl *c, const char *what)
{
    const double deadline = shm_now() + c->timeout_s;
    for (;;) {
        ncclResult_t async;
        NCCL_CHECK(ncclCommGetAsyncError(c->nc, &async));
        if (async != ncclSuccess && async != ncclInProgress) {
            ncclCommAbort(c->nc);
            c->nc = NULL;
            return deras_fail(DERAS_ECLOSED, "rank %d: NCCL %s failed: %s (communicator aborted)",
                              c->base.rank, what, ncclGetErrorString(async));
        }
        if (async == ncclSuccess) {
            if (!c->stream)
                return DERAS_OK;
            cudaError_t q = cudaStreamQuery(c->stream);
            if (q == cudaSuccess)
                return DERAS_OK;
            if (q != cudaErrorNotReady)
                return deras_fail(DERAS_EBACKEND, "rank %d: NCCL %s: %s", c->base.rank, what,
                                  cudaGetErrorString(q));
        }
        if (shm_now() >= deadline) {
            ncclCommAbort(c->nc);
            c->nc = NULL;
            return deras_fail(DERAS_ETIMEOUT, "rank %d: NCCL %s did not finish within %g s (a rank "
                              "died?); communicator aborted", c->base.rank, what, c->timeout_s);
        }
        sleep_us(50);
    }
}

static int nccl_all_reduce(comm_t *base, float *buf, size_t n)
{
    comm_nccl *c = (comm_nccl *)base;
    NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c->nc, c->stream));
    return wait_done(c, "all-reduce");
}

static int nccl_all_gather(comm_t *base, const float *send, size_t n, float *recv)
{
    comm_nccl *c = (comm_nccl *)base;
    if (!recv)
        return deras_fail(DERAS_EINVAL, "NCCL all-gather needs a receive buffer on every rank");
    NCCL_CHECK(ncclAllGather(send, recv, n, ncclFloat32, c->nc, c->stream));
    return wait_done(c, "all-gather");
}

static void nccl_destroy(comm_t *base)
{
    comm_nccl *c = (comm_nccl *)base;
    if (c->nc)
        ncclCommDestroy(c->nc);
    free(c);
}

static const comm_ops nccl_ops = {"nccl", nccl_all_reduce, nccl_all_gather, nccl_destroy};

bool comm_nccl_available(void)
{
    return true;
}

int comm_nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES])
{
    ncclUniqueId u;
    NCCL_CHECK(ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
    return DERAS_OK;
}

int comm_nccl_new(const unsigned char id[COMM_NCCL_ID_BYTES], int rank, int size, int device,
                  void *cuda_stream, double timeout_s, comm_t **out)
{
    if (!id || !out || size < 1 || rank < 0 || rank >= size || !(timeout_s > 0))
        return deras_fail(DERAS_EINVAL, "comm_nccl_new: rank %d of %d", rank, size);
    *out = NULL;
    CUDA_CHECK(cudaSetDevice(device));
    comm_nccl *c = calloc(1, sizeof *c);
    if (!c)
        return deras_fail(DERAS_ENOMEM, "comm_nccl_new: out of memory");
    c->base.ops = &nccl_ops;
    c->base.rank = rank;
    c->base.size = size;
    c->stream = (cudaStream_t)cuda_stream;
    c->timeout_s = timeout_s;
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* bounded initialisation: wait_done polls it */
    ncclResult_t r = ncclCommInitRankConfig(&c->nc, size, u, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        free(c);
        return deras_fail(DERAS_EBACKEND, "ncclCommInitRankConfig (rank %d of %d): %s", rank,
                          size, ncclGetErrorString(r));
    }
    cudaStream_t saved = c->stream;
    c->stream = NULL;
    int rc = wait_done(c, "initialisation");
    c->stream = saved;
    if (rc) {
        nccl_destroy(&c->base);
        return rc;
    }
    *out = &c->base;
    return DERAS_OK;
}

#else /* !DERAS_HAVE_NCCL */

bool comm_nccl_available(void)
{
    return false;
}

int comm_nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES])
{
    (void)id;
    return deras_fail(DERAS_EUNSUPPORTED, "this build has no NCCL (built without CUDA)");
}

int comm_nccl_new(const unsigned char id[COMM_NCCL_ID_BYTES], int rank, int size, int device,
                  void *cuda_stream, double timeout_s, comm_t **out)
{
    (void)id, (void)rank, (void)size, (void)device, (void)cuda_stream, (void)timeout_s;
    if (out)
        *out = NULL;
    return deras_fail(DERAS_EUNSUPPORTED, "this build has no NCCL (built without CUDA)");
}

#endif
