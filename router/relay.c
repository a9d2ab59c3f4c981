/* SPDX-License-Identifier: Apache-2.0 */
/* relay.c - what clients hear about their requests: chunks and finals built from the
 * workers' STEP frames, and every way a request can end.
 *
 * A STEP frame carries the tokens and finishes of one engine step for all of a worker's
 * sequences. It is relayed in three passes so that each sample gets at most one chunk
 * per frame, and no record is released while the frame still refers to it:
 *   1. tokens: each goes into its sample's stream (detokenizer, stop matcher); a stop
 *      string ends the sample on the spot ("stop"), later tokens of it are ignored;
 *   2. finishes: the sample's stream is flushed and the worker's reason recorded;
 *   3. for each sample touched: one chunk with everything pending (streaming requests),
 *      then its final if it ended; a request whose samples all ended is released, and
 *      aborted at the worker if the worker may still be running some of it.
 * Tokens for rids the router does not know (ended, re-dispatched elsewhere) are
 * answered with one ABORT per rid and frame, so a worker never computes for nobody.
 *
 * Sends never fail loudly: a client that is gone or not reading has its requests marked
 * (relay_mark_gone) and ended silently by relay_reap once the current handler is done.
 *
 * Metrics are recorded where requests end, so each is counted exactly once: a sample at
 * its final (finish reason, tokens, TTFT, TPOT, end to end), a request when all its
 * finals went out (prompt tokens, queue time) or when it ends with an error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "router/router.h"

static void usage_of(const rq_t *r, const rq_sample *s, int64_t now_us, proto_usage *u)
{
    u->prompt_tokens = r->n_prompt;
    u->completion_tokens = stream_n_tokens(s->st);
    u->queue_ms = ((r->t_dispatch_us ? r->t_dispatch_us : now_us) - r->t_recv_us) / 1e3;
    u->ttft_ms = s->t_first_us ? (s->t_first_us - r->t_recv_us) / 1e3 : 0.0;
    u->total_ms = (now_us - r->t_recv_us) / 1e3;
    u->spec = s->spec;
}

static void send_to(router_t *rt, rq_t *r, const void *buf, size_t len)
{
    if (r->gone)
        return;
    if (frontend_send(rt, r->ident, r->ident_len, r->delim, buf, len) == DERAS_OK)
        r->client_seen = true;
}

static void send_chunk(router_t *rt, rq_t *r, int k)
{
    stream_t *st = r->samples[k].st;
    if (r->http) {
        http_api_chunk(rt, r, k);
        r->client_seen = true;
        stream_take(st);
        return;
    }
    size_t n_text;
    int n_ids;
    const char *text = stream_text(st, &n_text);
    const int32_t *ids = stream_ids(st, &n_ids);
    const void *buf;
    size_t len;
    if (proto_encode_chunk(rt->penc, r->id, k, ids, n_ids, text, n_text, stream_logprobs(st), &buf,
                           &len) == DERAS_OK)
        send_to(rt, r, buf, len);
    else
        log_error("request %s: cannot encode a chunk: %s", r->id, deras_errmsg());
    stream_take(st);
}

/* The metrics of sample k's end (and of the request's, with its last sample). */
static void account_final(router_t *rt, const rq_t *r, const rq_sample *s, const proto_usage *u)
{
    int n = u->completion_tokens;
    double ttft = s->t_first_us ? u->ttft_ms / 1e3 : -1.0;
    double tpot = s->t_first_us && n > 1 ? (s->t_last_us - s->t_first_us) / 1e6 / (n - 1) : -1.0;
    metrics_sample_end(rt->metrics, s->finish, n, ttft, tpot, u->total_ms / 1e3);
    if (r->n_finals == r->params.n)
        metrics_request_end(rt->metrics, r->n_prompt, u->queue_ms / 1e3);
}

