/* SPDX-License-Identifier: Apache-2.0 */
/* plan_ring.c - step plans from the leader to the followers (see plan_ring.h).
 *
 * Region layout: header (magic, size, n_slots, slot bytes), head flag, one ack flag per
 * rank (rank 0's unused), then n_slots slots of [type, len, pad to 64, bytes]. Sequence
 * numbers start at 1; message seq lives in slot seq % n_slots. The leader may write
 * message seq once every follower's ack >= seq - n_slots.
 */
#include "plan_ring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

#define RING_MAGIC 0x474e4952u /* "RING" */
#define ALIGN64(x) (((x) + 63u) & ~(size_t)63u)
#define SLOT_HDR 64

typedef struct ring_hdr {
    uint32_t magic;
    int32_t size, n_slots;
    uint32_t pad0_;
    uint64_t slot_bytes; /* header + payload, 64-byte multiple */
    char pad_[40];
    shm_flag head;
    shm_flag ack[];      /* (size) */
} ring_hdr;

typedef struct slot_hdr {
    uint32_t type;
    uint32_t pad_;
    uint64_t len;
} slot_hdr;

struct plan_ring {
    ring_hdr *h;
    char *slots;
    int rank, size;
    uint32_t n_slots;    /* the layout, read once and checked against the region */
    size_t slot_bytes;
    uint32_t seq;        /* leader: last published; follower: last read */
    uint64_t n_published;/* leader: messages so far (seq wraps, this does not) */
    shm_check_fn check;
    void *ctx;
};

static size_t hdr_bytes(int size)
{
    return ALIGN64(sizeof(ring_hdr) + (size_t)size * sizeof(shm_flag));
}

size_t plan_ring_bytes(int size, int n_slots, size_t max_msg)
{
    if (size < 1 || size > 64 || n_slots < 1 || n_slots > 1024 || max_msg == 0 ||
        max_msg > ((size_t)1 << 31))
        return 0;
    return hdr_bytes(size) + (size_t)n_slots * ALIGN64(SLOT_HDR + max_msg);
}

int plan_ring_init(void *region, size_t bytes, int size, int n_slots, size_t max_msg)
{
    size_t need = plan_ring_bytes(size, n_slots, max_msg);
    if (!region || !need || bytes < need)
        return deras_fail(DERAS_EINVAL, "plan_ring_init: %zu bytes for %d ranks, %d slots of %zu "
                          "(needs %zu)", bytes, size, n_slots, max_msg, need);
    ring_hdr *h = region;
    memset(h, 0, hdr_bytes(size));
    h->size = size;
    h->n_slots = n_slots;
    h->slot_bytes = ALIGN64(SLOT_HDR + max_msg);
    shm_flag_init(&h->head, 0);
    for (int r = 0; r < size; r++)
        shm_flag_init(&h->ack[r], 0);
    atomic_thread_fence(memory_order_release);
    h->magic = RING_MAGIC;
    return DERAS_OK;
}

int plan_ring_new(void *region, size_t bytes, int rank, int size, shm_check_fn check, void *ctx,
                  plan_ring_t **out)
{
    if (!region || !out || size < 1 || size > 64 || rank < 0 || rank >= size)
        return deras_fail(DERAS_EINVAL, "plan_ring_new: rank %d of %d", rank, size);
    *out = NULL;
    ring_hdr *h = region;
    if (bytes < hdr_bytes(size) || h->magic != RING_MAGIC || h->size != size || h->n_slots < 1)
        return deras_fail(DERAS_EFORMAT, "plan ring: the region is not laid out for %d ranks", size);
    /* the layout is read from shared memory: it must fit the region before any use */
    size_t need = h->slot_bytes % 64 == 0 && h->slot_bytes > SLOT_HDR
                      ? plan_ring_bytes(size, (int)h->n_slots, (size_t)h->slot_bytes - SLOT_HDR)
                      : 0;
    if (h->n_slots > 1024 || !need || need > bytes)
        return deras_fail(DERAS_EFORMAT, "plan ring: %d slots of %llu bytes do not fit its "
                          "region of %zu bytes", (int)h->n_slots,
                          (unsigned long long)h->slot_bytes, bytes);
    plan_ring_t *r = calloc(1, sizeof *r);
    if (!r)
        return deras_fail(DERAS_ENOMEM, "plan_ring_new: out of memory");
    r->h = h;
    r->slots = (char *)region + hdr_bytes(size);
    r->n_slots = (uint32_t)h->n_slots;
    r->slot_bytes = (size_t)h->slot_bytes;
    r->rank = rank;
    r->size = size;
    r->check = check;
    r->ctx = ctx;
    /* a follower starts after whatever was already published (nothing, at start-up) */
    r->seq = rank == 0 ? shm_flag_load(&h->head) : shm_flag_load(&h->ack[rank]);
    *out = r;
    return DERAS_OK;
}

