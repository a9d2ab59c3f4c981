/* SPDX-License-Identifier: Apache-2.0 */
/* admin.c - the admin socket: what derasctl (or an operator's script) asks the router.
 *
 * A ZeroMQ ROUTER separate from the client socket, so operations never share a queue or
 * a permission with clients: ipc:// by default (the socket file is made 0600 at bind:
 * only the router's user may connect), tcp only as a CURVE server whose allowed keys are
 * --admin-curve-allow (curve.c). Requests are decoded strictly (common/wire/admin_proto.h);
 * each gets one reply map, built here with msgpack in a buffer the module keeps.
 *
 *   status   every known worker (state, device, model, load, KV, tokens/s, uptime) and
 *            the router's own figures
 *   health   liveness (the loop answers) and readiness (some worker is ready)
 *   metrics  the Prometheus text that GET /metrics serves
 *   drain    the worker(s) get no new requests; what they run finishes. The reply waits
 *            (unless "wait": false) until they hold nothing of ours, or until the timeout,
 *            when the router aborts what is left (finish_reason "abort", abort_reason
 *            "drain_timeout"). The deadline is the router's: it holds even if the asker
 *            went away. `all` also drains workers that register later.
 *   undrain  back to ready.
 *
 * Waiting drains are a fixed table (ADMIN_MAX_WAITERS); a full table answers "busy".
 * Nothing blocks: the loop's timer (admin_next_timer) and every turn's admin_tick check
 * the deadlines and answer the drains that are done.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <msgpack.h>
#include <zmq.h>

#include "common/wire/admin_proto.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "router/router.h"

#define ADMIN_MAX_WAITERS 32
#define ADMIN_SNDHWM 1000

typedef struct waiter {
    bool used;
    uint8_t ident[RQ_MAX_IDENTITY];
    int ident_len;
    bool delim;
    int slot;              /* the worker, or -1: all */
    uint64_t epoch;        /* of that worker's registration */
    int64_t deadline_us;
    int aborted;           /* requests the drain timeout ended on its workers */
} waiter;

struct admin {
    admin_codec_t *codec;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    waiter w[ADMIN_MAX_WAITERS];
};

#define KEY(pk, lit) msgpack_pack_str_with_body(pk, lit, sizeof(lit) - 1)

int admin_open(router_t *rt)
{
    int rc;
    admin_t *a = calloc(1, sizeof *a);
    if (!a)
        return deras_fail(DERAS_ENOMEM, "admin: out of memory");
    if ((rc = admin_codec_new(&a->codec))) {
        free(a);
        return deras_fail_ctx(rc, "admin: ");
    }
    msgpack_sbuffer_init(&a->sb);
    msgpack_packer_init(&a->pk, &a->sb, msgpack_sbuffer_write);
    rt->admin = a;
    router_sock_opts o = {
        .endpoint = rt->o.admin,
        .max_msg_bytes = 2 * ADMIN_MAX_MESSAGE_BYTES, /* between the two: message_too_large */
        .sndhwm = ADMIN_SNDHWM,
    };
    if ((rc = router_socket_open(rt, &o, &rt->admin_sock)))
        return rc;
    if (rt->admin_curve && (rc = curve_apply(rt->admin_curve, rt->admin_sock)))
        return rc;
    return router_bind(rt->admin_sock, rt->o.admin, "the admin socket");
}

void admin_close(router_t *rt)
{
    if (rt->admin_sock) {
        zmq_close(rt->admin_sock);
        rt->admin_sock = NULL;
    }
    if (rt->admin) {
        admin_codec_destroy(&rt->admin->codec);
        msgpack_sbuffer_destroy(&rt->admin->sb);
        free(rt->admin);
        rt->admin = NULL;
    }
}

/* ---- replies ---- */

static void send_reply(router_t *rt, const uint8_t *ident, int ident_len, bool delim)
{
    admin_t *a = rt->admin;
    if (zmq_send(rt->admin_sock, ident, (size_t)ident_len, ZMQ_DONTWAIT | ZMQ_SNDMORE) == -1 ||
        (delim && zmq_send(rt->admin_sock, "", 0, ZMQ_DONTWAIT | ZMQ_SNDMORE) == -1) ||
        zmq_send(rt->admin_sock, a->sb.data, a->sb.size, ZMQ_DONTWAIT) == -1)
        log_debug("admin reply not sent (%s): the asker is gone", zmq_strerror(zmq_errno()));
}

