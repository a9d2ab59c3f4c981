/* SPDX-License-Identifier: Apache-2.0 */
/* server.c - the worker's serving loop (see server.h); the router link is link.c.
 *
 * One thread, one DEALER socket, one engine (plus the pulse thread, worker/pulse.h, which
 * heartbeats only while a single step runs longer than the interval). Each turn of the loop polls the socket and
 * the stop fd - with timeout 0 while the engine has work, else until the next heartbeat
 * or deadline, so an idle worker sleeps - then handles at most RECV_BATCH router messages,
 * runs one engine step and sends what the step produced as one STEP frame. The engine's
 * callbacks append to that frame in a reusable encoder (a second encoder builds the other
 * messages, so a REJECT never clobbers a half-built STEP); tokens are never sent one by one.
 *
 * The server keeps its own table of the requests in the engine (rid, samples, samples
 * finished): the engine has no "abort everything" and the table is also what a router
 * restart and a drain timeout walk. Entries come and go in engine_add and on_finish;
 * the table is sized max_live_seqs at start (every request holds at least one sequence).
 *
 * The link has three states: HELLO_FIRST (waiting for the first WELCOME; a timeout or a
 * REFUSE ends the run), READY, and REJOIN (the router forgot us: HELLO again every
 * handshake timeout until WELCOME; REFUSEs here are logged, not fatal, because replies to
 * frames sent before the new HELLO may still be arriving).
 *
 * Sends never block: a full queue (router gone for long) drops the frame with one warning
 * per outage - the router cannot use stale STEPs, and blocking would stall the engine and
 * the signal handling with it.
 *
 * Leaving. The last frame to a router that knows us is BYE with the reason: after a clean
 * stop nothing was in flight; after a second stop, a drain timeout or an engine failure
 * the requests still here are dropped without reporting them, and the router, told by the
 * BYE, re-dispatches those whose client heard nothing yet and ends the others with
 * worker_failed naming the reason - at once, not after its silence timeout.
 *
 * systemd (common/service/sdnotify.h): READY=1 at the first WELCOME, STOPPING=1 when a stop
 * begins, WATCHDOG=1 from this loop between steps (never from the pulse thread: a step
 * that never ends must get the process killed).
 */
#include "server.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "common/wire/zmq_check.h"
#include "common/wire/zmq_curve.h"
#include "engine/step_plan.h"
#include "worker/server_internal.h"

double server_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- engine callbacks: build the STEP frame ---- */

static void live_finish_one(worker_server_t *s, uint64_t rid)
{
    for (int i = 0; i < s->n_live; i++) {
        if (s->live[i].rid != rid)
            continue;
        if (++s->live[i].n_done == s->live[i].n)
            s->live[i] = s->live[--s->n_live];
        return;
    }
}

/* The wire refuses NaN and +inf logprobs (the router would drop the whole STEP). Only a
 * broken model makes them; report them as -inf, say so once, and keep serving. */
static float wire_logprob(worker_server_t *s, float x)
{
    if (!isnan(x) && x != INFINITY)
        return x;
    if (!s->warned_logprob)
        log_warn("the model produced a %s logprob (NaN logits?); sent as -inf", isnan(x) ? "NaN"
                                                                                         : "+inf");
    s->warned_logprob = true;
    return -INFINITY;
}

static void on_token(void *ctx, uint64_t id, int index, const sample_result *r)
{
    worker_server_t *s = ctx;
    if (s->silent || s->cb_err)
        return;
    wp_token t;
    t.rid = id;
    t.index = index;
    t.lp.token_id = r->token;
    t.lp.logprob = wire_logprob(s, r->logprob);
    t.lp.n_top = r->n_top;
    for (int k = 0; k < r->n_top; k++) {
        t.lp.top_ids[k] = r->top_ids[k];
        t.lp.top_logprobs[k] = wire_logprob(s, r->top_logprobs[k]);
    }
    s->cb_err = wp_step_add_token(s->step_enc, &t);
}

/* A request the engine ended with an error: a REJECT after this step's STEP (once per
 * request, whatever its samples), its finishes left out. */