void plan_ring_destroy(plan_ring_t **r)
{
    if (!r || !*r)
        return;
    free(*r);
    *r = NULL;
}

size_t plan_ring_max_msg(const plan_ring_t *r)
{
    return r ? r->slot_bytes - SLOT_HDR : 0;
}

static char *slot_at(plan_ring_t *r, uint32_t seq)
{
    return r->slots + (size_t)(seq % r->n_slots) * r->slot_bytes;
}

int plan_ring_publish(plan_ring_t *r, enum plan_msg type, const void *data, size_t len,
                      double timeout_s)
{
    if (!r || r->rank != 0 || (len && !data))
        return deras_fail(DERAS_EINVAL, "plan_ring_publish: only rank 0 publishes");
    if (len > plan_ring_max_msg(r))
        return deras_fail(DERAS_ERANGE, "plan ring: message of %zu bytes, slots hold %zu", len,
                          plan_ring_max_msg(r));
    const uint32_t seq = r->seq + 1;
    const uint32_t n = r->n_slots;
    if (r->n_published >= n) /* the slot's previous message must have been read by everyone */
        for (int f = 1; f < r->size; f++) {
            char what[64];
            snprintf(what, sizeof what, "rank %d to read step message %u", f, seq - n);
            int rc = shm_flag_wait_ge(&r->h->ack[f], seq - n, timeout_s, r->check, r->ctx, what);
            if (rc)
                return rc;
        }
    char *s = slot_at(r, seq);
    slot_hdr sh = {.type = (uint32_t)type, .len = len};
    memcpy(s, &sh, sizeof sh);
    if (len)
        memcpy(s + SLOT_HDR, data, len);
    shm_flag_store(&r->h->head, seq);
    r->seq = seq;
    r->n_published++;
    return DERAS_OK;
}

int plan_ring_next(plan_ring_t *r, enum plan_msg *type, void *buf, size_t cap, size_t *len,
                   double timeout_s)
{
    if (!r || r->rank == 0 || !type || !len || (cap && !buf))
        return deras_fail(DERAS_EINVAL, "plan_ring_next: followers only, NULL argument");
    const uint32_t seq = r->seq + 1;
    int rc = shm_flag_wait_ge(&r->h->head, seq, timeout_s, r->check, r->ctx,
                              "the leader's next step");
    if (rc)
        return rc;
    const char *s = slot_at(r, seq);
    slot_hdr sh;
    memcpy(&sh, s, sizeof sh);
    if ((sh.type != PLAN_MSG_STEP && sh.type != PLAN_MSG_STOP) || sh.len > plan_ring_max_msg(r))
        return deras_fail(DERAS_EFORMAT, "plan ring: slot of message %u holds type %u, %llu bytes",
                          seq, sh.type, (unsigned long long)sh.len);
    if (sh.len > cap)
        return deras_fail(DERAS_ERANGE, "plan ring: message %u has %llu bytes, buffer holds %zu",
                          seq, (unsigned long long)sh.len, cap);
    if (sh.len)
        memcpy(buf, s + SLOT_HDR, (size_t)sh.len);
    *type = (enum plan_msg)sh.type;
    *len = (size_t)sh.len;
    r->seq = seq;
    shm_flag_store(&r->h->ack[r->rank], seq);
    return DERAS_OK;
}
