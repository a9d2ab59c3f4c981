/* SPDX-License-Identifier: Apache-2.0 */
/* frontend.c - the client socket: frames in, validation, admission, replies out.
 *
 * The socket is a ZeroMQ ROUTER. A client frame is [routing id, payload] from a DEALER,
 * or [routing id, "", payload] from a REQ (the empty delimiter is echoed on every reply
 * to that request). Anything else is answered `malformed` and counted. Frames above the
 * protocol's cap (4 MiB) are read and answered `message_too_large`; ZeroMQ's own cap
 * (ZMQ_MAXMSGSIZE, CLIENT_FRAME_HARD_CAP = 128 MiB, checked from the frame header before
 * anything is allocated) only stops frames too big to be worth reading: such a peer is
 * disconnected by the library, which libzmq 4.3 reports to the monitor as a plain
 * disconnect (counted with the disconnects; its requests end like any departed
 * client's). Peers that are not ZMTP at all are counted apart.
 *
 * A request is checked completely before anything is allocated for it: the decoder's
 * schema and caps, then token ids against the vocabulary, the prompt's tokens (text is
 * tokenized here) plus max_tokens against the model's context, the client's live ids,
 * and the admission caps. A failed check is one `error` reply; the socket never blocks
 * (every send is ZMQ_DONTWAIT) and a client that is gone (EHOSTUNREACH under
 * ZMQ_ROUTER_MANDATORY) or not reading (its send queue at the high-water mark) has its
 * requests ended.
 *
 * Departed clients: the socket monitor reports ZMQ_EVENT_DISCONNECTED with the fd of
 * the closed connection; every request remembers the fd its frame arrived on
 * (ZMQ_SRCFD), so a client that goes away mid-request has its requests aborted at the
 * worker at once (their KV blocks freed), streaming or not. The monitor is drained
 * before each client frame is read. ZeroMQ emits a connection's DISCONNECTED before it
 * closes the fd, and a new connection's ACCEPTED before its first frame, so frames still
 * queued from a departed connection are recognised (their fd is marked closed until an
 * ACCEPTED reuses it) and dropped instead of run for nobody. Only a connection accepted,
 * handshaken and heard from within one loop turn could be mistaken for the one it
 * replaced; its request would still get finals (abort_reason "disconnected"), never
 * silence.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "router/router.h"

#define CLIENT_MON_ADDR "inproc://deras-client-monitor"
#define CLIENT_SNDHWM 100000   /* replies queued per client before it counts as not reading */
#define CLIENT_RCVHWM 1000
#define CLIENT_FRAME_HARD_CAP ((int64_t)128 << 20) /* answered above the protocol cap, up to this */
#define CLIENT_ZMTP_IVL_MS 5000
#define CLIENT_ZMTP_TIMEOUT_MS 30000

int frontend_open(router_t *rt)
{
    int64_t maxmsg = (int64_t)rt->lim.max_message_bytes;
    router_sock_opts o = {
        .endpoint = rt->o.listen,
        .max_msg_bytes = maxmsg > CLIENT_FRAME_HARD_CAP / 2 ? 2 * maxmsg : CLIENT_FRAME_HARD_CAP,
        .sndhwm = CLIENT_SNDHWM,
        .rcvhwm = CLIENT_RCVHWM,
        .heartbeat_ivl_ms = CLIENT_ZMTP_IVL_MS,
        .heartbeat_timeout_ms = CLIENT_ZMTP_TIMEOUT_MS,
        .keepalive_idle_s = 60,
        .keepalive_intvl_s = 10,
        .keepalive_cnt = 6,
    };
    int rc = router_socket_open(rt, &o, &rt->clients);
    if (rc)
        return rc;
    if (rt->curve) {
        if ((rc = curve_zap_open(rt->zctx, &rt->zap)) || (rc = curve_apply(rt->curve, rt->clients)))
            return rc;
    }
    int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if ((rc = router_monitor_open(rt, rt->clients, CLIENT_MON_ADDR, events, &rt->client_mon)))
        return rc;
    if (zmq_bind(rt->clients, rt->o.listen) == -1)
        return deras_fail(DERAS_EIO, "cannot listen on %s: %s", rt->o.listen,
                          zmq_strerror(zmq_errno()));
    return DERAS_OK;
}

