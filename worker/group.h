/* SPDX-License-Identifier: Apache-2.0 */
/* group.h - a tensor-parallel worker group: N processes, one model, one shared segment.
 *
 * deras-worker --tp-size N --tp-rank R --name G runs rank R of group G. Rank 0, the
 * leader, creates the POSIX shm segment /deras-<uid>-<G> (O_EXCL; a segment left by a
 * crashed group is removed first, and any other group segment of this user whose ranks
 * are all dead is removed too), writes into it what followers must agree on (model
 * config, the model options with the KV cache size it chose, the NCCL unique id on GPUs)
 * and lays out the plan ring (worker/plan_ring.h) and the shared-memory communicator
 * (engine/comm.h). Followers wait for the segment (up to the group timeout), check that
 * their checkpoint has the same config, load their shard and say so; the leader waits
 * for all of them, then serves: each step's plan goes into the ring before the forward
 * pass, and a STOP goes in when it exits cleanly. Only the leader talks to the router,
 * so the group is one worker to it.
 *
 * Liveness: each rank holds a robust mutex in the segment for its lifetime
 * (worker/shm_sync.h). Every wait - a follower idle on the ring, any collective, the
 * start-up - checks the other ranks' mutexes and the segment's abort flag every
 * SHM_SLICE_MS and has a deadline, so when a rank dies the others fail within about
 * 100 ms (a collective) or at the leader's next turn (idle), set the abort flag with the
 * reason, and exit non-zero. The leader's exit makes the router drop the group
 * (its heartbeats stop) after ending the requests in flight as aborted.
 */
#ifndef DERAS_GROUP_H
#define DERAS_GROUP_H

#include <stddef.h>

#include "common/checkpoint/model_config.h"
#include "worker/comm_nccl.h"
#include "worker/comm_shm.h"
#include "engine/model.h"
#include "engine/step_plan.h"

typedef struct group group_t;

typedef struct group_opts {
    const char *name;  /* the group's name: 1..64 of [A-Za-z0-9._:@-] */
    int rank, size;    /* size 2..64 */
    double timeout_s;  /* start-up waits, and the longest any one collective or ring wait
                          may take while the peers are alive */
} group_opts;

/* "/deras-<uid>-<name>" into buf. DERAS_ERANGE if it does not fit. */
int group_segment_name(const char *name, char *buf, size_t cap);

/* Leader: create the segment for `size` ranks. mo: the model options every rank uses
 * (progress/comm fields ignored); max_plan: the largest step plan in bytes. DERAS_EBUSY
 * if a live leader already runs this group. */
int group_lead(const group_opts *o, const model_config *cfg, const model_opts *mo,
               size_t max_plan, group_t **out);

/* Leader: wait until every follower has loaded its shard. DERAS_ETIMEOUT naming the
 * missing ranks; DERAS_ECLOSED if one died or failed (its reason). */
int group_wait_ready(group_t *g);

/* Follower: wait for the leader's segment and join it as o->rank. DERAS_ETIMEOUT when no
 * live leader's segment appears within the timeout; DERAS_EBUSY if that rank runs. */
int group_join(const group_opts *o, group_t **out);

/* Follower: DERAS_EINVAL, naming the field, if cfg differs from the leader's. */
int group_check_config(const group_t *g, const model_config *cfg);

/* The model options to load this rank's shard with: the leader's sizes, this rank, and
 * the group's communicator. */
void group_model_opts(const group_t *g, model_opts *mo);

/* The group's communicator (owned by the group). */
comm_t *group_comm(const group_t *g);

/* Follower: its shard is loaded (the leader's group_wait_ready sees it). */
void group_set_loaded(group_t *g);

/* Leader: publish one step's plan to the followers. Signature fits engine_opts.on_plan. */
int group_publish(void *g, const step_plan_t *p);

/* Follower: run every published plan through the model until STOP (DERAS_OK) or a
 * failure (the leader died, the group was aborted, a forward pass failed). */
int group_follow(group_t *g, model_t *m);

/* Leader, between steps: DERAS_ECLOSED naming the rank if a follower died. O(size). */
int group_check(group_t *g);

/* Mark the group failed with a reason, so every rank's waits fail at once. */
void group_abort(group_t *g, const char *why);

/* Leader: a clean group gets STOP; the segment is unlinked. Follower: leave. NULL-safe. */
void group_destroy(group_t **g);

#endif