static void fail_once(worker_server_t *s, uint64_t rid, enum proto_error_code code)
{
    for (int i = 0; i < s->n_failed; i++)
        if (s->failed[i].rid == rid)
            return;
    failed_req *f = &s->failed[s->n_failed++];
    f->rid = rid;
    f->code = code;
    snprintf(f->msg, sizeof f->msg, "%s", deras_errmsg());
}

static void on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    worker_server_t *s = ctx;
    live_finish_one(s, id);
    if (s->silent || s->cb_err)
        return;
    if (end->error != PE_NONE) {
        fail_once(s, id, end->error);
        return;
    }
    wp_finish f = {.rid = id, .index = index, .reason = end->why, .n_prompt = end->n_prompt,
                   .n_generated = end->n_generated, .spec = end->spec};
    s->cb_err = wp_step_add_finish(s->step_enc, &f);
}

/* ---- requests ---- */

/* End every request in the engine without reporting them: a restarted router never heard
 * of them, and a BYE tells the router to settle what it held. */
void server_abort_all(worker_server_t *s)
{
    s->silent = true;
    while (s->n_live > 0) {
        int before = s->n_live;
        uint64_t rid = s->live[before - 1].rid;
        if (engine_abort(s->e, rid) != DERAS_OK || s->n_live == before) {
            log_error("request %llu was in the worker's table but not in the engine",
                      (unsigned long long)rid);
            s->n_live = before - 1;
        }
    }
    s->silent = false;
}

static int handle_submit(worker_server_t *s, const wp_submit *q)
{
    char msg[256];
    if (s->stopping || s->draining) {
        snprintf(msg, sizeof msg, "worker %s is %s and takes no new requests", s->name,
                 s->stopping ? "shutting down" : "draining");
        return link_send_reject(s, q->rid, PE_BUSY, msg);
    }
    /* checked here rather than read out of the engine's message: its own code on the wire */
    for (int i = 0; i < q->n_prompt; i++)
        if (q->prompt_ids[i] < 0 || q->prompt_ids[i] >= s->vocab) {
            snprintf(msg, sizeof msg, "prompt token %d is %d, outside the vocabulary [0, %d)", i,
                     (int)q->prompt_ids[i], s->vocab);
            return link_send_reject(s, q->rid, PE_TOKEN_OUT_OF_RANGE, msg);
        }
    engine_request r = {.id = q->rid, .prompt = q->prompt_ids, .n_prompt = q->n_prompt,
                        .params = q->params};
    int rc;
    if (q->grammar && (rc = gcache_get(s->grammars, q->grammar, q->grammar_len, &r.grammar))) {
        log_debug("request %llu: grammar refused: %s", (unsigned long long)q->rid,
                  deras_errmsg());
        snprintf(msg, sizeof msg, "grammar: %s", deras_errmsg());
        return link_send_reject(s, q->rid, rc == DERAS_ENOMEM ? PE_INTERNAL : PE_INVALID_GRAMMAR,
                                msg);
    }
    rc = engine_add(s->e, &r);
    if (rc) {
        log_debug("request %llu rejected: %s", (unsigned long long)q->rid, deras_errmsg());
        return link_send_reject(s, q->rid, proto_error_of_status(rc), deras_errmsg());
    }
    /* the engine holds at most max_live_seqs requests, so the table has room */
    s->live[s->n_live++] = (live_req){.rid = q->rid, .n = q->params.n, .n_done = 0};
    return DERAS_OK;
}

/* The REJECTs of the requests the engine ended with an error, after the STEP that holds
 * their last tokens. */
static int send_failed(worker_server_t *s)
{
    int rc = DERAS_OK;
    for (int i = 0; i < s->n_failed && !rc; i++)
        rc = link_send_reject(s, s->failed[i].rid, s->failed[i].code, s->failed[i].msg);
    s->n_failed = 0;
    return rc;
}

