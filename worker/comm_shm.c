/* SPDX-License-Identifier: Apache-2.0 */
/* comm_shm.c - all-reduce and all-gather through shared memory, for CPU ranks (see comm.h).
 *
 * Region layout (offsets from the region's start, all 64-byte aligned):
 *   header: magic, size, cap, abort flag, then one arrival flag per rank
 *   in  [2][size][cap] f32   each rank's chunk, two sets used alternately
 *   out [2][cap] f32         the reduced chunk
 *
 * Barrier k: rank r stores k in its arrival flag, then waits until every other rank's
 * flag reaches k. Data written before the store is visible after the wait (release /
 * acquire), so a reader never sees a half-written chunk. Operation i uses buffer set
 * i % 2; a rank can start operation i + 2, overwriting set i % 2, only after passing the
 * first barrier of operation i + 1, which every rank reaches only once it has finished
 * reading operation i. So an all-reduce needs two barriers (in -> reduce -> out) and an
 * all-gather one.
 *
 * Reduce-scatter: rank r sums elements [m r / size, m (r + 1) / size) of the chunk over
 * ranks 0, 1, ..., size - 1 in that order; every element is summed exactly once, by one
 * rank, in a fixed order, so the result does not depend on timing. Cost per all-reduce of
 * n floats, per rank: copy n in, read size * n / size to reduce its slice, copy n out
 * (about 3n floats of memory traffic), plus 2 barriers per chunk.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm_impl.h"
#include "worker/comm_shm.h"
#include "common/base/status.h"

#define COMM_SHM_MAGIC 0x4d4d4f43u /* "COMM" */
#define ALIGN64(x) (((x) + 63u) & ~(size_t)63u)

typedef struct shm_hdr {
    uint32_t magic;
    int32_t size;
    uint64_t cap;
    char pad_[48];
    shm_flag abort;     /* nonzero: some rank failed; value = 1 + that rank */
    shm_flag arrive[];  /* (size) */
} shm_hdr;

typedef struct comm_shm {
    comm_t base;
    shm_hdr *h;
    float *in, *out;    /* in[set][rank][cap], out[set][cap] */
    size_t cap;
    uint32_t n_barriers, n_ops;
    comm_shm_opts o;
} comm_shm;

static size_t hdr_bytes(int size)
{
    return ALIGN64(sizeof(shm_hdr) + (size_t)size * sizeof(shm_flag));
}

size_t comm_shm_bytes(int size, size_t cap_elems)
{
    if (size < 1 || size > 64 || cap_elems == 0 || cap_elems > ((size_t)1 << 32))
        return 0;
    size_t per = ALIGN64(cap_elems * sizeof(float));
    return hdr_bytes(size) + 2 * (size_t)size * per + 2 * per;
}

int comm_shm_init(void *region, size_t bytes, int size, size_t cap_elems)
{
    size_t need = comm_shm_bytes(size, cap_elems);
    if (!region || !need || bytes < need)
        return deras_fail(DERAS_EINVAL, "comm_shm_init: region of %zu bytes for %d ranks x %zu "
                          "floats (needs %zu)", bytes, size, cap_elems, need);
    shm_hdr *h = region;
    memset(h, 0, hdr_bytes(size));
    h->size = size;
    h->cap = cap_elems;
    shm_flag_init(&h->abort, 0);
    for (int r = 0; r < size; r++)
        shm_flag_init(&h->arrive[r], 0);
    atomic_thread_fence(memory_order_release);
    h->magic = COMM_SHM_MAGIC;
    return DERAS_OK;
}

void comm_shm_abort(void *region)
{
    shm_hdr *h = region;
    if (h && shm_flag_load(&h->abort) == 0)
        shm_flag_store(&h->abort, 1000);
}

/* Between sleeps: has a rank failed, and does the caller's check pass? */
static int wait_check(void *ctx)
{
    comm_shm *c = ctx;
    uint32_t a = shm_flag_load(&c->h->abort);
    if (a)
        return deras_fail(DERAS_ECLOSED, "rank %d: %s", c->base.rank,
                          a == 1000 ? "the group was aborted"
                                    : "another rank's collective failed (it timed out or saw a "
                                      "rank die)");
    return c->o.check ? c->o.check(c->o.check_ctx) : DERAS_OK;
}

