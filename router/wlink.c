/* SPDX-License-Identifier: Apache-2.0 */
/* wlink.c - the worker socket: HELLO/WELCOME, heartbeats, SUBMIT/ABORT, STEP, REJECT.
 *
 * A ZeroMQ ROUTER that workers connect DEALERs to, routing id = worker name. ZeroMQ lets
 * one connection hold a routing id at a time (no ZMQ_ROUTER_HANDOVER), so a second
 * process started under a live name is never heard: its own handshake times out. A
 * HELLO from a known name is the same process saying hello again (same pid: keep its
 * requests) or a restart after the old connection went away (new pid: the old
 * process's requests are re-dispatched or failed first).
 *
 * Frames from workers are decoded with the same strict, bounded decoder as client
 * frames (a broken worker must not take the router down). Anything but HELLO from a
 * name the router does not know as live gets REFUSE "register", so a worker that
 * outlived a router restart (or was declared dead) registers again. A worker is heard
 * from at least every heartbeat; one silent for --worker-timeout-ms is dead
 * (relay_worker_dead). Its connection closing (monitor, matched by fd like clients)
 * stops dispatch to it at once, while its death still waits for the timeout: a tcp
 * worker may reconnect. A worker that exits says BYE first: it is gone at once, and
 * what it still held is treated as on a dead worker (relay_worker_dead).
 * One that is heard from (its pulse thread says it is inside a
 * step) but completes no step for --stuck-timeout-ms while holding our requests is stuck
 * (relay_worker_stuck): its requests are aborted there and go elsewhere; if it ever
 * speaks again from its own socket it gets REFUSE "register" and starts over.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <zmq.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "router/router.h"

#define WORKER_MON_ADDR "inproc://deras-worker-monitor"
#define WORKER_MAX_FRAME (16u << 20)
#define WORKER_HWM 100000

int wlink_open(router_t *rt)
{
    router_sock_opts o = {
        .endpoint = rt->o.workers,
        .max_msg_bytes = WORKER_MAX_FRAME,
        .sndhwm = WORKER_HWM,
        .rcvhwm = WORKER_HWM,
        .heartbeat_ivl_ms = rt->o.heartbeat_ms,
        .heartbeat_timeout_ms = rt->o.worker_timeout_ms,
        .keepalive_idle_s = 30,
        .keepalive_intvl_s = 5,
    };
    int rc;
    if ((rc = router_socket_open(rt, &o, &rt->workers_sock)) ||
        (rc = router_monitor_open(rt, rt->workers_sock, WORKER_MON_ADDR, ZMQ_EVENT_DISCONNECTED,
                                  &rt->worker_mon)))
        return rc;
    if (rt->worker_curve && (rc = curve_apply(rt->worker_curve, rt->workers_sock)))
        return rc;
    return router_bind(rt->workers_sock, rt->o.workers, "the worker socket");
}

void wlink_close(router_t *rt)
{
    if (rt->workers_sock) {
        int linger = 200; /* let DRAIN and ABORT frames out */
        zmq_setsockopt(rt->workers_sock, ZMQ_LINGER, &linger, sizeof linger);
        zmq_socket_monitor(rt->workers_sock, NULL, 0);
        zmq_close(rt->workers_sock);
        rt->workers_sock = NULL;
    }
    if (rt->worker_mon) {
        zmq_close(rt->worker_mon);
        rt->worker_mon = NULL;
    }
}

/* One frame to a worker by routing id. DERAS_ECLOSED if it cannot take it now. */
static int send_to(router_t *rt, const void *name, int name_len, const void *buf, size_t len)
{
    if (zmq_send(rt->workers_sock, name, (size_t)name_len, ZMQ_DONTWAIT | ZMQ_SNDMORE) == -1 ||
        zmq_send(rt->workers_sock, buf, len, ZMQ_DONTWAIT) == -1)
        return deras_fail(DERAS_ECLOSED, "send to worker %.*s: %s", name_len, (const char *)name,
                          zmq_strerror(zmq_errno()));
    return DERAS_OK;
}

static void refuse(router_t *rt, const void *name, int name_len, const char *why)
{
    const void *buf;
    size_t len;
    if (wp_encode_refuse(rt->wenc, why, &buf, &len) == DERAS_OK)
        send_to(rt, name, name_len, buf, len);
}