static void begin_stop(worker_server_t *s, double t, const char *why)
{
    if (s->stopping)
        return;
    s->stopping = true;
    s->stop_deadline = t + s->o.drain_timeout_s;
    s->next_heartbeat = t; /* the router hears our load, and that we stop, at once */
    log_info("%s: finishing %d request%s in flight (at most %g s), taking no new ones", why,
             s->n_live, s->n_live == 1 ? "" : "s", s->o.drain_timeout_s);
    sdnotify_stopping("%s: finishing %d requests in flight", why, s->n_live);
}

/* The last frame: BYE with the reason, to a router that knows us. What is still in the
 * engine is dropped unreported first (the router ends or re-dispatches it on the BYE). */
static int say_bye(worker_server_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int say_bye(worker_server_t *s, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    server_abort_all(s);
    return link_send_bye(s, why);
}

int server_handle(worker_server_t *s, const wp_msg *m, double t)
{
    switch (m->type) {
    case WP_SUBMIT:
        return handle_submit(s, &m->submit);
    case WP_ABORT:
        if (engine_abort(s->e, m->rid) != DERAS_OK) /* already finished: its STEP is on the way */
            log_debug("abort of request %llu, which is not live", (unsigned long long)m->rid);
        return DERAS_OK;
    case WP_DRAIN:
        if (!s->draining)
            log_info("DRAIN from the router: taking no new requests, %d in flight", s->n_live);
        s->draining = true;
        return DERAS_OK;
    case WP_SHUTDOWN:
        begin_stop(s, t, "SHUTDOWN from the router");
        return DERAS_OK;
    default:
        log_warn("message of type %d is not for a worker; ignored", (int)m->type);
        return DERAS_OK;
    }
}


static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "stop byte";
    }
}

/* Bytes on stop_fd: the first begins a stop, the second stops now (its name in now_sig). */
static int read_stops(worker_server_t *s, double t, const char **now_sig)
{
    unsigned char buf[16];
    ssize_t n = read(s->o.stop_fd, buf, sizeof buf);
    if (n < 0)
        return errno == EINTR || errno == EAGAIN
                   ? DERAS_OK
                   : deras_fail(DERAS_EIO, "reading the stop fd: %s", strerror(errno));
    for (ssize_t i = 0; i < n; i++) {
        char why[64];
        snprintf(why, sizeof why, "stop requested (%s)", signal_name(buf[i]));
        if (++s->n_stops == 1) {
            begin_stop(s, t, why);
        } else {
            log_warn("%s again: dropping %d request%s and exiting now", why, s->n_live,
                     s->n_live == 1 ? "" : "s");
            *now_sig = signal_name(buf[i]);
        }
    }
    return DERAS_OK;
}

/* TEST-ONLY (worker_opts.test_step_delay_ms): the step takes ms longer, inside the pulse's
 * window like real work, and signals do not cut it short (they wait for the step's end, as
 * they do during a long forward pass). */
static void test_step_delay(int ms)
{
    struct timespec left = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&left, &left) && errno == EINTR)
        ;
}

static long poll_timeout_ms(const worker_server_t *s, double t)
{
    if (engine_has_work(s->e) && !s->stalled)
        return 0;
    double until = s->link == LINK_READY ? s->next_heartbeat : s->hello_deadline;
    if (s->stopping && s->stop_deadline < until)
        until = s->stop_deadline;
    if (s->wd.period_us && (double)s->wd.next_us * 1e-6 < until)
        until = (double)s->wd.next_us * 1e-6;
    double ms = ceil((until - t) * 1000.0);
    return ms < 0 ? 0 : ms > MAX_POLL_MS ? MAX_POLL_MS : (long)ms;
}