/* {"type": type, "v": 1, ... n more pairs} */
static int reply_head(admin_t *a, const char *type, size_t n)
{
    msgpack_sbuffer_clear(&a->sb);
    return msgpack_pack_map(&a->pk, n + 2) | KEY(&a->pk, "type") |
           msgpack_pack_str_with_body(&a->pk, type, strlen(type)) | KEY(&a->pk, "v") |
           msgpack_pack_int(&a->pk, ADMIN_PROTO_VERSION);
}

static int pack_str(msgpack_packer *pk, const char *s)
{
    return msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void send_error(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                       const char *code, const char *msg)
{
    admin_t *a = rt->admin;
    rt->st.admin_errors++;
    int rc = reply_head(a, "error", 2);
    rc |= KEY(&a->pk, "code") | pack_str(&a->pk, code);
    rc |= KEY(&a->pk, "message") | pack_str(&a->pk, msg);
    if (rc == 0)
        send_reply(rt, ident, ident_len, delim);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* One worker's row of a status (or drain) reply: 15 pairs and the speculation counters. */
static int pack_worker(msgpack_packer *pk, const worker_t *k, int64_t now_us)
{
    const wp_load *l = &k->load;
    bool heard = workers_live(k) || k->state == W_STUCK;
    double uptime = ((heard ? now_us : k->dead_since_us) - k->registered_us) / 1e6;
    int rc = msgpack_pack_map(pk, 15 + SPEC_N_COUNTERS);
    rc |= KEY(pk, "name") | pack_str(pk, k->name);
    rc |= KEY(pk, "state") | pack_str(pk, workers_state_name(k));
    rc |= KEY(pk, "device") | pack_str(pk, k->hello.device);
    rc |= KEY(pk, "model") | pack_str(pk, base_name(k->hello.model));
    rc |= KEY(pk, "pid") | msgpack_pack_int32(pk, k->hello.pid);
    rc |= KEY(pk, "running") | msgpack_pack_int(pk, l->running);
    rc |= KEY(pk, "waiting") | msgpack_pack_int(pk, l->waiting);
    rc |= KEY(pk, "requests") | msgpack_pack_int(pk, k->inflight_reqs);
    rc |= KEY(pk, "kv_blocks_used") | msgpack_pack_int(pk, l->kv_blocks_total - l->kv_blocks_free);
    rc |= KEY(pk, "kv_blocks_total") | msgpack_pack_int(pk, l->kv_blocks_total);
    rc |= KEY(pk, "tokens_per_s") | msgpack_pack_double(pk, l->tokens_per_s);
    rc |= KEY(pk, "uptime_s") | msgpack_pack_double(pk, uptime < 0 ? 0 : uptime);
    rc |= KEY(pk, "served") | msgpack_pack_uint64(pk, k->served);
    rc |= KEY(pk, "steps") | msgpack_pack_uint64(pk, l->steps);
    rc |= KEY(pk, "spec") | pack_str(pk, workers_spec_name(k));
    for (int i = 0; i < SPEC_N_COUNTERS; i++)
        rc |= pack_str(pk, spec_counter_table[i].key) |
              msgpack_pack_uint64(pk, spec_counter_get(&l->spec, i));
    return rc;
}

/* Is worker slot i one of a waiter's (or a drain's) targets? slot -1: every live one. */
static bool targets(router_t *rt, int slot, uint64_t epoch, int i)
{
    const worker_t *k = workers_at(rt->workers, i);
    if (slot < 0)
        return workers_live(k);
    return i == slot && k->epoch == epoch;
}

static int pack_targets(router_t *rt, int slot, uint64_t epoch, int64_t now_us)
{
    msgpack_packer *pk = &rt->admin->pk;
    int n = 0;
    for (int i = 0; i < WORKERS_MAX; i++)
        n += targets(rt, slot, epoch, i);
    int rc = KEY(pk, "workers") | msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < WORKERS_MAX; i++)
        if (targets(rt, slot, epoch, i))
            rc |= pack_worker(pk, workers_at(rt->workers, i), now_us);
    return rc;
}

bool admin_ready(const router_t *rt)
{
    return !rt->draining && workers_ready(rt->workers) > 0;
}

int admin_metrics_text(router_t *rt, const char **text, size_t *len)
{
    metrics_router mr = {
        .requests_waiting = dispatch_queued_count(rt->disp),
        .requests_received = rt->st.requests,
        .errors = rt->st.errors,
        .redispatched = rt->st.redispatched,
        .worker_deaths = rt->st.worker_deaths,
        .worker_stuck = rt->st.worker_stuck,
        .start_time_s = rt->start_time_s,
        .model_name = http_api_model(rt),
    };
    return metrics_render(rt->metrics, rt->workers, &mr, text, len);
}

static void reply_status(router_t *rt, const uint8_t *ident, int ident_len, bool delim)
{
    admin_t *a = rt->admin;
    msgpack_packer *pk = &a->pk;
    int64_t now = router_now_us();
    int running = 0, n = 0;
    for (int i = 0; i < WORKERS_MAX; i++) {
        const worker_t *k = workers_at(rt->workers, i);
        n += k->state != W_FREE;
        if (workers_live(k))
            running += k->inflight_reqs;
    }
    int rc = reply_head(a, "status", 2);
    rc |= KEY(pk, "router") | msgpack_pack_map(pk, 6);
    rc |= KEY(pk, "uptime_s") | msgpack_pack_double(pk, (now - rt->start_us) / 1e6);
    rc |= KEY(pk, "ready") | (admin_ready(rt) ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
    rc |= KEY(pk, "stopping") | (rt->draining ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
    rc |= KEY(pk, "workers_ready") | msgpack_pack_int(pk, workers_ready(rt->workers));
    rc |= KEY(pk, "requests_running") | msgpack_pack_int(pk, running);
    rc |= KEY(pk, "requests_waiting") | msgpack_pack_int(pk, dispatch_queued_count(rt->disp));
    rc |= KEY(pk, "workers") | msgpack_pack_array(pk, (size_t)n);
    for (int i = 0; i < WORKERS_MAX; i++) {
        const worker_t *k = workers_at(rt->workers, i);
        if (k->state != W_FREE)
            rc |= pack_worker(pk, k, now);
    }
    if (rc == 0)
        send_reply(rt, ident, ident_len, delim);
}

static void reply_health(router_t *rt, const uint8_t *ident, int ident_len, bool delim)
{
    admin_t *a = rt->admin;
    msgpack_packer *pk = &a->pk;
    bool ready = admin_ready(rt);
    int live = 0;
    for (int i = 0; i < WORKERS_MAX; i++)
        live += workers_live(workers_at(rt->workers, i));
    int rc = reply_head(a, "health", 5);
    rc |= KEY(pk, "live") | msgpack_pack_true(pk);
    rc |= KEY(pk, "ready") | (ready ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
    rc |= KEY(pk, "status") | msgpack_pack_int(pk, ready ? 200 : 503);
    rc |= KEY(pk, "workers_ready") | msgpack_pack_int(pk, workers_ready(rt->workers));
    rc |= KEY(pk, "workers_live") | msgpack_pack_int(pk, live);
    if (rc == 0)
        send_reply(rt, ident, ident_len, delim);
}

static void reply_metrics(router_t *rt, const uint8_t *ident, int ident_len, bool delim)
{
    admin_t *a = rt->admin;
    const char *text;
    size_t len;
    if (admin_metrics_text(rt, &text, &len)) {
        send_error(rt, ident, ident_len, delim, "internal", deras_errmsg());
        return;
    }
    int rc = reply_head(a, "metrics", 1);
    rc |= KEY(&a->pk, "text") | msgpack_pack_str_with_body(&a->pk, text, len);
    if (rc == 0)
        send_reply(rt, ident, ident_len, delim);
}

/* ---- drain ---- */

/* Every target of a drain holds nothing of ours, or is no longer draining (undrained,
 * dead, re-registered): nothing left to wait for. */
static bool settled(router_t *rt, const waiter *w)
{
    for (int i = 0; i < WORKERS_MAX; i++) {
        const worker_t *k = workers_at(rt->workers, i);
        if (targets(rt, w->slot, w->epoch, i) && k->state == W_DRAINING && !workers_drained(k))
            return false;
    }
    return true;
}

/* Every target drained (and still draining). */
static bool all_drained(router_t *rt, int slot, uint64_t epoch)
{
    for (int i = 0; i < WORKERS_MAX; i++) {
        const worker_t *k = workers_at(rt->workers, i);
        if (targets(rt, slot, epoch, i) && k->state != W_STARTING && !workers_drained(k))
            return false;
    }
    return slot < 0 || targets(rt, slot, epoch, slot);
}

static void reply_drain(router_t *rt, const uint8_t *ident, int ident_len, bool delim, int slot,
                        uint64_t epoch, bool timed_out, int aborted)
{
    admin_t *a = rt->admin;
    msgpack_packer *pk = &a->pk;
    int rc = reply_head(a, "drain", 4);
    rc |= KEY(pk, "drained") |
          (all_drained(rt, slot, epoch) ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
    rc |= KEY(pk, "timed_out") | (timed_out ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
    rc |= KEY(pk, "aborted") | msgpack_pack_int(pk, aborted);
    rc |= pack_targets(rt, slot, epoch, router_now_us());
    if (rc == 0)
        send_reply(rt, ident, ident_len, delim);
}

/* The live worker a drain or undrain names; NULL after an error reply. */
static worker_t *target_worker(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                               const char *name)
{
    char msg[160];
    worker_t *k = workers_lookup(rt->workers, name, (int)strlen(name));
    if (!k) {
        snprintf(msg, sizeof msg, "no worker named '%s' (derasctl status lists them)", name);
        send_error(rt, ident, ident_len, delim, "unknown_worker", msg);
        return NULL;
    }
    if (!workers_live(k)) {
        snprintf(msg, sizeof msg, "worker '%s' is %s", name, workers_state_name(k));
        send_error(rt, ident, ident_len, delim, "not_live", msg);
        return NULL;
    }
    return k;
}

static void handle_drain(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                         const admin_request *q)
{
    admin_t *a = rt->admin;
    worker_t *k = NULL;
    if (!q->all && !(k = target_worker(rt, ident, ident_len, delim, q->worker)))
        return;
    waiter *w = NULL;
    for (int i = 0; q->wait && !w && i < ADMIN_MAX_WAITERS; i++)
        if (!a->w[i].used)
            w = &a->w[i];
    if (q->wait && !w) {
        send_error(rt, ident, ident_len, delim, "busy",
                   "too many drains are waiting; retry, or drain with \"wait\": false");
        return;
    }
    int64_t now = router_now_us();
    int64_t timeout_ms = q->timeout_ms >= 0 ? q->timeout_ms : rt->o.drain_timeout_ms;
    int64_t deadline = now + timeout_ms * 1000;
    if (k) {
        workers_drain(k, true, deadline);
        log_info("drain of worker %s: %d requests in flight, at most %lld ms", k->name,
                 k->inflight_reqs, (long long)timeout_ms);
    } else {
        workers_drain_all(rt->workers, deadline);
        log_info("drain of every worker: at most %lld ms", (long long)timeout_ms);
    }
    int slot = k ? k->slot : -1;
    uint64_t epoch = k ? k->epoch : 0;
    if (!w) {
        reply_drain(rt, ident, ident_len, delim, slot, epoch, false, 0);
        return;
    }
    *w = (waiter){.used = true, .ident_len = ident_len, .delim = delim, .slot = slot,
                  .epoch = epoch, .deadline_us = deadline};
    memcpy(w->ident, ident, (size_t)ident_len);
    admin_tick(rt, now); /* already empty: answer at once (a zero timeout aborts now) */
}

static void handle_undrain(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                           const admin_request *q)
{
    if (rt->draining) {
        send_error(rt, ident, ident_len, delim, "shutting_down",
                   "the router is stopping: its workers stay drained");
        return;
    }
    worker_t *k = NULL;
    if (!q->all && !(k = target_worker(rt, ident, ident_len, delim, q->worker)))
        return;
    if (k) {
        workers_drain(k, false, 0);
        log_info("undrain of worker %s: %s", k->name, workers_state_name(k));
    } else {
        workers_undrain_all(rt->workers);
        log_info("undrain of every worker");
    }
    admin_t *a = rt->admin;
    int rc = reply_head(a, "undrain", 1);
    rc |= pack_targets(rt, k ? k->slot : -1, k ? k->epoch : 0, router_now_us());
    if (rc == 0)
        send_reply(rt, ident, ident_len, delim);
    admin_tick(rt, router_now_us()); /* drains waiting on these workers are over */
}

void admin_tick(router_t *rt, int64_t now_us)
{
    admin_t *a = rt->admin;
    worker_t *k;
    while ((k = workers_drain_overdue(rt->workers, now_us))) {
        int n = relay_abort_worker(rt, k, "drain_timeout");
        log_warn("drain of worker %s timed out: %d requests end with abort (drain_timeout)",
                 k->name, n);
        workers_drain(k, true, 0); /* acted on: never again, whatever the count says */
        for (int i = 0; i < ADMIN_MAX_WAITERS; i++)
            if (a->w[i].used && (a->w[i].slot < 0 || (a->w[i].slot == k->slot &&
                                                      a->w[i].epoch == k->epoch)))
                a->w[i].aborted += n;
    }
    for (int i = 0; i < ADMIN_MAX_WAITERS; i++) {
        waiter *w = &a->w[i];
        if (!w->used)
            continue;
        bool late = now_us >= w->deadline_us;
        if (!late && !settled(rt, w))
            continue;
        w->used = false;
        reply_drain(rt, w->ident, w->ident_len, w->delim, w->slot, w->epoch, late, w->aborted);
    }
}

int64_t admin_next_timer(const router_t *rt)
{
    int64_t t = INT64_MAX;
    for (int i = 0; i < ADMIN_MAX_WAITERS; i++)
        if (rt->admin->w[i].used && rt->admin->w[i].deadline_us < t)
            t = rt->admin->w[i].deadline_us;
    return t;
}

/* ---- requests ---- */

static void handle(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                   const void *data, size_t size)
{
    admin_request q;
    proto_error err;
    rt->st.admin_requests++;
    if (admin_decode_request(rt->admin->codec, data, size, &q, &err)) {
        send_error(rt, ident, ident_len, delim, proto_error_name(err.code), err.message);
        return;
    }
    log_debug("admin: %s", admin_type_name(q.type));
    switch (q.type) {
    case ADMIN_STATUS: reply_status(rt, ident, ident_len, delim); break;
    case ADMIN_HEALTH: reply_health(rt, ident, ident_len, delim); break;
    case ADMIN_METRICS: reply_metrics(rt, ident, ident_len, delim); break;
    case ADMIN_DRAIN: handle_drain(rt, ident, ident_len, delim, &q); break;
    case ADMIN_UNDRAIN: handle_undrain(rt, ident, ident_len, delim, &q); break;
    }
}

void admin_recv(router_t *rt, int budget)
{
    for (int i = 0; i < budget; i++) {
        zmq_msg_t f[3];
        int extra, n = router_recv_frames(rt->admin_sock, f, 3, &extra);
        if (n == 0)
            return;
        const uint8_t *ident = zmq_msg_data(&f[0]);
        int ident_len = (int)zmq_msg_size(&f[0]);
        bool delim = n == 3 && zmq_msg_size(&f[1]) == 0;
        if (ident_len >= 1 && ident_len <= RQ_MAX_IDENTITY) {
            if (n == 2 || (n == 3 && delim && extra == 0))
                handle(rt, ident, ident_len, delim, zmq_msg_data(&f[n - 1]),
                       zmq_msg_size(&f[n - 1]));
            else
                send_error(rt, ident, ident_len, delim, "malformed",
                           "a request is one frame (DEALER) or an empty delimiter and one "
                           "frame (REQ)");
        }
        for (int k = 0; k < n; k++)
            zmq_msg_close(&f[k]);
    }
}