static void send_final(router_t *rt, rq_t *r, int k, int64_t now_us)
{
    rq_sample *s = &r->samples[k];
    proto_usage u;
    usage_of(r, s, now_us, &u);
    r->n_finals++;
    account_final(rt, r, s, &u);
    if (r->http) {
        http_api_final(rt, r, k, &u);
        r->client_seen = true;
        return;
    }
    const char *text = NULL;
    size_t n_text = 0;
    const int32_t *ids = NULL;
    int n_ids = 0;
    const proto_logprob *lps = NULL;
    if (!r->stream) {
        text = stream_text(s->st, &n_text);
        ids = stream_ids(s->st, &n_ids);
        lps = stream_logprobs(s->st);
    }
    const void *buf;
    size_t len;
    if (proto_encode_final(rt->penc, r->id, k, s->finish, s->abort_reason, &u, text, n_text,
                           ids, n_ids, lps, &buf, &len) == DERAS_OK)
        send_to(rt, r, buf, len);
    else
        log_error("request %s: cannot encode a final: %s", r->id, deras_errmsg());
}

/* Give the request's worker its capacity back, aborting there what may still run. */
static void leave_worker(router_t *rt, rq_t *r)
{
    if (r->state != RQ_RUNNING)
        return;
    worker_t *k = workers_at(rt->workers, r->worker);
    if (k && workers_live(k)) {
        bool running = false;
        for (int i = 0; i < r->params.n; i++)
            running |= !r->samples[i].worker_done;
        if (running)
            wlink_abort(rt, k, r->rid);
        workers_ended(k, r->params.n);
    }
    r->worker = -1;
}

/* r ended (code PE_NONE: with its finals; else with that error): log it, free it. */
static void release(router_t *rt, rq_t *r, enum proto_error_code code)
{
    stats_line_request_end(rt, r, code, router_now_us());
    if (r->http)
        http_api_end(rt, r);
    leave_worker(rt, r);
    dispatch_remove(rt->disp, r);
    rq_release(rt->rqs, r);
    rt->st.completed++;
}

/* End sample k: flush its stream, record why. */
static void end_sample(rq_t *r, int k, finish_reason finish, const char *abort_reason)
{
    rq_sample *s = &r->samples[k];
    if (s->done)
        return;
    if (stream_finish(s->st))
        log_warn("request %s: flushing sample %d: %s", r->id, k, deras_errmsg());
    s->done = true;
    r->n_done++;
    if (stream_stopped(s->st)) {
        s->finish = FINISH_STOP;
        s->abort_reason = NULL;
    } else {
        s->finish = finish;
        s->abort_reason = abort_reason;
    }
}

void relay_abort(router_t *rt, rq_t *r, const char *abort_reason)
{
    int64_t now = router_now_us();
    for (int k = 0; k < r->params.n; k++) {
        if (r->samples[k].done)
            continue;
        end_sample(r, k, FINISH_ABORT, abort_reason);
        if (r->stream && stream_has_pending(r->samples[k].st))
            send_chunk(rt, r, k);
        send_final(rt, r, k, now);
    }
    release(rt, r, PE_NONE);
}

void relay_fail(router_t *rt, rq_t *r, enum proto_error_code code, const char *msg)
{
    metrics_request_error(rt->metrics);
    if (r->http)
        http_api_fail(rt, r, code, msg);
    else if (!r->gone)
        frontend_error(rt, r->ident, r->ident_len, r->delim, r->id, code, msg);
    release(rt, r, code);
}

void relay_fail_cb(void *ctx, rq_t *r, enum proto_error_code code, const char *msg)
{
    relay_fail((router_t *)ctx, r, code, msg);
}

/* Remember sample k of r for pass 3 (once). */
static void touch(router_t *rt, rq_t *r, int k)
{
    if (r->samples[k].touched)
        return;
    if (rt->n_touched == rt->cap_touched) {
        int cap = rt->cap_touched ? rt->cap_touched * 2 : 256;
        struct touched *p = realloc(rt->touched, (size_t)cap * sizeof *p);
        if (!p) {
            /* cannot batch: this sample's chunk waits for the next frame */
            log_error("relay: out of memory for the STEP list");
            return;
        }
        rt->touched = p;
        rt->cap_touched = cap;
    }
    r->samples[k].touched = true;
    rt->touched[rt->n_touched++] = (struct touched){r, k};
}

