/* server.c - the worker's event loop (see server.h).
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
#include <zmq.h>

#include "common/checkpoint/checkpoint.h"
#include "common/wire/endpoints.h"
#include "common/checkpoint/kv_math.h"
#include "common/base/log.h"
#include "common/service/sdnotify.h"
#include "common/base/status.h"
#include "common/tokenizer/tokenizer.h"
#include "common/wire/worker_proto.h"
#include "common/wire/zmq_check.h"
#include "kernels/backend.h"
#include "engine/engine.h"
#include "worker/group.h"
#include "engine/model.h"
#include "worker/pulse.h"
#include "engine/spec_draft.h"
#include "engine/step_plan.h"

#define MAX_FRAME (16u << 20) /* bound on a frame from the router */
#define RECV_BATCH 256        /* router messages handled between two engine steps */
#define RATE_SAMPLES 21       /* tokens/s window: samples >= RATE_SPACING_S apart, ~10 s */
#define RATE_SPACING_S 0.5
#define LINGER_MS 500         /* what close waits for unsent frames */
#define MAX_POLL_MS 1000      /* an idle poll still wakes this often (deadlines are rechecked) */
#define HELLO_RETRY_S 0.1     /* REJOIN: a HELLO that could not be queued is sent again this soon */

typedef struct live_req {
    uint64_t rid;
    int n, n_done;
} live_req;

enum link_state { LINK_HELLO_FIRST, LINK_READY, LINK_REJOIN };

struct worker_server {
    char model[4096], router[ENDPOINT_MAX], name[WPROTO_MAX_NAME + 1], device[32], kv_spec[64];
    char spec_proposer[4096];
    worker_opts o;              /* strings point at the copies above */
    backend_t *be;
    group_t *group;             /* tensor-parallel leader: the followers' segment; else NULL */
    model_t *m;
    model_t *drafter;           /* speculative decoding's draft model, or NULL */
    engine_t *e;
    int32_t *eog;
    kv_sizing kvs;
    int vocab;
    wp_hello hello;

    void *zctx, *sock;
    pulse_t *pulse;             /* heartbeats from a side thread while a step runs long */
    zmq_msg_t rx;
    bool rx_open;
    wp_decoder *dec;
    wp_encoder *step_enc, *msg_enc;
    wp_msg in;                  /* the message being handled (too big for the stack) */

    live_req *live;             /* (max_live_seqs) requests in the engine */
    int n_live;
    bool silent;                /* callbacks report nothing (aborts the router can't know) */
    int cb_err;                 /* first encoder failure inside a callback */
    bool warned_logprob;

    enum link_state link;
    double hello_deadline;      /* HELLO_FIRST: give up; REJOIN: say HELLO again */
    bool hello_dropped;         /* REJOIN: the last HELLO could not be queued */
    int n_refused;              /* REFUSEs while in REJOIN (only the first is logged) */
    int heartbeat_ms;
    double next_heartbeat;

    bool warm;                  /* the warm-up step ran: the load says "ready" */
    engine_stats warm_base;     /* the engine's counters after warm-up, left out of the load */
    bool draining;              /* DRAIN: REJECT new SUBMITs */
    bool stopping;              /* SHUTDOWN or a signal: return once idle */
    double stop_deadline;
    int n_stops;                /* bytes read from stop_fd */
    bool stalled;               /* the last step could run nothing: don't spin on it */
    sdnotify_watchdog wd;       /* systemd's, pinged between steps */

    double rate_t[RATE_SAMPLES];
    uint64_t rate_gen[RATE_SAMPLES];
    int rate_head, rate_n;
    uint64_t n_dropped;         /* frames dropped in the current outage */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- engine callbacks: build the STEP frame ---- */

static void live_finish_one(worker_server *s, uint64_t rid)
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
static float wire_logprob(worker_server *s, float x)
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
    worker_server *s = ctx;
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

static void on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    worker_server *s = ctx;
    live_finish_one(s, id);
    if (s->silent || s->cb_err)
        return;
    wp_finish f = {.rid = id, .index = index, .reason = end->why, .n_prompt = end->n_prompt,
                   .n_generated = end->n_generated, .spec = end->spec};
    s->cb_err = wp_step_add_finish(s->step_enc, &f);
}