void frontend_close(router_t *rt)
{
    if (rt->clients) {
        /* let the last finals out, briefly */
        int linger = 500;
        zmq_setsockopt(rt->clients, ZMQ_LINGER, &linger, sizeof linger);
        zmq_socket_monitor(rt->clients, NULL, 0);
        zmq_close(rt->clients);
        rt->clients = NULL;
    }
    if (rt->client_mon) {
        zmq_close(rt->client_mon);
        rt->client_mon = NULL;
    }
    if (rt->zap) {
        zmq_close(rt->zap);
        rt->zap = NULL;
    }
    free(rt->fd_closed);
    rt->fd_closed = NULL;
    rt->fd_closed_cap = 0;
}

int frontend_send(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                  const void *buf, size_t len)
{
    int flags = ZMQ_DONTWAIT | ZMQ_SNDMORE;
    if (zmq_send(rt->clients, ident, (size_t)ident_len, flags) == -1)
        goto fail;
    /* once the routing id frame is accepted the rest of the message is too */
    if (delim && zmq_send(rt->clients, "", 0, flags) == -1)
        goto fail;
    if (zmq_send(rt->clients, buf, len, ZMQ_DONTWAIT) == -1)
        goto fail;
    return DERAS_OK;
fail:;
    int err = zmq_errno();
    rt->st.send_failures++;
    log_debug("client send failed (%s): ending its requests", zmq_strerror(err));
    relay_mark_gone(rt, ident, ident_len);
    return deras_fail(DERAS_ECLOSED, "client unreachable: %s", zmq_strerror(err));
}

void frontend_error(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                    const char *id, enum proto_error_code code, const char *msg)
{
    const void *buf;
    size_t len;
    if (code > PE_NONE && code < PE_N_CODES)
        rt->st.errors[code]++;
    log_debug("error %s for request '%s': %s", proto_error_name(code), id ? id : "", msg);
    if (proto_encode_error(rt->penc, id ? id : "", code, msg, &buf, &len) == DERAS_OK)
        frontend_send(rt, ident, ident_len, delim, buf, len);
}

/* ---- requests ---- */

