/* SPDX-License-Identifier: Apache-2.0 */
/* dispatch.h - admission and dispatch: the bounded queue of requests no worker has yet,
 * and the loop that hands them to workers.
 *
 * Admission is a check against two caps, counted over queued (not yet dispatched)
 * requests only: samples (a request with n samples counts n) and prompt tokens. A request
 * over either cap is refused on the spot (`busy`), so the router's memory is bounded by
 * the caps plus what the workers hold (each at most its capacity, see workers.h).
 *
 * Dispatch is FIFO: the head waits until some worker has room (workers_pick), so a
 * request never overtakes an older one. A request that fits no ready worker's context
 * fails with context_length_exceeded. With no worker ready at all, queued requests wait
 * at most no_workers_wait_ms (counted from their admission or from the moment the last
 * worker went away, whichever is later) and then fail with no_workers: a router started
 * a moment before its workers does not turn its first requests away, and a router whose
 * workers are gone answers within a bounded time.
 *
 * Requests coming back from a dead worker (re-dispatch) or a busy one go to the front of
 * the queue, outside the caps (they were admitted already). Every dispatch gives the
 * request a new rid, so late messages about an earlier attempt never match it.
 *
 * Sending is the caller's: `submit` writes a SUBMIT for (worker, request) and returns
 * DERAS_ECLOSED when the worker is unreachable (the request goes back to the queue and
 * the worker is skipped until heard from again); `fail` ends a queued request with an
 * error (the request is out of the queue when it is called and may be released).
 */
#ifndef DERAS_ROUTER_DISPATCH_H
#define DERAS_ROUTER_DISPATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "common/wire/protocol.h"
#include "router/requests.h"
#include "router/workers.h"

typedef struct dispatch dispatch_t;

typedef struct dispatch_opts {
    int max_queued_requests;   /* samples */
    int64_t max_queued_tokens; /* prompt tokens */
    int no_workers_wait_ms;
} dispatch_opts;

typedef int (*dispatch_submit_fn)(void *ctx, worker_t *k, rq_t *r);
typedef void (*dispatch_fail_fn)(void *ctx, rq_t *r, enum proto_error_code code, const char *msg);

/* A queue over the registry w and the table t (both borrowed); submit and fail are called
 * with ctx. DERAS_EINVAL for a NULL argument, DERAS_ENOMEM. */
int dispatch_new(workers_t *w, rq_table_t *t, const dispatch_opts *o, dispatch_submit_fn submit,
                 dispatch_fail_fn fail, void *ctx, dispatch_t **out);
void dispatch_destroy(dispatch_t **d);

/* Would a request of n samples and n_prompt tokens fit the caps now? DERAS_OK or
 * DERAS_EBUSY with the reason in deras_errmsg(). O(1). */
int dispatch_check(const dispatch_t *d, int n, int n_prompt);
/* Queue an inserted request (after dispatch_check). O(1). */
void dispatch_admit(dispatch_t *d, rq_t *r, int64_t now_us);
/* Back to the front of the queue (re-dispatch, busy worker). O(1). */
void dispatch_requeue(dispatch_t *d, rq_t *r, int64_t now_us);
/* Take a queued request out (cancel, deadline, client gone). No-op if not queued. */
void dispatch_remove(dispatch_t *d, rq_t *r);

/* Hand queued requests to workers while there is room; fail those that cannot run.
 * Returns how many were submitted. O(dispatched x WORKERS_MAX + queued when no worker). */
int dispatch_run(dispatch_t *d, int64_t now_us);

/* The next moment dispatch_run has something to expire (INT64_MAX if none). */
int64_t dispatch_next_timer(const dispatch_t *d);

/* Stop dispatching: every queued request (now and later) fails with shutting_down. */
void dispatch_drain(dispatch_t *d);

int dispatch_queued_requests(const dispatch_t *d); /* samples */
int dispatch_queued_count(const dispatch_t *d);    /* requests */
int64_t dispatch_queued_tokens(const dispatch_t *d);

#endif