/* ---- load ---- */

/* Generated tokens per second over the last ~10 s of samples. */
static double gen_rate(worker_server *s, uint64_t generated, double t)
{
    int last = (s->rate_head + RATE_SAMPLES - 1) % RATE_SAMPLES;
    if (s->rate_n == 0 || t - s->rate_t[last] >= RATE_SPACING_S) {
        s->rate_t[s->rate_head] = t;
        s->rate_gen[s->rate_head] = generated;
        s->rate_head = (s->rate_head + 1) % RATE_SAMPLES;
        if (s->rate_n < RATE_SAMPLES)
            s->rate_n++;
    }
    int oldest = (s->rate_head + RATE_SAMPLES - s->rate_n) % RATE_SAMPLES;
    double dt = t - s->rate_t[oldest];
    return dt > 1e-3 ? (double)(generated - s->rate_gen[oldest]) / dt : 0.0;
}

static void get_load(worker_server *s, double t, wp_load *l)
{
    engine_stats st;
    engine_get_stats(s->e, &st);
    memset(l, 0, sizeof *l);
    l->phase = !s->warm ? WP_PHASE_STARTING
               : s->draining || s->stopping ? WP_PHASE_DRAINING : WP_PHASE_READY;
    /* the warm-up request is not served work: its counts stay out of the report */
    st.steps -= s->warm_base.steps;
    st.prompt_tokens -= s->warm_base.prompt_tokens;
    st.generated_tokens -= s->warm_base.generated_tokens;
    st.prefix_hit_tokens -= s->warm_base.prefix_hit_tokens;
    st.prefix_query_tokens -= s->warm_base.prefix_query_tokens;
    st.preemptions -= s->warm_base.preemptions;
    l->running = st.n_running;
    l->waiting = st.n_waiting;
    l->queued_tokens = st.queued_tokens;
    l->running_tokens = st.kv_running_tokens;
    l->kv_blocks_total = st.kv_blocks_total;
    l->kv_blocks_free = st.kv_blocks_total - st.kv_blocks_used;
    l->tokens_per_s = gen_rate(s, st.generated_tokens, t);
    l->steps = st.steps;
    l->preemptions = st.preemptions;
    l->prefix_hit_tokens = st.prefix_hit_tokens;
    l->prefix_query_tokens = st.prefix_query_tokens;
    l->prompt_tokens = st.prompt_tokens;
    l->generated_tokens = st.generated_tokens;
    l->spec = st.spec;
}

/* ---- sending ---- */

static int send_frame(worker_server *s, const void *buf, size_t len)
{
    for (;;) {
        if (zmq_send(s->sock, buf, len, ZMQ_DONTWAIT) >= 0) {
            if (s->n_dropped) {
                log_info("the router at %s takes messages again (%llu dropped meanwhile)",
                         s->router, (unsigned long long)s->n_dropped);
                s->n_dropped = 0;
            }
            return DERAS_OK;
        }
        int err = zmq_errno();
        if (err == EINTR)
            continue;
        if (err == EAGAIN) {
            if (s->n_dropped++ == 0)
                log_warn("the router at %s takes no messages (queue full): dropping them until "
                         "it does", s->router);
            return DERAS_OK;
        }
        return zmq_check_fail("zmq_send(sock, buf, len, ZMQ_DONTWAIT)", __FILE__, __LINE__);
    }
}

/* A HELLO the socket could not queue (after the router dropped our connection, ZeroMQ is
 * reconnecting) is sent again after HELLO_RETRY_S in REJOIN, not after the whole handshake
 * timeout: re-registering must not wait for a frame that never left. */