int wlink_submit(void *ctx, worker_t *k, rq_t *r)
{
    router_t *rt = ctx;
    wp_submit s = {.rid = r->rid, .prompt_ids = r->prompt, .n_prompt = r->n_prompt,
                   .params = r->params, .grammar = r->grammar, .grammar_len = r->grammar_len};
    const void *buf;
    size_t len;
    int rc = wp_encode_submit(rt->wenc, &s, &buf, &len);
    if (rc)
        return rc;
    log_debug("request '%s' -> worker %s as rid %llu (attempt %d)", r->id, k->name,
              (unsigned long long)r->rid, r->attempts);
    if ((rc = send_to(rt, k->name, k->name_len, buf, len)))
        return rc;
    rt->st.prompt_tokens += (uint64_t)r->n_prompt;
    return DERAS_OK;
}

void wlink_abort(router_t *rt, worker_t *k, uint64_t rid)
{
    const void *buf;
    size_t len;
    if (wp_encode_abort(rt->wenc, rid, &buf, &len) == DERAS_OK &&
        send_to(rt, k->name, k->name_len, buf, len))
        log_debug("%s", deras_errmsg());
}

void wlink_drain_all(router_t *rt)
{
    const void *buf;
    size_t len;
    for (int i = 0; i < WORKERS_MAX; i++) {
        worker_t *k = workers_at(rt->workers, i);
        if (!workers_live(k))
            continue;
        if (wp_encode_drain(rt->wenc, &buf, &len) == DERAS_OK)
            send_to(rt, k->name, k->name_len, buf, len);
    }
    workers_drain_all(rt->workers, 0);
}

void wlink_check_timeouts(router_t *rt, int64_t now_us)
{
    worker_t *k;
    char why[96];
    while ((k = workers_expired(rt->workers, now_us))) {
        snprintf(why, sizeof why, "no message for %lld ms",
                 (long long)((now_us - k->last_seen_us) / 1000));
        if (k->state == W_STUCK) { /* its requests went elsewhere when it got stuck */
            log_warn("stuck worker %s is dead: %s", k->name, why);
            workers_dead(k, now_us);
            rt->st.worker_deaths++;
        } else {
            relay_worker_dead(rt, k, why);
        }
    }
    while ((k = workers_find_stuck(rt->workers, now_us))) {
        snprintf(why, sizeof why, "no engine step completed for %lld ms with %d requests on it",
                 (long long)((now_us - k->progress_us) / 1000), k->inflight_reqs);
        relay_worker_stuck(rt, k, why);
    }
}

static void welcome(router_t *rt, worker_t *k)
{
    const void *buf;
    size_t len;
    if (wp_encode_welcome(rt->wenc, rt->o.heartbeat_ms, &buf, &len) == DERAS_OK)
        send_to(rt, k->name, k->name_len, buf, len);
    if (rt->draining && wp_encode_drain(rt->wenc, &buf, &len) == DERAS_OK)
        send_to(rt, k->name, k->name_len, buf, len); /* the registry has it draining already */
}

static void handle_hello(router_t *rt, const uint8_t *name, int name_len, int fd,
                         const wp_hello *h)
{
    char why[256];
    worker_t *k;
    int64_t now = router_now_us();
    enum hello_verdict v = workers_hello(rt->workers, name, name_len, h, fd, now, &k, why, sizeof why);
    if (v == HELLO_RESTART) {
        relay_worker_dead(rt, k, "restarted under the same name");
        v = workers_hello(rt->workers, name, name_len, h, fd, now, &k, why, sizeof why);
    }
    switch (v) {
    case HELLO_NEW:
        log_info("worker %s registered: pid %d, %s, max_seqs %d, context %d, %d KV blocks of %d",
                 k->name, (int)h->pid, h->device, h->max_seqs, h->max_model_len,
                 h->kv_blocks_total, h->block_size);
        welcome(rt, k);
        break;
    case HELLO_RECONNECT:
        log_info("worker %s said HELLO again (pid %d): still registered", k->name, (int)h->pid);
        welcome(rt, k);
        break;
    default:
        log_warn("worker %.*s refused: %s", name_len, (const char *)name, why);
        refuse(rt, name, name_len, why);
        break;
    }
}

static void handle_reject(router_t *rt, worker_t *k, const wp_msg *m)
{
    rq_t *r = rq_find_rid(rt->rqs, m->rid);
    if (!r || r->state != RQ_RUNNING || r->worker != k->slot)
        return;
    if (m->code == PE_BUSY) {
        log_debug("worker %s busy: request '%s' goes back to the queue", k->name, r->id);
        workers_ended(k, r->params.n);
        workers_busy(k);
        r->attempts--;
        dispatch_requeue(rt->disp, r, router_now_us());
        return;
    }
    char msg[400];
    snprintf(msg, sizeof msg, "worker %s rejected the request: %s", k->name, m->text);
    relay_fail(rt, r, m->code > PE_NONE && m->code < PE_N_CODES ? m->code : PE_INTERNAL, msg);
}