static int barrier(comm_shm *c)
{
    shm_hdr *h = c->h;
    uint32_t k = ++c->n_barriers;
    shm_flag_store(&h->arrive[c->base.rank], k);
    for (int j = 0; j < c->base.size; j++) {
        if (j == c->base.rank)
            continue;
        char what[64];
        snprintf(what, sizeof what, "rank %d at a collective", j);
        int rc = shm_flag_wait_ge(&h->arrive[j], k, c->o.timeout_s, wait_check, c, what);
        if (rc) {
            if (shm_flag_load(&h->abort) == 0)
                shm_flag_store(&h->abort, 1u + (uint32_t)c->base.rank);
            return deras_fail_ctx(rc, "rank %d: ", c->base.rank);
        }
    }
    return DERAS_OK;
}

static float *in_slot(comm_shm *c, int set, int rank)
{
    return c->in + ((size_t)set * c->base.size + (size_t)rank) * c->cap;
}

static int shm_all_reduce(comm_t *base, float *buf, size_t n)
{
    comm_shm *c = (comm_shm *)base;
    const int P = base->size, r = base->rank;
    for (size_t off = 0; off < n; off += c->cap) {
        const size_t m = n - off < c->cap ? n - off : c->cap;
        const int set = (int)(c->n_ops++ & 1);
        memcpy(in_slot(c, set, r), buf + off, m * sizeof(float));
        int rc = barrier(c);
        if (rc)
            return rc;
        /* reduce-scatter: this rank's slice, ranks added in order */
        const size_t lo = m * (size_t)r / (size_t)P, hi = m * (size_t)(r + 1) / (size_t)P;
        float *out = c->out + (size_t)set * c->cap;
        const float *a = in_slot(c, set, 0), *b = in_slot(c, set, 1);
        for (size_t i = lo; i < hi; i++)
            out[i] = a[i] + b[i];
        for (int j = 2; j < P; j++) {
            const float *x = in_slot(c, set, j);
            for (size_t i = lo; i < hi; i++)
                out[i] += x[i];
        }
        if ((rc = barrier(c)))
            return rc;
        memcpy(buf + off, out, m * sizeof(float)); /* all-gather of the slices */
    }
    return DERAS_OK;
}

static int shm_all_gather(comm_t *base, const float *send, size_t n, float *recv)
{
    comm_shm *c = (comm_shm *)base;
    for (size_t off = 0; off < n; off += c->cap) {
        const size_t m = n - off < c->cap ? n - off : c->cap;
        const int set = (int)(c->n_ops++ & 1);
        memcpy(in_slot(c, set, base->rank), send + off, m * sizeof(float));
        int rc = barrier(c);
        if (rc)
            return rc;
        for (int j = 0; recv && j < base->size; j++)
            memcpy(recv + (size_t)j * n + off, in_slot(c, set, j), m * sizeof(float));
    }
    return DERAS_OK;
}

static void shm_destroy(comm_t *base)
{
    free(base);
}

static const comm_ops shm_ops = {"shm", shm_all_reduce, shm_all_gather, shm_destroy};

int comm_shm_new(void *region, size_t bytes, int rank, int size, const comm_shm_opts *o,
                 comm_t **out)
{
    if (!region || !o || !out || size < 2 || size > 64 || rank < 0 || rank >= size)
        return deras_fail(DERAS_EINVAL, "comm_shm_new: rank %d of %d, region %p", rank, size,
                          region);
    *out = NULL;
    shm_hdr *h = region;
    if (bytes < hdr_bytes(size) || h->magic != COMM_SHM_MAGIC || h->size != size || h->cap == 0)
        return deras_fail(DERAS_EFORMAT, "comm_shm_new: the region is not laid out for %d ranks",
                          size);
    /* the chunk size is read from shared memory: the slots must fit the region */
    size_t need = comm_shm_bytes(size, (size_t)h->cap);
    if (!need || need > bytes)
        return deras_fail(DERAS_EFORMAT, "comm_shm_new: chunks of %llu floats for %d ranks do "
                          "not fit the region of %zu bytes", (unsigned long long)h->cap, size,
                          bytes);
    comm_shm *c = calloc(1, sizeof *c);
    if (!c)
        return deras_fail(DERAS_ENOMEM, "comm_shm_new: out of memory");
    c->base.ops = &shm_ops;
    c->base.rank = rank;
    c->base.size = size;
    c->h = h;
    c->cap = (size_t)h->cap;
    size_t per = ALIGN64(c->cap * sizeof(float));
    c->in = (float *)((char *)region + hdr_bytes(size));
    c->out = (float *)((char *)c->in + 2 * (size_t)size * per);
    c->cap = per / sizeof(float); /* slots are padded to 64 bytes: use the padding */
    c->o = *o;
    *out = &c->base;
    return DERAS_OK;
}
