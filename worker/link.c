/* SPDX-License-Identifier: Apache-2.0 */
/* link.c - the worker's side of the router link (common/wire/worker_proto.h): frames out
 * without blocking, frames in with a bounded batch per turn, the HELLO / WELCOME / REFUSE
 * handshake and its REJOIN state after a router restart, and the load every heartbeat and
 * STEP carries. server.c runs the loop and owns the requests (server_internal.h).
 *
 * Cost: per frame, one encode into a reusable encoder and one zmq_send (libzmq copies the
 * frame); receiving decodes in place from libzmq's message. Nothing here allocates per
 * token.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "common/wire/zmq_check.h"
#include "worker/server_internal.h"

/* ---- load ---- */

/* Generated tokens per second over the last ~10 s of samples. */
static double gen_rate(worker_server_t *s, uint64_t generated, double t)
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

void link_load(worker_server_t *s, double t, wp_load *l)
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

int link_send_frame(worker_server_t *s, const void *buf, size_t len)
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
int link_send_hello(worker_server_t *s, double t)
{
    const void *buf;
    size_t len;
    uint64_t dropped = s->n_dropped;
    int rc = wp_encode_hello(s->msg_enc, &s->hello, &buf, &len);
    if (rc || (rc = link_send_frame(s, buf, len)))
        return rc;
    s->hello_dropped = s->n_dropped > dropped;
    bool retry = s->hello_dropped && s->link == LINK_REJOIN;
    s->hello_deadline = t + (retry ? HELLO_RETRY_S : s->o.handshake_timeout_s);
    return DERAS_OK;
}

int link_send_heartbeat(worker_server_t *s, double t)
{
    wp_load l;
    link_load(s, t, &l);
    const void *buf;
    size_t len;
    int rc = wp_encode_heartbeat(s->msg_enc, &l, &buf, &len);
    return rc ? rc : link_send_frame(s, buf, len);
}

/* Send the STEP the callbacks built, if any, and start the next one. */
int link_flush_step(worker_server_t *s, double t)
{
    int rc = s->cb_err;
    if (!rc && !wp_step_empty(s->step_enc)) {
        wp_load l;
        link_load(s, t, &l);
        const void *buf;
        size_t len;
        if (!(rc = wp_step_end(s->step_enc, &l, &buf, &len)))
            rc = link_send_frame(s, buf, len);
    }
    wp_step_begin(s->step_enc);
    s->cb_err = DERAS_OK;
    return rc;
}

int link_send_reject(worker_server_t *s, uint64_t rid, enum proto_error_code code, const char *msg)
{
    const void *buf;
    size_t len;
    int rc = wp_encode_reject(s->msg_enc, rid, code, msg, &buf, &len);
    return rc ? rc : link_send_frame(s, buf, len);
}

int link_send_bye(worker_server_t *s, const char *why)
{
    if (s->link != LINK_READY)
        return DERAS_OK;
    log_info("BYE to the router: %s", why);
    const void *buf;
    size_t len;
    int rc = wp_encode_bye(s->msg_enc, why, &buf, &len);
    return rc ? rc : link_send_frame(s, buf, len);
}

/* ---- receiving ---- */

static int link_handle(worker_server_t *s, const wp_msg *m, double t)
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
        server_abort_all(s);
        s->link = LINK_REJOIN;
        s->n_refused = 0;
        sdnotify_status("the router at %s no longer knows this worker: registering again",
                        s->router);
        return link_send_hello(s, t);
    default:
        return server_handle(s, m, t);
    }
}

/* Handle what the router sent, at most RECV_BATCH messages. */
int link_recv(worker_server_t *s, double t)
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
                         ? link_send_reject(s, s->in.rid, perr.code, perr.message)
                         : DERAS_OK;
            if (rc)
                return rc;
            continue;
        }
        int rc = link_handle(s, &s->in, t);
        if (rc)
            return rc;
        s->stalled = false;
    }
    return DERAS_OK;
}

