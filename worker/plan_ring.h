/* SPDX-License-Identifier: Apache-2.0 */
/* plan_ring.h - the leader's step plans, carried to the follower ranks in shared memory.
 *
 * A single-producer, multi-consumer ring of fixed-size slots in a region every rank
 * maps. The leader (rank 0) publishes one message per step - a step plan's bytes - or a
 * STOP when the group shuts down cleanly; followers 1..size-1 each read every message in
 * order. Slot seq % n_slots holds message seq; the leader publishes by storing seq in the
 * head flag (after the bytes: release), a follower acknowledges by storing seq in its ack
 * flag after copying the bytes out, and the leader reuses a slot only once every follower
 * has acknowledged the message that was in it, so no reader sees a torn slot.
 *
 * Followers sleep on the head flag's futex while the leader is idle (no busy spinning)
 * and run their check (is the leader alive? was the group aborted?) every SHM_SLICE_MS.
 */
#ifndef DERAS_PLAN_RING_H
#define DERAS_PLAN_RING_H

#include <stddef.h>
#include <stdint.h>

#include "worker/shm_sync.h"

enum plan_msg { PLAN_MSG_STEP = 1, PLAN_MSG_STOP = 2 };

typedef struct plan_ring plan_ring_t;

/* Region bytes for `size` ranks, n_slots slots of max_msg bytes; 0 on overflow. */
size_t plan_ring_bytes(int size, int n_slots, size_t max_msg);

/* Lay out a zeroed region (the leader, before anyone attaches). DERAS_EINVAL if too small. */
int plan_ring_init(void *region, size_t bytes, int size, int n_slots, size_t max_msg);

/* Attach as `rank` (0 = the writer) to a region of `bytes`. DERAS_EFORMAT if the region is
 * not laid out for `size` ranks or its layout (read from the region) does not fit `bytes`.
 * check/ctx run while waiting (may be NULL). */
int plan_ring_new(void *region, size_t bytes, int rank, int size, shm_check_fn check,
                  void *ctx, plan_ring_t **out);
void plan_ring_destroy(plan_ring_t **r);

/* Largest message a slot holds. */
size_t plan_ring_max_msg(const plan_ring_t *r);

/* Leader: publish one message. Waits (at most timeout_s) for the slot's previous message
 * to be acknowledged by every follower. DERAS_ERANGE if len exceeds the slot,
 * DERAS_ETIMEOUT or the check's status on a dead follower. */
int plan_ring_publish(plan_ring_t *r, enum plan_msg type, const void *data, size_t len,
                      double timeout_s);

/* Follower: copy the next message into buf (cap bytes), *type and *len set. Waits at
 * most timeout_s (< 0: no deadline; the check still runs every slice). DERAS_ERANGE if
 * the message does not fit cap, DERAS_EFORMAT for a corrupt slot. */
int plan_ring_next(plan_ring_t *r, enum plan_msg *type, void *buf, size_t cap, size_t *len,
                   double timeout_s);

#endif
