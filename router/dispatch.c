/* SPDX-License-Identifier: Apache-2.0 */
/* dispatch.c - admission queue and dispatch to workers (see dispatch.h).
 *
 * The queue is an intrusive list (common/base/list.h) through the request records'
 * `queue` nodes, so admission, removal and re-queueing at the front are O(1) and allocate
 * nothing. The counters (samples, prompt tokens) follow the queue exactly: everything
 * that enters or leaves it goes through q_push / q_unlink.
 */
#include "router/dispatch.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/base/log.h"
#include "common/base/status.h"

struct dispatch {
    workers_t *w;
    rq_table_t *t;
    dispatch_opts o;
    dispatch_submit_fn submit;
    dispatch_fail_fn fail;
    void *ctx;

    list_node queue;        /* head first: the next to dispatch */
    int queued_requests;    /* samples */
    int queued_count;       /* requests */
    int64_t queued_tokens;
    uint64_t next_rid;
    int64_t no_workers_since_us; /* 0 while some worker is ready */
    bool draining;
};

int dispatch_new(workers_t *w, rq_table_t *t, const dispatch_opts *o, dispatch_submit_fn submit,
                 dispatch_fail_fn fail, void *ctx, dispatch_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "dispatch_new: NULL out");
    *out = NULL;
    if (!w || !t || !o || !submit || !fail)
        return deras_fail(DERAS_EINVAL, "dispatch_new: NULL argument");
    dispatch_t *d = calloc(1, sizeof *d);
    if (!d)
        return deras_fail(DERAS_ENOMEM, "dispatch_new: out of memory");
    d->w = w;
    d->t = t;
    d->o = *o;
    d->submit = submit;
    d->fail = fail;
    d->ctx = ctx;
    d->next_rid = 1;
    list_init(&d->queue);
    *out = d;
    return DERAS_OK;
}

void dispatch_destroy(dispatch_t **d)
{
    if (!d || !*d)
        return;
    free(*d);
    *d = NULL;
}

static rq_t *q_first(const dispatch_t *d)
{
    return list_entry(list_first(&d->queue), rq_t, queue);
}

static rq_t *q_next(const dispatch_t *d, const rq_t *r)
{
    return list_entry(list_next(&d->queue, &r->queue), rq_t, queue);
}

static void q_push(dispatch_t *d, rq_t *r, bool front)
{
    r->state = RQ_QUEUED;
    r->worker = -1;
    if (front)
        list_push_front(&d->queue, &r->queue);
    else
        list_push_back(&d->queue, &r->queue);
    d->queued_requests += r->params.n;
    d->queued_count++;
    d->queued_tokens += r->n_prompt;
}

static void q_unlink(dispatch_t *d, rq_t *r)
{
    if (!list_linked(&r->queue))
        return;
    list_remove(&r->queue);
    d->queued_requests -= r->params.n;
    d->queued_count--;
    d->queued_tokens -= r->n_prompt;
}

int dispatch_check(const dispatch_t *d, int n, int n_prompt)
{
    if (d->queued_requests + n > d->o.max_queued_requests)
        return deras_fail(DERAS_EBUSY,
                          "queue full: %d samples queued, %d more would pass the cap of %d",
                          d->queued_requests, n, d->o.max_queued_requests);
    if (d->queued_tokens + n_prompt > d->o.max_queued_tokens)
        return deras_fail(DERAS_EBUSY,
                          "queue full: %lld prompt tokens queued, %d more would pass the cap of %lld",
                          (long long)d->queued_tokens, n_prompt, (long long)d->o.max_queued_tokens);
    return DERAS_OK;
}

void dispatch_admit(dispatch_t *d, rq_t *r, int64_t now_us)
{
    r->no_worker_until_us = now_us + (int64_t)d->o.no_workers_wait_ms * 1000;
    q_push(d, r, false);
}