static uint64_t random_seed(void)
{
    static uint64_t x;
    if (!x)
        x = (uint64_t)router_now_us() * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

/* Check q against the model and tokenize its prompt into rt->tok_buf (text) or leave
 * it in q (ids). Fills *ids / *n_ids. PE_NONE, or the code with msg filled. */
static enum proto_error_code check_request(router_t *rt, const proto_request *q,
                                           const int32_t **ids, int *n_ids, char *msg, size_t cap)
{
    const req_params *p = &q->params;
    for (int i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= rt->vocab_size) {
            snprintf(msg, cap, "stop_token_ids[%d] = %d is outside the vocabulary [0, %d)", i,
                     (int)p->stop_ids[i], rt->vocab_size);
            return PE_TOKEN_OUT_OF_RANGE;
        }
    const logit_bias *b = &p->sp.logit_bias;
    for (int i = 0; i < b->n; i++)
        if (b->ids[i] >= rt->vocab_size) { /* the decoder refused negative ids */
            snprintf(msg, cap, "logit_bias token %d is outside the vocabulary [0, %d)",
                     (int)b->ids[i], rt->vocab_size);
            return PE_TOKEN_OUT_OF_RANGE;
        }
    for (int i = 0; i < q->n_stops; i++)
        if (q->stop_lens[i] == 0 || memchr(q->stops[i], '\0', q->stop_lens[i])) {
            snprintf(msg, cap, "stop[%d] is empty or holds a NUL byte", i);
            return PE_INVALID_FIELD;
        }
    if (q->prompt_ids) {
        for (int i = 0; i < q->n_prompt_ids; i++)
            if (q->prompt_ids[i] < 0 || q->prompt_ids[i] >= rt->vocab_size) {
                snprintf(msg, cap, "prompt_ids[%d] = %d is outside the vocabulary [0, %d)", i,
                         (int)q->prompt_ids[i], rt->vocab_size);
                return PE_TOKEN_OUT_OF_RANGE;
            }
        *ids = q->prompt_ids;
        *n_ids = q->n_prompt_ids;
    } else {
        size_t n = 0;
        int rc = tokenizer_encode(rt->tok, q->prompt ? q->prompt : "", q->prompt_len,
                                  q->add_special_tokens, true, rt->tok_buf, rt->tok_cap, &n);
        if (rc == DERAS_EFORMAT) {
            snprintf(msg, cap, "prompt: %s", deras_errmsg());
            return PE_INVALID_UTF8;
        }
        if (rc && rc != DERAS_ERANGE) {
            snprintf(msg, cap, "tokenizing the prompt failed: %s", deras_errmsg());
            return PE_INTERNAL;
        }
        *ids = rt->tok_buf;
        *n_ids = n > (size_t)INT32_MAX ? INT32_MAX : (int)n; /* ERANGE: too long, caught below */
    }
    if (*n_ids == 0) {
        snprintf(msg, cap, "the prompt is empty (0 tokens)");
        return PE_INVALID_FIELD;
    }
    int64_t need = (int64_t)*n_ids + p->max_tokens;
    if (need > rt->ctx_len) {
        snprintf(msg, cap,
                 "prompt (%d tokens) + max_tokens (%d) = %lld exceeds the model's context of %d "
                 "tokens",
                 *n_ids, p->max_tokens, (long long)need, rt->ctx_len);
        return PE_CONTEXT_LENGTH_EXCEEDED;
    }
    return PE_NONE;
}

/* A decoded request ends with an error reply before admission (counted as a request that
 * ended with finish_reason "error" in the metrics). */
static void refuse(router_t *rt, const uint8_t *ident, int ident_len, bool delim, const char *id,
                   enum proto_error_code code, const char *msg)
{
    metrics_request_error(rt->metrics);
    frontend_error(rt, ident, ident_len, delim, id, code, msg);
}

static void handle_request(router_t *rt, const uint8_t *ident, int ident_len, bool delim, int fd,
                           const proto_request *q)
{
    char msg[256];
    rt->st.requests++;
    if (rt->draining) {
        refuse(rt, ident, ident_len, delim, q->id, PE_SHUTTING_DOWN,
                       "the router is shutting down");
        return;
    }
    if (rq_find_key(rt->rqs, ident, ident_len, q->id)) {
        snprintf(msg, sizeof msg, "request id '%s' is already live on this connection", q->id);
        refuse(rt, ident, ident_len, delim, q->id, PE_DUPLICATE_ID, msg);
        return;
    }
    /* the cheap cap first: a flood is refused before any tokenizing */
    const int n = q->params.n;
    if (n <= rt->o.max_queued_requests && dispatch_check(rt->disp, n, 0)) {
        refuse(rt, ident, ident_len, delim, q->id, PE_BUSY, deras_errmsg());
        return;
    }
    const int32_t *ids;
    int n_ids;
    enum proto_error_code code = check_request(rt, q, &ids, &n_ids, msg, sizeof msg);
    if (code != PE_NONE) {
        refuse(rt, ident, ident_len, delim, q->id, code, msg);
        return;
    }
    if (n > rt->o.max_queued_requests) {
        snprintf(msg, sizeof msg, "n = %d exceeds --max-queued-requests (%d)", n,
                 rt->o.max_queued_requests);
        refuse(rt, ident, ident_len, delim, q->id, PE_LIMIT_EXCEEDED, msg);
        return;
    }
    if (n_ids > rt->o.max_queued_tokens) {
        snprintf(msg, sizeof msg, "prompt of %d tokens exceeds --max-queued-tokens (%lld)", n_ids,
                 (long long)rt->o.max_queued_tokens);
        refuse(rt, ident, ident_len, delim, q->id, PE_LIMIT_EXCEEDED, msg);
        return;
    }
    if (dispatch_check(rt->disp, n, n_ids)) {
        refuse(rt, ident, ident_len, delim, q->id, PE_BUSY, deras_errmsg());
        return;
    }

    rq_t *r;
    if (rq_acquire(rt->rqs, &r) || rq_reserve_prompt(r, n_ids))
        goto nomem;
    int64_t now = router_now_us();
    memcpy(r->ident, ident, (size_t)ident_len);
    r->ident_len = ident_len;
    r->delim = delim;
    r->fd = fd;
    snprintf(r->id, sizeof r->id, "%s", q->id);
    memcpy(r->prompt, ids, (size_t)n_ids * sizeof *ids);
    r->n_prompt = n_ids;
    r->params = q->params;
    if (!q->has_seed)
        r->params.seed = random_seed();
    r->stream = q->stream;
    r->n_stops = q->n_stops;
    for (int i = 0; i < q->n_stops; i++) {
        memcpy(r->stops[i], q->stops[i], q->stop_lens[i]);
        r->stop_lens[i] = q->stop_lens[i];
    }
    r->t_recv_us = now;
    r->deadline_us = q->deadline_ms > 0 ? now + q->deadline_ms * 1000 : 0;
    int rc = rq_start_samples(rt->rqs, r);
    if (rc == DERAS_EINVAL) {
        refuse(rt, ident, ident_len, delim, q->id, PE_INVALID_FIELD, deras_errmsg());
        rq_discard(rt->rqs, r);
        return;
    }
    if (rc || rq_insert(rt->rqs, r))
        goto nomem;
    dispatch_admit(rt->disp, r, now);
    if (rt->o.log_prompts && q->prompt)
        log_info("request '%s': %d prompt tokens, prompt: %.*s", r->id, n_ids, (int)q->prompt_len,
                 q->prompt);
    else if (rt->o.log_prompts)
        log_info("request '%s': %d prompt token ids", r->id, n_ids);
    else
        log_debug("request '%s': %d prompt tokens, n %d, max_tokens %d%s", r->id, n_ids,
                  r->params.n, r->params.max_tokens, r->stream ? ", stream" : "");
    dispatch_run(rt->disp, now);
    return;
nomem:
    if (r)
        rq_discard(rt->rqs, r);
    log_error("request '%s': %s", q->id, deras_errmsg());
    refuse(rt, ident, ident_len, delim, q->id, PE_INTERNAL, "out of memory");
}

static void handle_cancel(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                          const char *id)
{
    rt->st.cancels++;
    rq_t *r = rq_find_key(rt->rqs, ident, ident_len, id);
    if (!r) {
        char msg[160];
        snprintf(msg, sizeof msg, "no live request '%s' on this connection", id);
        frontend_error(rt, ident, ident_len, delim, id, PE_UNKNOWN_REQUEST, msg);
        return;
    }
    relay_abort(rt, r, "cancelled");
}

static void handle_ping(router_t *rt, const uint8_t *ident, int ident_len, bool delim)
{
    rt->st.pings++;
    int n = workers_status(rt->workers, rt->pong, WORKERS_MAX);
    const void *buf;
    size_t len;
    if (proto_encode_pong(rt->penc, rt->pong, n, &buf, &len) == DERAS_OK)
        frontend_send(rt, ident, ident_len, delim, buf, len);
}

/* Closed connection fds, until a new connection reuses them (rt->fd_closed: one byte per
 * fd, grown on demand; fds are small integers). Without memory a frame is simply not
 * recognised as stale. */
static void mark_fd(router_t *rt, int fd, bool closed)
{
    if (fd < 0 || fd > (1 << 24))
        return;
    if ((size_t)fd >= rt->fd_closed_cap) {
        if (!closed)
            return;
        size_t cap = rt->fd_closed_cap ? rt->fd_closed_cap : 1024;
        while (cap <= (size_t)fd)
            cap *= 2;
        uint8_t *p = realloc(rt->fd_closed, cap);
        if (!p)
            return;
        memset(p + rt->fd_closed_cap, 0, cap - rt->fd_closed_cap);
        rt->fd_closed = p;
        rt->fd_closed_cap = cap;
    }
    rt->fd_closed[fd] = closed;
}

static bool fd_is_closed(const router_t *rt, int fd)
{
    return fd >= 0 && (size_t)fd < rt->fd_closed_cap && rt->fd_closed[fd];
}

/* One client message: f[0] routing id, f[1..n-1] the rest; `extra` frames beyond three
 * were already dropped. */
static void handle_frames(router_t *rt, zmq_msg_t *f, int n, int extra)
{
    const uint8_t *ident = zmq_msg_data(&f[0]);
    int ident_len = (int)zmq_msg_size(&f[0]);
    if (ident_len < 1 || ident_len > RQ_MAX_IDENTITY)
        return;
    int fd = zmq_msg_get(&f[n - 1], ZMQ_SRCFD);
    if (fd_is_closed(rt, fd)) {
        rt->st.stale_frames++; /* its connection closed: nobody would hear the answer */
        return;
    }
    bool delim = n >= 3 && zmq_msg_size(&f[1]) == 0;
    zmq_msg_t *payload = NULL;
    if (n == 2)
        payload = &f[1];
    else if (n == 3 && delim && extra == 0)
        payload = &f[2];
    if (!payload) {
        rt->st.bad_envelopes++;
        frontend_error(rt, ident, ident_len, delim || (n == 2 && !zmq_msg_size(&f[1])), "",
                       PE_MALFORMED,
                       "a message is one frame (DEALER) or an empty delimiter and one frame (REQ)");
        return;
    }
    proto_client_msg m;
    proto_error err;
    if (proto_decode_client(rt->pdec, zmq_msg_data(payload), zmq_msg_size(payload), &m, &err)) {
        frontend_error(rt, ident, ident_len, delim, err.id, err.code, err.message);
        return;
    }
    switch (m.type) {
    case PROTO_REQUEST: handle_request(rt, ident, ident_len, delim, fd, &m.req); break;
    case PROTO_CANCEL: handle_cancel(rt, ident, ident_len, delim, m.cancel_id); break;
    case PROTO_PING: handle_ping(rt, ident, ident_len, delim); break;
    default:
        frontend_error(rt, ident, ident_len, delim, "", PE_UNKNOWN_TYPE, "unknown message type");
    }
}

void frontend_recv(router_t *rt, int budget)
{
    for (int i = 0; i < budget; i++) {
        /* a client's disconnect must be seen before frames that could reuse its fd */
        frontend_monitor(rt);
        zmq_msg_t f[3];
        int extra, n = router_recv_frames(rt->clients, f, 3, &extra);
        if (n == 0) {
            int err = zmq_errno();
            if (err != EAGAIN && err != EINTR)
                log_warn("client socket: zmq_msg_recv: %s", zmq_strerror(err));
            return;
        }
        rt->st.frames++;
        if (n >= 2)
            handle_frames(rt, f, n, extra);
        for (int k = 0; k < n; k++)
            zmq_msg_close(&f[k]);
    }
}

void frontend_monitor(router_t *rt)
{
    uint16_t event;
    uint32_t value;
    while (router_monitor_next(rt->client_mon, &event, &value)) {
        switch (event) {
        case ZMQ_EVENT_ACCEPTED:
            mark_fd(rt, (int)value, false);
            break;
        case ZMQ_EVENT_DISCONNECTED:
            rt->st.disconnects++;
            mark_fd(rt, (int)value, true);
            relay_fd_closed(rt, (int)value);
            break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
            rt->st.protocol_drops++;
            log_debug("client connection dropped by ZeroMQ: protocol error 0x%x", value);
            break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            log_debug("client handshake failed (event 0x%x, %u)", event, value);
            break;
        default:
            break;
        }
    }
}
