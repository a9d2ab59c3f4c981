/* SPDX-License-Identifier: Apache-2.0 */
/* bench_zmq.c - `deras bench` over the client protocol: one ZeroMQ socket (the C client,
 * tools/client/deras_client.h), every request streaming, events drained as they come.
 * A chunk's token ids are its tokens; a final brings the usage (prompt tokens,
 * speculation); --timeout of silence cancels and forgets a request. Ctrl-C cancels what
 * is in flight and waits up to 5 s for the aborts. Costs: O(1) per event; the expiry scan
 * O(requests sent) per tick. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "tools/bench.h"
#include "tools/client/deras_client.h"

static int send_next(bench *b, deras_client_t *cl)
{
    const bench_args *a = b->a;
    int i = b->next++;
    req_state *r = &b->r[i];
    proto_request q = a->f.req;
    json_t *messages = NULL;
    q.id[0] = '\0';
    if (r->ids) {
        q.prompt_ids = r->ids;
        q.n_prompt_ids = r->n_ids;
    } else if (a->chat) {
        if (!(q.messages = messages = deras_client_chat_turn(NULL, r->prompt)))
            return deras_fail(DERAS_ENOMEM, "%s", deras_errmsg());
    } else {
        q.prompt = r->prompt;
        q.prompt_len = strlen(r->prompt);
    }
    q.params.max_tokens = r->max_tokens;
    q.stream = true;
    if (a->has_seed) {
        q.has_seed = true;
        q.params.seed = a->seed + (uint64_t)i;
    }
    r->t_send = r->t_heard = bench_now(b);
    r->state = RS_LIVE;
    b->n_live++;
    int rc = deras_client_send(cl, &q, r);
    json_decref(messages);
    if (rc) {
        if (b->n_err[ERR_CLIENT] == 0)
            fprintf(stderr, "bench: request %d: %s\n", i, deras_errmsg());
        bench_finish(b, r, false, ERR_CLIENT, r->t_send);
        return rc == DERAS_EINVAL || rc == DERAS_ENOMEM ? rc : DERAS_OK;
    }
    memcpy(r->id, q.id, sizeof r->id);
    return DERAS_OK;
}

static void on_event(bench *b, const deras_event *ev, double t)
{
    if (!ev->known) {
        b->n_stray++;
        return;
    }
    req_state *r = ev->user;
    const proto_server_msg *m = &ev->msg;
    r->t_heard = t;
    switch (m->type) {
    case PROTO_CHUNK:
        if (m->n_token_ids > 0)
            bench_tokens(b, r, m->n_token_ids, t);
        break;
    case PROTO_FINAL:
        r->prompt_tokens = m->usage.prompt_tokens;
        spec_counters_add(&b->spec, &m->usage.spec);
        b->spec_samples += spec_counters_any(&m->usage.spec);
        if (m->finish == FINISH_ERROR)
            r->bad_finish = ERR_FINISH;
        else if (m->finish == FINISH_ABORT && !r->bad_finish)
            r->bad_finish = ERR_ABORT;
        if (r->n_tokens == 0 && m->usage.completion_tokens > 0) { /* a router without chunks */
            r->n_tokens = m->usage.completion_tokens;
            b->out_tokens += r->n_tokens;
        }
        if (ev->done)
            bench_finish(b, r, !r->bad_finish, r->bad_finish, t);
        break;
    case PROTO_ERROR:
        if (b->n_err[m->code] == 0)
            fprintf(stderr, "bench: request %s: %s: %s\n", r->id, proto_error_name(m->code),
                    m->message);
        bench_finish(b, r, false, m->code, t);
        break;
    default: break;
    }
}

/* Requests silent for --timeout: cancelled, forgotten, failed. O(requests sent). */
static void expire(bench *b, deras_client_t *cl, double t)
{
    for (int i = 0; i < b->next; i++) {
        req_state *r = &b->r[i];
        if (r->state != RS_LIVE || t - r->t_heard < b->a->f.timeout_s)
            continue;
        deras_client_cancel(cl, r->id);
        deras_client_forget(cl, r->id);
        if (b->n_err[ERR_TIMEOUT] == 0)
            fprintf(stderr, "bench: request %s: no event for %.3g s, counted as failed\n",
                    r->id, b->a->f.timeout_s);
        bench_finish(b, r, false, ERR_TIMEOUT, t);
    }
}

static int run(bench *b, deras_client_t *cl)
{
    const bench_args *a = b->a;
    int rc = DERAS_OK;
    bool stopping = false;
    double stop_at = 0;
    while (b->n_done < a->n_requests) {
        double t = bench_now(b);
        if (bench_interrupted && !stopping) {
            stopping = true;
            stop_at = t;
            fprintf(stderr, "bench: interrupted: cancelling %d requests in flight\n", b->n_live);
            for (int i = 0; i < b->next; i++)
                if (b->r[i].state == RS_LIVE)
                    deras_client_cancel(cl, b->r[i].id);
        }
        if (stopping && (b->n_live == 0 || t - stop_at > 5))
            break;
        while (!stopping && bench_due(b, t))
            if ((rc = send_next(b, cl)))
                return rc;
        deras_event ev;
        rc = deras_client_recv(cl, stopping ? BENCH_TICK_MS : bench_wait_ms(b), &ev);
        while (rc == DERAS_OK) { /* drain what is there before sending more */
            on_event(b, &ev, bench_now(b));
            rc = deras_client_recv(cl, 0, &ev);
        }
        if (rc != DERAS_ETIMEOUT)
            return rc;
        rc = DERAS_OK;
        t = bench_now(b);
        expire(b, cl, t);
        bench_tick(b, t);
    }
    return rc;
}

int bench_run_zmq(bench *b)
{
    deras_client_t *cl;
    int rc = client_flags_connect(&b->a->f, b->cap, &cl);
    if (rc)
        return rc;
    snprintf(b->target, sizeof b->target, "%s", b->a->f.address);
    b->t0 = cli_now();
    b->t_progress = BENCH_PROGRESS_S;
    rc = run(b, cl);
    deras_client_destroy(&cl);
    return rc;
}