static void note_stray(router_t *rt, uint64_t rid)
{
    rt->st.stray_tokens++;
    for (int i = 0; i < rt->n_stray; i++)
        if (rt->stray_rids[i] == rid)
            return;
    if (rt->n_stray < (int)(sizeof rt->stray_rids / sizeof rt->stray_rids[0]))
        rt->stray_rids[rt->n_stray++] = rid;
}

/* The request a token or finish is about, if it is ours and still running there; NULL
 * for rids the router no longer knows (ended, re-dispatched elsewhere). */
static rq_t *lookup(router_t *rt, worker_t *k, uint64_t rid)
{
    rq_t *r = rq_find_rid(rt->rqs, rid);
    return r && r->state == RQ_RUNNING && r->worker == k->slot ? r : NULL;
}

/* A sample index the worker should never send: ignored, counted, logged a few times. */
static bool bad_index(router_t *rt, worker_t *k, const rq_t *r, int index)
{
    if (index >= 0 && index < r->params.n)
        return false;
    if (++rt->st.stray_tokens <= 10)
        log_warn("worker %s: sample index %d outside request %s's %d samples", k->name, index,
                 r->id, r->params.n);
    return true;
}

void relay_step(router_t *rt, worker_t *k, const wp_msg *m)
{
    int64_t now = router_now_us();
    rt->n_touched = 0;
    rt->n_stray = 0;

    for (int i = 0; i < m->n_tokens; i++) {
        const wp_token *t = &m->tokens[i];
        rq_t *r = lookup(rt, k, t->rid);
        if (!r) {
            note_stray(rt, t->rid);
            continue;
        }
        if (bad_index(rt, k, r, t->index))
            continue;
        rq_sample *s = &r->samples[t->index];
        if (s->done)
            continue;
        if (stream_n_tokens(s->st) >= r->params.max_tokens) {
            /* a worker that does not stop: the text stays bounded by max_tokens */
            rt->st.stray_tokens++;
            continue;
        }
        rt->st.generated_tokens++;
        if (!s->t_first_us)
            s->t_first_us = now;
        s->t_last_us = now;
        int rc = stream_push(s->st, t->lp.token_id,
                             r->params.sp.n_logprobs > 0 ? &t->lp : NULL);
        if (rc == DERAS_ENOMEM) {
            log_error("request %s: %s", r->id, deras_errmsg());
            end_sample(r, t->index, FINISH_ABORT, "out_of_memory");
        } else if (stream_stopped(s->st)) {
            end_sample(r, t->index, FINISH_STOP, NULL);
        }
        touch(rt, r, t->index);
    }

    for (int i = 0; i < m->n_finishes; i++) {
        const wp_finish *f = &m->finishes[i];
        rq_t *r = lookup(rt, k, f->rid);
        if (!r || bad_index(rt, k, r, f->index))
            continue;
        rq_sample *s = &r->samples[f->index];
        s->worker_done = true;
        /* kept even when the router ended the sample first (a stop string in this STEP):
         * its final goes out below */
        s->spec = f->spec;
        if (s->done)
            continue;
        end_sample(r, f->index, f->reason, f->reason == FINISH_ABORT ? "worker_aborted" : NULL);
        touch(rt, r, f->index);
    }

    for (int i = 0; i < rt->n_touched; i++) {
        rq_t *r = rt->touched[i].r;
        int j = rt->touched[i].k;
        r->samples[j].touched = false;
        if (r->state == RQ_FREE)
            continue;
        if (r->stream && stream_has_pending(r->samples[j].st))
            send_chunk(rt, r, j);
        if (r->samples[j].done)
            send_final(rt, r, j, now);
    }
    for (int i = 0; i < rt->n_touched; i++) {
        rq_t *r = rt->touched[i].r;
        if (r->state != RQ_FREE && r->n_done == r->params.n)
            release(rt, r, PE_NONE);
    }
    rt->n_touched = 0;

    for (int i = 0; i < rt->n_stray; i++)
        wlink_abort(rt, k, rt->stray_rids[i]);
}