static int send_hello(worker_server *s, double t)
{
    const void *buf;
    size_t len;
    uint64_t dropped = s->n_dropped;
    int rc = wp_encode_hello(s->msg_enc, &s->hello, &buf, &len);
    if (rc || (rc = send_frame(s, buf, len)))
        return rc;
    s->hello_dropped = s->n_dropped > dropped;
    bool retry = s->hello_dropped && s->link == LINK_REJOIN;
    s->hello_deadline = t + (retry ? HELLO_RETRY_S : s->o.handshake_timeout_s);
    return DERAS_OK;
}

static int send_heartbeat(worker_server *s, double t)
{
    wp_load l;
    get_load(s, t, &l);
    const void *buf;
    size_t len;
    int rc = wp_encode_heartbeat(s->msg_enc, &l, &buf, &len);
    return rc ? rc : send_frame(s, buf, len);
}

/* Send the STEP the callbacks built, if any, and start the next one. */
static int flush_step(worker_server *s, double t)
{
    int rc = s->cb_err;
    if (!rc && !wp_step_empty(s->step_enc)) {
        wp_load l;
        get_load(s, t, &l);
        const void *buf;
        size_t len;
        if (!(rc = wp_step_end(s->step_enc, &l, &buf, &len)))
            rc = send_frame(s, buf, len);
    }
    wp_step_begin(s->step_enc);
    s->cb_err = DERAS_OK;
    return rc;
}

static int send_reject(worker_server *s, uint64_t rid, enum proto_error_code code, const char *msg)
{
    const void *buf;
    size_t len;
    int rc = wp_encode_reject(s->msg_enc, rid, code, msg, &buf, &len);
    return rc ? rc : send_frame(s, buf, len);
}

/* ---- requests ---- */

/* End every request in the engine without reporting them: a restarted router never heard
 * of them, and a BYE tells the router to settle what it held. */
static void abort_all(worker_server *s)
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

static int handle_submit(worker_server *s, const wp_submit *q)
{
    char msg[256];
    if (s->stopping || s->draining) {
        snprintf(msg, sizeof msg, "worker %s is %s and takes no new requests", s->name,
                 s->stopping ? "shutting down" : "draining");
        return send_reject(s, q->rid, PE_BUSY, msg);
    }
    /* checked here rather than read out of the engine's message: its own code on the wire */
    for (int i = 0; i < q->n_prompt; i++)
        if (q->prompt_ids[i] < 0 || q->prompt_ids[i] >= s->vocab) {
            snprintf(msg, sizeof msg, "prompt token %d is %d, outside the vocabulary [0, %d)", i,
                     (int)q->prompt_ids[i], s->vocab);
            return send_reject(s, q->rid, PE_TOKEN_OUT_OF_RANGE, msg);
        }
    engine_request r = {.id = q->rid, .prompt = q->prompt_ids, .n_prompt = q->n_prompt,
                        .params = q->params};
    int rc = engine_add(s->e, &r);
    if (rc) {
        log_debug("request %llu rejected: %s", (unsigned long long)q->rid, deras_errmsg());
        return send_reject(s, q->rid, proto_error_of_status(rc), deras_errmsg());
    }
    /* the engine holds at most max_live_seqs requests, so the table has room */
    s->live[s->n_live++] = (live_req){.rid = q->rid, .n = q->params.n, .n_done = 0};
    return DERAS_OK;
}