/* The worker is exiting (its last frame): requests it still held were dropped there.
 * O(live requests), once per worker exit. */
static void handle_bye(router_t *rt, worker_t *k, const char *reason)
{
    for (rq_t *r = rq_first(rt->rqs); r; r = rq_next(rt->rqs, r))
        if (r->state == RQ_RUNNING && r->worker == k->slot) {
            char why[300];
            snprintf(why, sizeof why, "it exited: %s", reason);
            relay_worker_dead(rt, k, why);
            return;
        }
    log_info("worker %s (pid %d) left: %s", k->name, (int)k->hello.pid, reason);
    workers_dead(k, router_now_us());
}

/* A load report, with the worker's changes of state logged. */
static void load(worker_t *k, const wp_load *l, bool heartbeat, int64_t now_us)
{
    enum worker_state was = k->state;
    workers_load(k, l, heartbeat, now_us);
    if (k->state != was)
        log_info("worker %s is %s (it reports %s)", k->name, workers_state_name(k),
                 wp_phase_name(l->phase));
}

static void handle_frame(router_t *rt, const uint8_t *name, int name_len, int fd,
                         const void *data, size_t size)
{
    wp_msg m;
    proto_error err;
    /* "<name>/hb": a worker's pulse thread, heard only while one of its steps runs long */
    if (name_len > 3 && !memcmp(name + name_len - 3, "/hb", 3)) {
        worker_t *owner = workers_lookup(rt->workers, name, name_len - 3);
        if (owner && (workers_live(owner) || owner->state == W_STUCK) &&
            wp_decode(rt->wdec, data, size, &m, &err) == DERAS_OK && m.type == WP_HEARTBEAT)
            workers_pulse(owner, router_now_us());
        else
            rt->st.worker_bad_frames++;
        return;
    }
    worker_t *k = workers_find(rt->workers, name, name_len);
    if (wp_decode(rt->wdec, data, size, &m, &err)) {
        /* a broken worker must not flood the log: the first few, then one in a thousand */
        if (++rt->st.worker_bad_frames <= 10 || rt->st.worker_bad_frames % 1000 == 0)
            log_warn("worker %.*s: bad frame (%llu so far): %s: %s", name_len, (const char *)name,
                     (unsigned long long)rt->st.worker_bad_frames, proto_error_name(err.code),
                     err.message);
        if (!k || err.code == PE_UNSUPPORTED_VERSION) {
            char why[300];
            snprintf(why, sizeof why, "%s: %s", proto_error_name(err.code), err.message);
            refuse(rt, name, name_len, why);
        }
        return;
    }
    if (m.type == WP_HELLO) {
        handle_hello(rt, name, name_len, fd, &m.hello);
        return;
    }
    if (!k) {
        refuse(rt, name, name_len, "register");
        return;
    }
    int64_t now = router_now_us();
    workers_seen(k, fd, now);
    switch (m.type) {
    case WP_HEARTBEAT: load(k, &m.load, true, now); break;
    case WP_STEP:
        load(k, &m.load, false, now);
        relay_step(rt, k, &m);
        break;
    case WP_REJECT: handle_reject(rt, k, &m); break;
    case WP_BYE: handle_bye(rt, k, m.text); break;
    default:
        rt->st.worker_bad_frames++;
        log_warn("worker %s sent a router-only message (type %d)", k->name, (int)m.type);
        break;
    }
}

void wlink_recv(router_t *rt, int budget)
{
    for (int i = 0; i < budget; i++) {
        wlink_monitor(rt);
        zmq_msg_t f[2]; /* routing id, body */
        int extra, n = router_recv_frames(rt->workers_sock, f, 2, &extra);
        if (n == 0) {
            int err = zmq_errno();
            if (err != EAGAIN && err != EINTR)
                log_warn("worker socket: zmq_msg_recv: %s", zmq_strerror(err));
            return;
        }
        rt->st.worker_frames++;
        int name_len = (int)zmq_msg_size(&f[0]);
        if (n == 2 && extra == 0 && name_len > 0 && name_len <= WPROTO_MAX_NAME)
            handle_frame(rt, zmq_msg_data(&f[0]), name_len, zmq_msg_get(&f[1], ZMQ_SRCFD),
                         zmq_msg_data(&f[1]), zmq_msg_size(&f[1]));
        else
            rt->st.worker_bad_frames++;
        for (int k = 0; k < n; k++)
            zmq_msg_close(&f[k]);
    }
}

void wlink_monitor(router_t *rt)
{
    uint16_t event;
    uint32_t value;
    while (router_monitor_next(rt->worker_mon, &event, &value))
        if (event == ZMQ_EVENT_DISCONNECTED)
            workers_fd_closed(rt->workers, (int)value);
}
