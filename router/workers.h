/* SPDX-License-Identifier: Apache-2.0 */
/* workers.h - the router's registry of worker groups: who is there, who is alive, how
 * loaded each one is, and which one gets the next request.
 *
 * A worker enters with HELLO (workers_hello decides: welcome, refuse, or a restart of a
 * name we knew) and stays alive as long as it is heard from (any message) at least once
 * per worker-timeout; workers_expire finds the silent ones.
 *
 * States. A live worker is STARTING until its load reports phase "ready" (after its
 * warm-up step), READY while requests may go to it, DRAINING when it takes no new ones
 * (derasctl drain, the router stopping, or the worker's own phase "draining"); a
 * draining worker with nothing of ours in flight shows as "drained". A worker that
 * heartbeats while holding our requests but completes no engine step for the stuck
 * timeout is STUCK: the caller treats its requests as on a dead worker, and it stays
 * STUCK (its pulses still heard, never dispatched to) until it goes silent (DEAD) or
 * registers again. Load comes from HEARTBEAT
 * and from the load every STEP carries; between two reports the router adds the prompt
 * tokens it sent, so a burst of requests does not all land on the worker that looked
 * idle a moment ago.
 *
 * The pick policy (workers_pick): among ready workers that are connected, have room
 * (sequences in flight below capacity = max_seqs x WORKERS_INFLIGHT_FACTOR, lowered to
 * what was in flight when the worker last answered busy) and a context long enough, the
 * one with the least queued + running tokens (+ tokens sent since its last report);
 * ties go to the most free KV blocks, then to the fewest sequences in flight.
 *
 * No sockets here: the registry is plain data, so the policy is tested with fake
 * workers. Capacity: WORKERS_MAX slots; a dead worker's slot is reused when needed.
 */
#ifndef DERAS_ROUTER_WORKERS_H
#define DERAS_ROUTER_WORKERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/protocol.h"
#include "common/wire/worker_proto.h"

#define WORKERS_MAX PROTO_MAX_WORKERS
#define WORKERS_INFLIGHT_FACTOR 4

enum worker_state { W_FREE = 0, W_STARTING, W_READY, W_DRAINING, W_STUCK, W_DEAD };

typedef struct worker {
    enum worker_state state;
    int slot;
    uint64_t epoch;             /* changes with every registration of this slot */
    char name[WPROTO_MAX_NAME + 1];
    int name_len;
    wp_hello hello;
    int64_t registered_us;
    int64_t last_seen_us;
    int64_t dead_since_us;
    int64_t progress_us;        /* its step count last advanced, or work arrived while idle */
    bool drain_asked;           /* derasctl drain or the router stopping: no new requests */
    int64_t drain_deadline_us;  /* derasctl drain --timeout: abort what is left then; 0 none */
    wp_load load;               /* last report */
    int64_t tokens_since;       /* prompt tokens dispatched since that report */
    int inflight_seqs;          /* samples of requests dispatched and not ended */
    int inflight_reqs;
    int capacity;               /* max_seqs x WORKERS_INFLIGHT_FACTOR */
    int cap_limit;              /* <= capacity; lowered by a busy REJECT */
    uint64_t served;
    int fd;                     /* connection its last message came on, -1 unknown */
    bool disconnected;          /* its connection closed; no dispatch until heard again */
} worker_t;

typedef struct workers workers_t;

/* vocab_size and model_name (a path; its base name is compared) describe the router's
 * model; timeout_ms is the silence after which a worker is dead; stuck_timeout_ms the time
 * without a completed step, while requests of ours are on it, after which it is stuck (0:
 * never). DERAS_ENOMEM. */
int workers_new(int vocab_size, const char *model_name, int timeout_ms, int stuck_timeout_ms,
                workers_t **out);
void workers_destroy(workers_t **w);

enum hello_verdict {
    HELLO_NEW,        /* registered in *out */
    HELLO_RECONNECT,  /* same process said HELLO again: *out keeps its state */
    HELLO_RESTART,    /* a new process under a live name: the caller ends the old
                       * process's requests (workers_dead), then calls workers_hello again */
    HELLO_REFUSE,     /* why[] says why */
};

/* Judge a HELLO from routing id `name` (name_len bytes). Refused: a name that is not the
 * HELLO's own, a vocabulary or model that is not the router's, nonsensical capacity,
 * or a full registry. O(WORKERS_MAX). */