static int serve(worker_server_t *s)
{
    zmq_pollitem_t items[2] = {{s->sock, 0, ZMQ_POLLIN, 0}, {NULL, s->o.stop_fd, ZMQ_POLLIN, 0}};
    int n_items = s->o.stop_fd >= 0 ? 2 : 1;
    int rc;
    sdnotify_watchdog_init(&s->wd, (int64_t)(server_now() * 1e6));
    for (;;) {
        double t = server_now();
        sdnotify_watchdog_tick(&s->wd, (int64_t)(t * 1e6));
        if (zmq_poll(items, n_items, poll_timeout_ms(s, t)) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            return zmq_check_fail("zmq_poll(items, n_items, timeout)", __FILE__, __LINE__);
        }
        t = server_now();
        if ((rc = group_check(s->group))) { /* a rank died: the group cannot step */
            char saved[256];
            snprintf(saved, sizeof saved, "%s", deras_errmsg());
            log_error("tensor-parallel group failed: %s; dropping every request", saved);
            say_bye(s, "its tensor-parallel group failed: %s", saved);
            return deras_fail(rc, "tensor-parallel group failed: %s", saved);
        }
        const char *stop_now = NULL;
        if (n_items == 2 && (items[1].revents & ZMQ_POLLIN) && (rc = read_stops(s, t, &stop_now)))
            return rc;
        if (stop_now)
            return say_bye(s, "stopped at once by a second %s with %d request%s in flight",
                           stop_now, s->n_live, s->n_live == 1 ? "" : "s");
        if ((items[0].revents & ZMQ_POLLIN) && (rc = link_recv(s, t)))
            return rc;

        if (s->link != LINK_READY && t >= s->hello_deadline) {
            if (s->link == LINK_HELLO_FIRST && !s->stopping)
                return deras_fail(DERAS_ETIMEOUT,
                                  "no WELCOME from the router at %s within %g s: is deras-router "
                                  "running, is --router the address it binds for workers (its "
                                  "--workers option), and can this process reach it?",
                                  s->router, s->o.handshake_timeout_s);
            if (s->link == LINK_REJOIN) {
                if (!s->hello_dropped)
                    log_warn("no WELCOME from the router at %s within %g s; HELLO again",
                             s->router, s->o.handshake_timeout_s);
                if ((rc = link_send_hello(s, t)))
                    return rc;
            }
        }
        if (s->stopping && s->n_live > 0 && t >= s->stop_deadline) {
            log_warn("drain timeout (%g s): dropping %d request%s still in flight and exiting",
                     s->o.drain_timeout_s, s->n_live, s->n_live == 1 ? "" : "s");
            return say_bye(s, "its drain timeout (%g s) ran out with %d request%s in flight",
                           s->o.drain_timeout_s, s->n_live, s->n_live == 1 ? "" : "s");
        }
        if (engine_has_work(s->e)) { /* stalled: retried only as often as the poll wakes */
            int n_tokens = 0;
            if (s->link == LINK_READY) {
                /* the pulse repeats this heartbeat if the step outlasts the interval */
                wp_load l;
                link_load(s, t, &l);
                const void *hb;
                size_t hb_len;
                if (wp_encode_heartbeat(s->msg_enc, &l, &hb, &hb_len) == DERAS_OK)
                    pulse_step_begin(s->pulse, hb, hb_len, s->heartbeat_ms);
            }
            if (s->o.test_step_delay_ms > 0)
                test_step_delay(s->o.test_step_delay_ms);
            rc = engine_step(s->e, &n_tokens);
            pulse_step_end(s->pulse);
            if (rc) {
                char saved[256];
                snprintf(saved, sizeof saved, "%s", deras_errmsg());
                log_error("engine step failed: %s; dropping every request", saved);
                link_flush_step(s, t); /* what the step made before it failed */
                if (s->group) /* the followers stop at once instead of waiting for a plan */
                    group_abort(s->group, saved);
                say_bye(s, "its engine step failed: %s", saved);
                return deras_fail(rc, "engine step failed: %s", saved);
            }
            s->stalled = n_tokens == 0;
        }
        if ((rc = link_flush_step(s, t)) || (rc = send_failed(s)))
            return rc;
        if (s->link == LINK_READY && t >= s->next_heartbeat) {
            if ((rc = link_send_heartbeat(s, t)))
                return rc;
            double next = s->next_heartbeat + s->heartbeat_ms / 1000.0;
            s->next_heartbeat = next > t ? next : t + s->heartbeat_ms / 1000.0;
        }
        if (s->stopping && !engine_has_work(s->e)) {
            log_info("stopped: nothing in flight");
            return say_bye(s, "stopped, nothing in flight");
        }
    }
}