/* Worker k is dead or stuck: its requests go to another worker or fail. A stuck worker
 * may still be running them, so each is aborted there first (a dead one cannot hear). */
static void worker_lost(router_t *rt, worker_t *k, const char *why, bool stuck)
{
    int64_t now = router_now_us();
    int slot = k->slot, requeued = 0, failed = 0;
    log_warn("worker %s (pid %d) is %s: %s", k->name, (int)k->hello.pid, stuck ? "stuck" : "dead",
             why);
    if (stuck) { /* first: its requests no longer count against it, nothing more goes there */
        workers_stuck(k);
        rt->st.worker_stuck++;
    } else {
        workers_dead(k, now);
        rt->st.worker_deaths++;
    }
    char msg[256];
    snprintf(msg, sizeof msg, "worker %s failed: %s", k->name, why);
    rq_t *next;
    for (rq_t *r = rq_first(rt->rqs); r; r = next) {
        next = rq_next(rt->rqs, r);
        if (r->state != RQ_RUNNING || r->worker != slot)
            continue;
        if (stuck)
            wlink_abort(rt, k, r->rid);
        if (!r->client_seen && !r->gone && !rt->draining && r->attempts < ROUTER_MAX_ATTEMPTS &&
            rq_start_samples(rt->rqs, r) == DERAS_OK) {
            r->worker = -1;
            dispatch_requeue(rt->disp, r, now);
            rt->st.redispatched++;
            requeued++;
        } else {
            relay_fail(rt, r, PE_WORKER_FAILED, msg);
            failed++;
        }
    }
    if (requeued || failed)
        log_warn("worker %s: %d requests go to another worker, %d end with worker_failed",
                 k->name, requeued, failed);
}

void relay_worker_dead(router_t *rt, worker_t *k, const char *why)
{
    worker_lost(rt, k, why, false);
}

void relay_worker_stuck(router_t *rt, worker_t *k, const char *why)
{
    worker_lost(rt, k, why, true);
}

int relay_abort_worker(router_t *rt, worker_t *k, const char *abort_reason)
{
    int n = 0;
    rq_t *next;
    for (rq_t *r = rq_first(rt->rqs); r; r = next) {
        next = rq_next(rt->rqs, r);
        if (r->state == RQ_RUNNING && r->worker == k->slot) {
            relay_abort(rt, r, abort_reason);
            n++;
        }
    }
    return n;
}

void relay_fd_closed(router_t *rt, int fd)
{
    if (fd < 0)
        return;
    rq_t *next;
    for (rq_t *r = rq_first(rt->rqs); r; r = next) {
        next = rq_next(rt->rqs, r);
        if (r->fd == fd)
            relay_abort(rt, r, "disconnected");
    }
}

void relay_mark_gone(router_t *rt, const uint8_t *ident, int ident_len)
{
    for (rq_t *r = rq_first(rt->rqs); r; r = rq_next(rt->rqs, r))
        if (r->ident_len == ident_len && !memcmp(r->ident, ident, (size_t)ident_len)) {
            r->gone = true;
            rt->gone_pending = true;
        }
}

void relay_reap(router_t *rt)
{
    if (!rt->gone_pending)
        return;
    rt->gone_pending = false;
    rq_t *next;
    for (rq_t *r = rq_first(rt->rqs); r; r = next) {
        next = rq_next(rt->rqs, r);
        if (r->gone) /* nothing is sent to a gone client: this only ends and counts it */
            relay_abort(rt, r, "disconnected");
    }
}

void relay_deadlines(router_t *rt, int64_t now_us)
{
    rq_t *r;
    while ((r = rq_next_deadline(rt->rqs)) && r->deadline_us <= now_us)
        relay_abort(rt, r, "deadline_exceeded");
}