enum hello_verdict workers_hello(workers_t *w, const void *name, int name_len,
                                 const wp_hello *h, int fd, int64_t now_us, worker_t **out,
                                 char *why, size_t why_cap);

/* Live: starting, ready or draining (heard from, may hold requests). */
bool workers_live(const worker_t *k);
/* The live worker with this routing id, or NULL. */
worker_t *workers_find(workers_t *w, const void *name, int name_len);
/* The record of this name in any state but free (dead and stuck ones included), or NULL. */
worker_t *workers_lookup(workers_t *w, const void *name, int name_len);
worker_t *workers_at(workers_t *w, int slot);
/* "starting", "ready", "draining", "drained", "stuck", "dead". */
const char *workers_state_name(const worker_t *k);
/* The worker's speculative proposer as its HELLO named it: "none" (also when it named
 * none), "ngram", "self", "draft", or "other" for a name this router does not know (so it
 * is always safe as a metrics label). */
const char *workers_spec_name(const worker_t *k);

/* Heard from: refresh its clock and connection. */
void workers_seen(worker_t *k, int fd, int64_t now_us);
/* A pulse (the heartbeat a worker's side thread sends while one step runs long, from
 * routing id "<name>/hb"): refresh its clock only; the connection and load stay those of
 * the worker's own socket. A stuck worker's pulses keep it "stuck" rather than "dead". */
void workers_pulse(worker_t *k, int64_t now_us);
/* A load report (HEARTBEAT, or the load a STEP carries): its phase moves the worker
 * between starting, ready and draining; a step count that advanced is progress. A
 * heartbeat saying nothing is waiting also lifts a busy worker's hold (a STEP does not: a
 * worker that refuses work while it finishes some would otherwise be offered the same
 * request every step). */
void workers_load(worker_t *k, const wp_load *l, bool heartbeat, int64_t now_us);
/* Bookkeeping of dispatch: n sequences with n_prompt tokens sent / ended. */
void workers_sent(worker_t *k, int n, int n_prompt, int64_t now_us);
void workers_ended(worker_t *k, int n);
/* The worker answered busy with n_seqs of ours in flight: hold it there. */
void workers_busy(worker_t *k);
/* A connection closed: mark the worker using that fd (if any) disconnected. */
void workers_fd_closed(workers_t *w, int fd);
/* Mark k dead (its requests are the caller's business). */
void workers_dead(worker_t *k, int64_t now_us);
/* Mark k stuck (its requests are the caller's business, as for a dead worker). */
void workers_stuck(worker_t *k);
/* Drain k (no new requests; deadline_us > 0: when the rest is aborted) or undrain it
 * (on = false: back to ready unless its own phase says otherwise). */
void workers_drain(worker_t *k, bool on, int64_t deadline_us);
/* Every live worker draining, and workers that register from now on too (the router
 * stopping, derasctl drain --all); undrain_all ends both. */
void workers_drain_all(workers_t *w, int64_t deadline_us);
void workers_undrain_all(workers_t *w);
/* Draining with nothing of ours in flight. */
bool workers_drained(const worker_t *k);

/* A live or stuck worker silent for longer than the timeout, or NULL. */
worker_t *workers_expired(workers_t *w, int64_t now_us);
/* A live worker with requests of ours in flight and no completed step for the stuck
 * timeout, or NULL. */
worker_t *workers_find_stuck(workers_t *w, int64_t now_us);
/* A draining worker whose drain deadline passed with requests of ours still on it. */
worker_t *workers_drain_overdue(workers_t *w, int64_t now_us);
/* When the next of those three could happen (INT64_MAX if never). */
int64_t workers_next_expiry(const workers_t *w);

/* The worker for a request of n samples, n_prompt tokens, needing a context of
 * need_len (prompt + max_tokens), or NULL when none has room now. O(WORKERS_MAX). */
worker_t *workers_pick(workers_t *w, int n, int n_prompt, int need_len);
/* Ready and connected workers. */
int workers_ready(const workers_t *w);
/* Workers in each state, indexed by enum worker_state (drained ones count as draining). */
void workers_count(const workers_t *w, int counts[W_DEAD + 1]);
/* Largest context among ready workers (0 if none). */
int workers_max_len(const workers_t *w);

/* Pong entries for every known worker (live and recently dead), at most cap. */
int workers_status(const workers_t *w, proto_worker_status *out, int cap);

#endif