/* The warm-up: one forward step of a short dummy prompt through the engine (first-touch
 * costs - weight pages, scratch buffers, kernel set-up - are paid here, not by the first
 * client), then its KV blocks are freed. Runs after HELLO, so the router shows the worker
 * "starting" meanwhile; the pulse keeps it alive through a long first step. Its callbacks
 * report nothing and its counts are left out of every load report. */
#define WARMUP_RID UINT64_MAX /* never a router rid: those count up from 1 */
static int warm_up(worker_server_t *s)
{
    int32_t prompt[4];
    for (int i = 0; i < 4; i++)
        prompt[i] = (int32_t)(i + 1 < s->vocab ? i + 1 : 0);
    engine_request r = {.id = WARMUP_RID, .prompt = prompt, .n_prompt = 4};
    req_params_init(&r.params);
    r.params.max_tokens = 1;
    r.params.ignore_eos = true;
    sampling_params_default(&r.params.sp);
    double t0 = server_now();
    s->silent = true;
    int rc = engine_add(s->e, &r);
    wp_load l;
    link_load(s, t0, &l);
    const void *hb;
    size_t hb_len;
    bool pulse = rc == DERAS_OK && wp_encode_heartbeat(s->msg_enc, &l, &hb, &hb_len) == DERAS_OK;
    while (rc == DERAS_OK && engine_has_work(s->e)) {
        int n_tokens = 0;
        if (pulse)
            pulse_step_begin(s->pulse, hb, hb_len, s->o.heartbeat_ms);
        rc = engine_step(s->e, &n_tokens);
        pulse_step_end(s->pulse);
        if (rc == DERAS_OK && n_tokens == 0)
            rc = deras_fail(DERAS_EINTERNAL, "the warm-up request could not be scheduled");
    }
    if (engine_has_work(s->e))
        engine_abort(s->e, WARMUP_RID);
    s->silent = false;
    wp_step_begin(s->step_enc);
    if (rc)
        return deras_fail_ctx(rc, "warm-up step: ");
    engine_get_stats(s->e, &s->warm_base);
    s->warm = true;
    log_info("warm-up step done in %.3f s: ready", server_now() - t0);
    return DERAS_OK;
}

int worker_server_run(worker_server_t *s)
{
    if (!s)
        return deras_fail(DERAS_EINVAL, "worker_server_run: NULL server");
    if (s->zctx)
        return deras_fail(DERAS_EINVAL, "worker_server_run: called twice");
    int rc, linger = LINGER_MS;
    if ((rc = ZMQ_CHECK_PTR(s->zctx, zmq_ctx_new())) ||
        (rc = ZMQ_CHECK_PTR(s->sock, zmq_socket(s->zctx, ZMQ_DEALER))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(s->sock, ZMQ_ROUTING_ID, s->name, strlen(s->name)))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger))) ||
        (s->o.curve_server_key &&
         (rc = zmq_curve_client(s->sock, s->o.curve_server_key, s->o.curve_secret_key))) ||
        (rc = ZMQ_CHECK(zmq_connect(s->sock, s->router))))
        return deras_fail_ctx(rc, "router endpoint %s: ", s->router);
    if ((rc = ZMQ_CHECK(zmq_msg_init(&s->rx))))
        return rc;
    s->rx_open = true;
    if ((rc = pulse_start(s->zctx, s->router, s->name, s->o.curve_server_key,
                          s->o.curve_secret_key, &s->pulse)))
        return rc;
    log_info("worker %s: saying HELLO to the router at %s", s->name, s->router);
    s->link = LINK_HELLO_FIRST;
    s->heartbeat_ms = s->o.heartbeat_ms;
    wp_step_begin(s->step_enc);
    if (s->o.test_step_delay_ms > 0)
        log_warn("DERAS_TEST_STEP_DELAY_MS=%d: every serving step sleeps %d ms (a test-only "
                 "setting: unset it outside the test suite)",
                 s->o.test_step_delay_ms, s->o.test_step_delay_ms);
    if ((rc = link_send_hello(s, server_now())) || (rc = warm_up(s)))
        return rc;
    return serve(s);
}