void dispatch_requeue(dispatch_t *d, rq_t *r, int64_t now_us)
{
    r->no_worker_until_us = now_us + (int64_t)d->o.no_workers_wait_ms * 1000;
    q_push(d, r, true);
}

void dispatch_remove(dispatch_t *d, rq_t *r)
{
    q_unlink(d, r);
}

/* Fail every queued request whose wait for a worker is over. */
static void expire_no_workers(dispatch_t *d, int64_t now_us)
{
    int64_t floor = d->no_workers_since_us + (int64_t)d->o.no_workers_wait_ms * 1000;
    rq_t *next;
    for (rq_t *r = q_first(d); r; r = next) {
        next = q_next(d, r);
        int64_t until = r->no_worker_until_us > floor ? r->no_worker_until_us : floor;
        if (now_us < until)
            continue;
        q_unlink(d, r);
        d->fail(d->ctx, r, PE_NO_WORKERS, "no worker is ready to serve this request");
    }
}

int dispatch_run(dispatch_t *d, int64_t now_us)
{
    if (d->draining) {
        rq_t *r;
        while ((r = q_first(d))) {
            q_unlink(d, r);
            d->fail(d->ctx, r, PE_SHUTTING_DOWN, "the router is shutting down");
        }
        return 0;
    }
    if (workers_ready(d->w) == 0) {
        if (!d->no_workers_since_us)
            d->no_workers_since_us = now_us;
        expire_no_workers(d, now_us);
        return 0;
    }
    d->no_workers_since_us = 0;

    int sent = 0;
    int max_len = workers_max_len(d->w);
    rq_t *r;
    while ((r = q_first(d))) {
        int need = r->n_prompt + r->params.max_tokens;
        if (need > max_len) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "prompt (%d tokens) + max_tokens (%d) = %d exceeds the longest context a "
                     "worker serves (%d tokens)",
                     r->n_prompt, r->params.max_tokens, need, max_len);
            q_unlink(d, r);
            d->fail(d->ctx, r, PE_CONTEXT_LENGTH_EXCEEDED, msg);
            continue;
        }
        worker_t *k = workers_pick(d->w, r->params.n, r->n_prompt, need);
        if (!k)
            break;
        q_unlink(d, r);
        rq_set_rid(d->t, r, d->next_rid++);
        r->state = RQ_RUNNING;
        r->worker = k->slot;
        r->attempts++;
        r->t_dispatch_us = now_us;
        workers_sent(k, r->params.n, r->n_prompt, now_us);
        int rc = d->submit(d->ctx, k, r);
        if (rc) {
            /* unreachable worker: skip it until heard from; the request goes back */
            log_warn("worker %s unreachable (%s); request goes back to the queue", k->name,
                     deras_errmsg());
            workers_ended(k, r->params.n);
            k->disconnected = true;
            r->attempts--;
            q_push(d, r, true);
            if (workers_ready(d->w) == 0)
                break;
            continue;
        }
        sent++;
    }
    return sent;
}

int64_t dispatch_next_timer(const dispatch_t *d)
{
    if (list_empty(&d->queue) || d->draining || workers_ready(d->w) > 0)
        return INT64_MAX;
    int64_t floor = d->no_workers_since_us + (int64_t)d->o.no_workers_wait_ms * 1000;
    int64_t t = INT64_MAX;
    for (const rq_t *r = q_first(d); r; r = q_next(d, r)) {
        int64_t until = r->no_worker_until_us > floor ? r->no_worker_until_us : floor;
        if (until < t)
            t = until;
    }
    return t;
}

void dispatch_drain(dispatch_t *d)
{
    d->draining = true;
}

int dispatch_queued_requests(const dispatch_t *d)
{
    return d->queued_requests;
}

int dispatch_queued_count(const dispatch_t *d)
{
    return d->queued_count;
}

int64_t dispatch_queued_tokens(const dispatch_t *d)
{
    return d->queued_tokens;
}
