/* SPDX-License-Identifier: Apache-2.0 */
/* follower.h - a tensor-parallel follower process: rank 1..N-1 of a worker group.
 *
 * A follower never talks to the router. It joins its group's shared segment
 * (worker/group.h), loads its shard with the leader's options, and runs every step plan
 * the leader publishes until the leader says STOP (exit 0) or the group fails: the
 * leader died, another rank died, or a forward pass failed (exit 1). SIGTERM/SIGINT do
 * not end a follower: the leader ends the group (after its drain), so systemd can stop
 * all ranks at once without cutting a step short.
 */
#ifndef DERAS_FOLLOWER_H
#define DERAS_FOLLOWER_H

#include "worker/worker_opts.h"

/* Run rank o->tp_rank (>= 1) until the group ends. DERAS_OK after the leader's STOP;
 * otherwise the failure's status with deras_errmsg() saying what happened. */
int worker_follower_run(const worker_opts *o);

#endif