/* ---- construction ---- */

static void progress_log(void *ctx, int done, int total)
{
    int *last = ctx;
    int pct = total > 0 ? done * 100 / total : 100;
    if (pct / 25 != *last / 25 || done == total) {
        log_info("loading weights: %3d%% (%d/%d)", pct, done, total);
        *last = pct;
    }
}

/* The engine through the loader; a tensor-parallel leader first opens the group (the
 * followers load their shards meanwhile) and waits for them before the engine. */
static int load_engine(worker_server_t *s, const spec_opts *so)
{
    int progress_last = -100; /* read while the model loads, inside this function */
    loader_opts lo = {.model = s->model, .device = s->device, .threads = s->o.threads,
                      .block_size = s->o.block_size, .kv_dtype = s->kv_dtype,
                      .max_seqs = s->o.max_seqs, .matmul_mode = s->o.matmul_mode,
                      .max_batch_tokens = s->o.max_batch_tokens,
                      .max_live_seqs = s->o.max_live_seqs, .prefix_caching = s->o.prefix_caching,
                      .spec = *so, .log = true, .progress = progress_log,
                      .progress_ctx = &progress_last, .weight_format = s->o.weight_format};
    int rc;
    if ((rc = loader_open(&lo, &s->ld)) || (rc = loader_size_budget(s->ld, s->kv_spec)))
        return rc;
    model_opts *mo = loader_model_opts(s->ld);
    if (s->o.tp_size > 1) {
        group_opts go = {.name = s->name, .rank = 0, .size = s->o.tp_size,
                         .timeout_s = s->o.tp_timeout_s};
        size_t plan = step_plan_bytes(mo->max_batch_tokens, mo->max_seqs, mo->max_blocks_per_seq,
                                      mo->max_seqs, mo->max_seqs);
        if ((rc = group_lead(&go, loader_config(s->ld), mo, plan, &s->group)))
            return rc;
        mo->tp_rank = 0;
        mo->tp_size = s->o.tp_size;
        mo->comm = group_comm(s->group);
    }
    if ((rc = loader_build_model(s->ld)) || (s->group && (rc = group_wait_ready(s->group))))
        return rc;
    model_t *m = loader_model(s->ld);
    log_info("%s%.1f MiB of weights (%.1f MiB used in place from the file mapping), %.1f MiB "
             "of KV cache", s->group ? "rank 0: " : "", model_weight_bytes(m) / 1048576.0,
             model_mapped_bytes(m) / 1048576.0, model_kv_bytes(m) / 1048576.0);
    engine_callbacks cb = {on_token, on_finish, s};
    if ((rc = loader_build_engine(s->ld, &cb, s->group ? group_publish : NULL, s->group)))
        return rc;
    s->e = loader_engine(s->ld);
    s->vocab = model_get_config(m)->vocab_size;
    /* structured output: the vocabulary's trie, once */
    const tokenizer_t *tok;
    engine_opts eo;
    double t0 = server_now();
    if ((rc = loader_tokenizer(s->ld, &tok)) || (rc = loader_engine_opts(s->ld, &eo)) ||
        (rc = gcache_new(tok, s->vocab, eo.eog_ids, eo.n_eog, 0, &s->grammars)))
        return rc;
    log_debug("structured output: vocabulary trie of %d tokens in %.0f ms", s->vocab,
              (server_now() - t0) * 1e3);
    return DERAS_OK;
}