static void begin_stop(worker_server *s, double t, const char *why)
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
static int say_bye(worker_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int say_bye(worker_server *s, const char *fmt, ...)
{
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    abort_all(s);
    if (s->link != LINK_READY)
        return DERAS_OK;
    log_info("BYE to the router: %s", why);
    const void *buf;
    size_t len;
    int rc = wp_encode_bye(s->msg_enc, why, &buf, &len);
    return rc ? rc : send_frame(s, buf, len);
}

static int handle_msg(worker_server *s, const wp_msg *m, double t)
{
    switch (m->type) {
    case WP_WELCOME:
        if (m->heartbeat_ms > 0)
            s->heartbeat_ms = m->heartbeat_ms;
        if (s->link != LINK_READY)
            log_info("registered with the router at %s as %s (heartbeat every %d ms)", s->router,
                     s->name, s->heartbeat_ms);
        if (s->link == LINK_HELLO_FIRST)
            sdnotify_ready("registered with the router at %s as %s", s->router, s->name);
        else if (s->link == LINK_REJOIN)
            sdnotify_status("registered again with the router at %s as %s", s->router, s->name);
        if (s->link == LINK_REJOIN && s->draining) {
            /* that DRAIN was the old router's; a draining router sends DRAIN after WELCOME */
            log_info("a new router: the previous router's DRAIN no longer holds");
            s->draining = false;
        }
        s->link = LINK_READY;
        s->next_heartbeat = t; /* the router learns our load at once */
        return DERAS_OK;
    case WP_REFUSE:
        if (s->link == LINK_HELLO_FIRST)
            return deras_fail(DERAS_ECLOSED, "the router at %s refused this worker: %s", s->router,
                              m->text);
        if (s->link == LINK_REJOIN) {
            /* replies to every frame sent before our HELLO: one line, not one per STEP */
            if (s->n_refused++ == 0)
                log_warn("the router at %s refused this worker: %s (replies to frames sent "
                         "before the HELLO; waiting for WELCOME)", s->router, m->text);
            return DERAS_OK;
        }
        log_warn("the router at %s no longer knows this worker (%s): it restarted? Aborting %d "
                 "request%s in flight and saying HELLO again",
                 s->router, m->text, s->n_live, s->n_live == 1 ? "" : "s");
        wp_step_begin(s->step_enc); /* finishes meant for the old router */
        abort_all(s);
        s->link = LINK_REJOIN;
        s->n_refused = 0;
        sdnotify_status("the router at %s no longer knows this worker: registering again",
                        s->router);
        return send_hello(s, t);
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

/* Handle what the router sent, at most RECV_BATCH messages. */
static int recv_batch(worker_server *s, double t)
{
    for (int i = 0; i < RECV_BATCH; i++) {
        if (zmq_msg_recv(&s->rx, s->sock, ZMQ_DONTWAIT) < 0) {
            int err = zmq_errno();
            if (err == EAGAIN)
                return DERAS_OK;
            if (err == EINTR)
                continue;
            return zmq_check_fail("zmq_msg_recv(&s->rx, s->sock, ZMQ_DONTWAIT)", __FILE__, __LINE__);
        }
        if (zmq_msg_more(&s->rx)) { /* not ours: every message is one frame */
            int rc;
            do {
                if ((rc = ZMQ_CHECK(zmq_msg_recv(&s->rx, s->sock, 0))))
                    return rc;
            } while (zmq_msg_more(&s->rx));
            log_warn("multi-frame message from the router; ignored");
            continue;
        }
        proto_error perr;
        s->in.type = 0;
        s->in.rid = 0;
        if (wp_decode(s->dec, zmq_msg_data(&s->rx), zmq_msg_size(&s->rx), &s->in, &perr)) {
            log_warn("undecodable message from the router (%s: %s); ignored",
                     proto_error_name(perr.code), perr.message);
            /* The decoder fills fields in wire order and the router writes rid first, so a
             * SUBMIT with a bad field usually still names its request: answer it. */
            int rc = s->in.type == WP_SUBMIT && s->in.rid
                         ? send_reject(s, s->in.rid, perr.code, perr.message)
                         : DERAS_OK;
            if (rc)
                return rc;
            continue;
        }
        int rc = handle_msg(s, &s->in, t);
        if (rc)
            return rc;
        s->stalled = false;
    }
    return DERAS_OK;
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
static int read_stops(worker_server *s, double t, const char **now_sig)
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

static long poll_timeout_ms(const worker_server *s, double t)
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

static int serve(worker_server *s)
{
    zmq_pollitem_t items[2] = {{s->sock, 0, ZMQ_POLLIN, 0}, {NULL, s->o.stop_fd, ZMQ_POLLIN, 0}};
    int n_items = s->o.stop_fd >= 0 ? 2 : 1;
    int rc;
    sdnotify_watchdog_init(&s->wd, (int64_t)(now_s() * 1e6));
    for (;;) {
        double t = now_s();
        sdnotify_watchdog_tick(&s->wd, (int64_t)(t * 1e6));
        if (zmq_poll(items, n_items, poll_timeout_ms(s, t)) < 0) {
            if (zmq_errno() == EINTR)
                continue;
            return zmq_check_fail("zmq_poll(items, n_items, timeout)", __FILE__, __LINE__);
        }
        t = now_s();
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
        if ((items[0].revents & ZMQ_POLLIN) && (rc = recv_batch(s, t)))
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
                if ((rc = send_hello(s, t)))
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
                get_load(s, t, &l);
                const void *hb;
                size_t hb_len;
                if (wp_encode_heartbeat(s->msg_enc, &l, &hb, &hb_len) == DERAS_OK)
                    pulse_step_begin(s->pulse, hb, hb_len, s->heartbeat_ms);
            }
            rc = engine_step(s->e, &n_tokens);
            pulse_step_end(s->pulse);
            if (rc) {
                char saved[256];
                snprintf(saved, sizeof saved, "%s", deras_errmsg());
                log_error("engine step failed: %s; dropping every request", saved);
                flush_step(s, t); /* what the step made before it failed */
                if (s->group) /* the followers stop at once instead of waiting for a plan */
                    group_abort(s->group, saved);
                say_bye(s, "its engine step failed: %s", saved);
                return deras_fail(rc, "engine step failed: %s", saved);
            }
            s->stalled = n_tokens == 0;
        }
        if ((rc = flush_step(s, t)))
            return rc;
        if (s->link == LINK_READY && t >= s->next_heartbeat) {
            if ((rc = send_heartbeat(s, t)))
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
static int warm_up(worker_server *s)
{
    int32_t prompt[4];
    for (int i = 0; i < 4; i++)
        prompt[i] = (int32_t)(i + 1 < s->vocab ? i + 1 : 0);
    engine_request r = {.id = WARMUP_RID, .prompt = prompt, .n_prompt = 4};
    req_params_init(&r.params);
    r.params.max_tokens = 1;
    r.params.ignore_eos = true;
    sampling_params_default(&r.params.sp);
    double t0 = now_s();
    s->silent = true;
    int rc = engine_add(s->e, &r);
    wp_load l;
    get_load(s, t0, &l);
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
    log_info("warm-up step done in %.3f s: ready", now_s() - t0);
    return DERAS_OK;
}

int worker_server_run(worker_server *s)
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
        (rc = ZMQ_CHECK(zmq_connect(s->sock, s->router))))
        return deras_fail_ctx(rc, "router endpoint %s: ", s->router);
    if ((rc = ZMQ_CHECK(zmq_msg_init(&s->rx))))
        return rc;
    s->rx_open = true;
    if ((rc = pulse_start(s->zctx, s->router, s->name, &s->pulse)))
        return rc;
    log_info("worker %s: saying HELLO to the router at %s", s->name, s->router);
    s->link = LINK_HELLO_FIRST;
    s->heartbeat_ms = s->o.heartbeat_ms;
    wp_step_begin(s->step_enc);
    if ((rc = send_hello(s, now_s())) || (rc = warm_up(s)))
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

/* The end-of-generation ids from the checkpoint's tokenizer (malloc'd, *n may be 0). */
static int load_eog(const checkpoint_t *ck, int32_t **ids, int *n)
{
    tokenizer_t *tok = NULL;
    int rc = checkpoint_gguf(ck) ? tokenizer_from_gguf(checkpoint_gguf(ck), &tok)
                                 : tokenizer_from_hf_dir(checkpoint_hf_dir(ck), &tok);
    if (rc)
        return deras_fail_ctx(rc, "tokenizer: ");
    *n = tokenizer_n_eog(tok);
    *ids = malloc((size_t)(*n + 1) * sizeof(int32_t));
    if (!*ids) {
        tokenizer_destroy(&tok);
        return deras_fail(DERAS_ENOMEM, "out of memory");
    }
    for (int i = 0; i < *n; i++)
        (*ids)[i] = tokenizer_eog_at(tok, i);
    tokenizer_destroy(&tok);
    return DERAS_OK;
}

/* Bytes the weights will take on the backend: the fraction budget leaves them out. */
static uint64_t weight_bytes(const model_config *c, size_t elem_size)
{
    kvmath_params p;
    uint64_t bytes = 0;
    enum kvmath_dtype dt = elem_size == 4 ? KVMATH_FP32 : elem_size == 2 ? KVMATH_FP16 : KVMATH_FP8;
    if (kvmath_params_count(c, 1, &p) || kvmath_weight_bytes(&p, dt, &bytes))
        return 0;
    return bytes;
}

int worker_server_new(const worker_opts *o, worker_server **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "worker_server_new: NULL out");
    *out = NULL;
    int rc = worker_opts_check(o);
    if (rc)
        return rc;
    worker_server *s = calloc(1, sizeof *s);
    if (!s)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    checkpoint_t *ck = NULL;
    s->o = *o;
    snprintf(s->model, sizeof s->model, "%s", o->model);
    snprintf(s->device, sizeof s->device, "%s", o->device);
    snprintf(s->kv_spec, sizeof s->kv_spec, "%s", o->kv_cache_memory);
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
    s->o.name = s->name;
    s->o.spec_proposer = s->spec_proposer;
    spec_opts so;
    if ((rc = worker_opts_spec(&s->o, &so)))
        goto fail;
    const int rows = so.kind == SPEC_NONE ? 1 : 1 + so.k;
    s->o.router = s->router;
    if (!s->o.max_live_seqs)
        s->o.max_live_seqs = 4 * s->o.max_seqs;

    if ((rc = backend_new(s->device, o->threads, &s->be)))
        goto fail;
    log_info("loading %s on %s", s->model, backend_name(s->be));
    int n_eog = 0;
    if ((rc = checkpoint_open(s->model, &ck)) || (rc = load_eog(ck, &s->eog, &n_eog)))
        goto fail;
    const model_config *cfg = checkpoint_config(ck);
    const int bs = s->o.block_size;
    if ((rc = kv_sizing_from_budget_before(cfg, backend_elem_size(s->be), bs, s->kv_spec,
                                           weight_bytes(cfg, backend_elem_size(s->be)), &s->kvs)))
        goto fail;
    kv_sizing_log(&s->kvs);
    int64_t seq_len = cfg->max_seq_len < s->kvs.n_tokens ? cfg->max_seq_len : s->kvs.n_tokens;
    int per_seq = (int)((seq_len + bs - 1) / bs);
    int progress_last = -100;
    model_opts mo = {.max_batch_tokens = s->o.max_batch_tokens, .max_seqs = s->o.max_seqs,
                     .max_logits = s->o.max_seqs * rows, .block_size = bs,
                     .n_kv_blocks = s->kvs.n_blocks,
                     .max_blocks_per_seq = per_seq, .max_copies = s->o.max_seqs,
                     .progress = progress_log, .progress_ctx = &progress_last};
    if (s->o.tp_size > 1) { /* lead a group: followers load their shards meanwhile */
        group_opts go = {.name = s->name, .rank = 0, .size = s->o.tp_size,
                         .timeout_s = s->o.tp_timeout_s};
        size_t plan = step_plan_bytes(s->o.max_batch_tokens, s->o.max_seqs, per_seq,
                                      s->o.max_seqs, s->o.max_seqs);
        if ((rc = group_lead(&go, cfg, &mo, plan, &s->group)))
            goto fail;
        mo.tp_rank = 0;
        mo.tp_size = s->o.tp_size;
        mo.comm = group_comm(s->group);
    }
    if ((rc = model_new(ck, s->be, &mo, &s->m)) ||
        (s->group && (rc = group_wait_ready(s->group))))
        goto fail;
    if (s->group)
        log_info("rank 0: %.1f MiB of weights, %.1f MiB of KV cache",
                 model_weight_bytes(s->m) / 1048576.0, model_kv_bytes(s->m) / 1048576.0);
    checkpoint_destroy(&ck); /* the model holds its own copy of every weight and the config */
    cfg = model_get_config(s->m);
    s->vocab = cfg->vocab_size;
    int max_model_len = (int)seq_len;
    if ((so.kind == SPEC_SELF || so.kind == SPEC_DRAFT) &&
        (rc = spec_drafter_load(&so, s->m, s->be, &s->drafter)))
        goto fail;
    if (so.kind != SPEC_NONE)
        log_info("speculative decoding: proposer %s, k %d, greedy cut-off at %d running "
                 "sequences%s", s->spec_proposer, so.k, so.max_batch,
                 s->drafter ? "; the draft model has its own KV cache of the target's size" : "");
    engine_opts eo = {.max_seqs = s->o.max_seqs, .max_batch_tokens = s->o.max_batch_tokens,
                      .max_live_seqs = s->o.max_live_seqs, .max_model_len = max_model_len,
                      .prefix_caching = s->o.prefix_caching, .eog_ids = s->eog, .n_eog = n_eog,
                      .cb = {on_token, on_finish, s}, .spec = so, .drafter = s->drafter,
                      .on_plan = s->group ? group_publish : NULL, .plan_ctx = s->group};
    if ((rc = engine_new(s->m, &eo, &s->e)))
        goto fail;
    s->live = calloc((size_t)s->o.max_live_seqs, sizeof *s->live);
    s->dec = wp_decoder_new(MAX_FRAME);
    s->step_enc = wp_encoder_new();
    s->msg_enc = wp_encoder_new();
    if (!s->live || !s->dec || !s->step_enc || !s->msg_enc) {
        rc = deras_fail(DERAS_ENOMEM, "out of memory");
        goto fail;
    }
    wp_hello *h = &s->hello;
    snprintf(h->name, sizeof h->name, "%s", s->name);
    snprintf(h->device, sizeof h->device, "%s", backend_name(s->be));
    size_t mlen = strlen(s->model), keep = sizeof h->model - 1; /* the end names the model */
    memcpy(h->model, mlen > keep ? s->model + mlen - keep : s->model, (mlen > keep ? keep : mlen) + 1);
    h->vocab_size = s->vocab;
    h->max_model_len = max_model_len;
    h->tp_size = s->o.tp_size;
    h->kv_blocks_total = s->kvs.n_blocks - 1;
    h->block_size = bs;
    h->max_seqs = s->o.max_seqs;
    h->pid = (int32_t)getpid();
    snprintf(h->spec, sizeof h->spec, "%s", spec_kind_name(so.kind));
    log_info("engine ready: %d sequences per step, %d tokens per step, %d live at most, context "
             "%d tokens, prefix caching %s",
             s->o.max_seqs, s->o.max_batch_tokens, s->o.max_live_seqs, max_model_len,
             s->o.prefix_caching ? "on" : "off");
    *out = s;
    return DERAS_OK;
fail:
    if (s->group)
        group_abort(s->group, deras_errmsg());
    checkpoint_destroy(&ck);
    worker_server_destroy(&s);
    return rc;
}

void worker_server_destroy(worker_server **sp)
{
    if (!sp || !*sp)
        return;
    worker_server *s = *sp;
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
    engine_destroy(&s->e);
    model_destroy(&s->drafter); /* a self-draft borrows the model's weights: it goes first */
    model_destroy(&s->m);
    group_destroy(&s->group); /* STOP to the followers, unless the group failed */
    backend_destroy(&s->be);
    free(s->eog);
    free(s);
    *sp = NULL;
}

const char *worker_server_name(const worker_server *s)
{
    return s ? s->name : "";
}

const char *worker_server_router(const worker_server *s)
{
    return s ? s->router : "";
}

const kv_sizing *worker_server_kv(const worker_server *s)
{
    return s ? &s->kvs : NULL;
}