int worker_server_new(const worker_opts *o, worker_server_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "worker_server_new: NULL out");
    *out = NULL;
    int rc = worker_opts_check(o);
    if (rc)
        return rc;
    worker_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    s->o = *o;
    snprintf(s->model, sizeof s->model, "%s", o->model);
    snprintf(s->device, sizeof s->device, "%s", o->device);
    snprintf(s->kv_spec, sizeof s->kv_spec, "%s", o->kv_cache_memory);
    snprintf(s->kv_dtype, sizeof s->kv_dtype, "%s", o->kv_dtype ? o->kv_dtype : "");
    snprintf(s->spec_proposer, sizeof s->spec_proposer, "%s",
             o->spec_proposer ? o->spec_proposer : "none");
    if (o->name)
        snprintf(s->name, sizeof s->name, "%s", o->name);
    else
        snprintf(s->name, sizeof s->name, "w%ld", (long)getpid());
    if (o->router)
        snprintf(s->router, sizeof s->router, "%s", o->router);
    else if ((rc = endpoints_default_workers(s->router, sizeof s->router)))
        goto fail;
    s->o.model = s->model;
    s->o.device = s->device;
    s->o.kv_cache_memory = s->kv_spec;
    s->o.kv_dtype = s->kv_dtype;
    s->o.name = s->name;
    s->o.spec_proposer = s->spec_proposer;
    s->o.router = s->router;
    if (!s->o.max_live_seqs)
        s->o.max_live_seqs = 4 * s->o.max_seqs;
    spec_opts so;
    if ((rc = worker_opts_spec(&s->o, &so)) || (rc = load_engine(s, &so)))
        goto fail;
    s->live = calloc((size_t)s->o.max_live_seqs, sizeof *s->live);
    s->failed = calloc((size_t)s->o.max_live_seqs, sizeof *s->failed);
    if (!s->live || !s->failed) {
        rc = deras_fail(DERAS_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = wp_decoder_new(MAX_FRAME, &s->dec)) || (rc = wp_encoder_new(&s->step_enc)) ||
        (rc = wp_encoder_new(&s->msg_enc)))
        goto fail;
    wp_hello *h = &s->hello;
    snprintf(h->name, sizeof h->name, "%s", s->name);
    snprintf(h->device, sizeof h->device, "%s", backend_name(loader_backend(s->ld)));
    size_t mlen = strlen(s->model), keep = sizeof h->model - 1; /* the end names the model */
    memcpy(h->model, mlen > keep ? s->model + mlen - keep : s->model, (mlen > keep ? keep : mlen) + 1);
    h->vocab_size = s->vocab;
    h->max_model_len = loader_max_model_len(s->ld);
    h->tp_size = s->o.tp_size;
    h->kv_blocks_total = loader_kv(s->ld)->n_blocks - 1;
    h->block_size = s->o.block_size;
    h->max_seqs = s->o.max_seqs;
    h->pid = (int32_t)getpid();
    snprintf(h->spec, sizeof h->spec, "%s", spec_kind_name(so.kind));
    *out = s;
    return DERAS_OK;
fail:
    if (s->group)
        group_abort(s->group, deras_errmsg());
    worker_server_destroy(&s);
    return rc;
}

void worker_server_destroy(worker_server_t **sp)
{
    if (!sp || !*sp)
        return;
    worker_server_t *s = *sp;
    if (s->rx_open)
        zmq_msg_close(&s->rx);
    pulse_stop(&s->pulse);
    if (s->sock)
        zmq_close(s->sock);
    if (s->zctx)
        while (zmq_ctx_term(s->zctx) == -1 && zmq_errno() == EINTR)
            ;
    wp_encoder_destroy(&s->msg_enc);
    wp_encoder_destroy(&s->step_enc);
    wp_decoder_destroy(&s->dec);
    free(s->live);
    free(s->failed);
    /* STOP to the followers (unless the group failed), then the engine, models and backend:
     * the model only borrowed the group's communicator, and destroying it uses none */
    group_destroy(&s->group);
    loader_destroy(&s->ld); /* the engine's matchers hold the grammars: the engine first */
    gcache_destroy(&s->grammars);
    free(s);
    *sp = NULL;
}

const char *worker_server_name(const worker_server_t *s)
{
    return s ? s->name : "";
}

const char *worker_server_router(const worker_server_t *s)
{
    return s ? s->router : "";
}

const kv_sizing *worker_server_kv(const worker_server_t *s)
{
    return s ? loader_kv(s->ld) : NULL;
}
