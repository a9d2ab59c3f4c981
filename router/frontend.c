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
 * tokenized here; a chat's messages are first rendered by the model's chat template,
 * chat.h) plus max_tokens against the model's context, the client's live ids, and the
 * admission caps, and a structured output's grammar compiled (constraint.h: a bad one is
 * invalid_grammar here, never in a worker). These checks and the admission are frontend_admit, the one way in for
 * the HTTP API's requests too (http_api.c). A failed check is one `error` reply; the
 * socket never blocks (every send is ZMQ_DONTWAIT) and a client that is gone (EHOSTUNREACH under
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
 *
 * Connection cap: the monitor's ACCEPTED and DISCONNECTED events feed a conn_guard
 * (conn_guard.h) sized from the descriptor budget (fd_budget.c); a connection that sends a
 * frame is proven. Beyond the cap the oldest connection that has sent nothing is shut
 * down (shutdown(2) on its fd, after checking the fd is still a connection of this socket;
 * libzmq then closes it), so a flood of silent connections cannot take the process to its
 * descriptor limit, where libzmq aborts. ZMTP must be done within CLIENT_HANDSHAKE_MS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <zmq.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "common/wire/zmq_check.h"
#include "router/conn_guard.h"
#include "router/constraint.h"
#include "router/router.h"

#define CLIENT_MON_ADDR "inproc://deras-client-monitor"
#define CLIENT_SNDHWM 100000   /* replies queued per client before it counts as not reading */
#define CLIENT_RCVHWM 1000
#define CLIENT_FRAME_HARD_CAP ((int64_t)128 << 20) /* answered above the protocol cap, up to this */
#define CLIENT_ZMTP_IVL_MS 5000
#define CLIENT_HANDSHAKE_MS 10000 /* a connection that has not done ZMTP by then is closed */
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
    if (rt->curve && (rc = curve_apply(rt->curve, rt->clients)))
        return rc;
    int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if ((rc = ZMQ_SET_INT(rt->clients, ZMQ_HANDSHAKE_IVL, CLIENT_HANDSHAKE_MS)) ||
        (rc = router_monitor_open(rt, rt->clients, CLIENT_MON_ADDR, events, &rt->client_mon)) ||
        (rc = conn_guard_new(rt->fds.clients_max, rt->fds.limit, &rt->client_guard)) ||
        (rc = router_bind(rt->clients, rt->o.listen, "the client socket")))
        return rc;
    char ep[ROUTER_ADDR_MAX];
    size_t ep_len = sizeof ep;
    if (!strncmp(rt->o.listen, "tcp://", 6) &&
        zmq_getsockopt(rt->clients, ZMQ_LAST_ENDPOINT, ep, &ep_len) == 0) {
        const char *colon = strrchr(ep, ':');
        rt->client_port = colon ? atoi(colon + 1) : 0;
    }
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
    conn_guard_destroy(&rt->client_guard);
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

/* Tokenize text into rt->tok_buf (special-token text always matched as tokens; BOS/EOS
 * added when add_special), bounded: a text longer than the context stops being tokenized
 * there (context_length_exceeded). PE_NONE, or the code with msg filled. */
static enum proto_error_code tokenize(router_t *rt, const char *text, size_t len,
                                      bool add_special, const int32_t **ids, int *n_ids,
                                      char *msg, size_t cap)
{
    size_t n = 0;
    int rc = tokenizer_encode_bounded(rt->tok, text, len, add_special, true, rt->tok_buf,
                                      rt->tok_cap, &n);
    if (rc == DERAS_EFORMAT) {
        snprintf(msg, cap, "prompt: %s", deras_errmsg());
        return PE_INVALID_UTF8;
    }
    if (rc && rc != DERAS_ERANGE) {
        snprintf(msg, cap, "tokenizing the prompt failed: %s", deras_errmsg());
        return PE_INTERNAL;
    }
    *ids = rt->tok_buf;
    *n_ids = n > (size_t)INT32_MAX ? INT32_MAX : (int)n;
    if (rc == DERAS_ERANGE) {
        snprintf(msg, cap, "prompt (more than %d tokens) exceeds the model's context of %d "
                 "tokens", rt->ctx_len, rt->ctx_len);
        return PE_CONTEXT_LENGTH_EXCEEDED;
    }
    return PE_NONE;
}

/* Check q against the model and tokenize its prompt into rt->tok_buf (text, or a chat
 * rendered by the model's template) or leave it in q (ids). Fills *ids / *n_ids. PE_NONE,
 * or the code with msg filled. */
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
    } else if (q->messages) {
        char *text;
        size_t len;
        bool add_special;
        enum proto_error_code code = chat_render(rt->chat, q, &text, &len, &add_special, msg,
                                                 cap);
        if (code != PE_NONE)
            return code;
        code = tokenize(rt, text, len, add_special, ids, n_ids, msg, cap);
        free(text);
        if (code != PE_NONE)
            return code;
    } else {
        enum proto_error_code code = tokenize(rt, q->prompt ? q->prompt : "", q->prompt_len,
                                              q->add_special_tokens, ids, n_ids, msg, cap);
        if (code != PE_NONE)
            return code;
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

enum proto_error_code frontend_prompt(router_t *rt, const proto_request *q, const int32_t **ids,
                                      int *n_ids, char *msg, size_t cap)
{
    return check_request(rt, q, ids, n_ids, msg, cap);
}

/* The checks and the admission, without the reply: PE_NONE or the code with msg. */
static enum proto_error_code admit(router_t *rt, const rq_origin *o, const proto_request *q,
                                   char *msg, size_t cap)
{
    if (rt->draining) {
        snprintf(msg, cap, "the router is shutting down");
        return PE_SHUTTING_DOWN;
    }
    if (rq_find_key(rt->rqs, o->ident, o->ident_len, q->id)) {
        snprintf(msg, cap, "request id '%s' is already live on this connection", q->id);
        return PE_DUPLICATE_ID;
    }
    /* the cheap cap first: a flood is refused before any tokenizing */
    const int n = q->params.n;
    if (n <= rt->o.max_queued_requests && dispatch_check(rt->disp, n, 0)) {
        snprintf(msg, cap, "%s", deras_errmsg());
        return PE_BUSY;
    }
    req_params params = q->params;
    if (q->messages && chat_add_stops(rt->chat, &params)) {
        snprintf(msg, cap, "%s", deras_errmsg());
        return PE_LIMIT_EXCEEDED;
    }
    const int32_t *ids;
    int n_ids;
    enum proto_error_code code = check_request(rt, q, &ids, &n_ids, msg, cap);
    if (code != PE_NONE)
        return code;
    if (n > rt->o.max_queued_requests) {
        snprintf(msg, cap, "n = %d exceeds --max-queued-requests (%d)", n,
                 rt->o.max_queued_requests);
        return PE_LIMIT_EXCEEDED;
    }
    if (n_ids > rt->o.max_queued_tokens) {
        snprintf(msg, cap, "prompt of %d tokens exceeds --max-queued-tokens (%lld)", n_ids,
                 (long long)rt->o.max_queued_tokens);
        return PE_LIMIT_EXCEEDED;
    }
    if (dispatch_check(rt->disp, n, n_ids)) {
        snprintf(msg, cap, "%s", deras_errmsg());
        return PE_BUSY;
    }
    char *gbnf;
    size_t gbnf_len;
    if ((code = constraint_gbnf(q, &gbnf, &gbnf_len, msg, cap)) != PE_NONE)
        return code;

    rq_t *r;
    if (rq_acquire(rt->rqs, &r) || rq_reserve_prompt(r, n_ids)) {
        free(gbnf);
        goto nomem;
    }
    rq_set_grammar(r, gbnf, gbnf_len);
    int64_t now = router_now_us();
    memcpy(r->ident, o->ident, (size_t)o->ident_len);
    r->ident_len = o->ident_len;
    r->delim = o->delim;
    r->fd = o->fd;
    r->http = o->http;
    snprintf(r->id, sizeof r->id, "%s", q->id);
    memcpy(r->prompt, ids, (size_t)n_ids * sizeof *ids);
    r->n_prompt = n_ids;
    r->params = params;
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
        snprintf(msg, cap, "%s", deras_errmsg());
        r->http = NULL;
        rq_discard(rt->rqs, r);
        return PE_INVALID_FIELD;
    }
    if (rc || rq_insert(rt->rqs, r))
        goto nomem;
    if (r->http)
        http_api_bind(r->http, r);
    dispatch_admit(rt->disp, r, now);
    if (rt->o.log_prompts && q->prompt)
        log_info("request '%s': %d prompt tokens, prompt: %.*s", r->id, n_ids, (int)q->prompt_len,
                 q->prompt);
    else if (rt->o.log_prompts && q->messages)
        log_info("request '%s': %d prompt tokens from a chat of %zu messages", r->id, n_ids,
                 json_array_size(q->messages));
    else if (rt->o.log_prompts)
        log_info("request '%s': %d prompt token ids", r->id, n_ids);
    else
        log_debug("request '%s': %d prompt tokens, n %d, max_tokens %d%s", r->id, n_ids,
                  r->params.n, r->params.max_tokens, r->stream ? ", stream" : "");
    dispatch_run(rt->disp, now); /* may end r at once (and with it an HTTP call's wait) */
    return PE_NONE;
nomem:
    if (r) {
        r->http = NULL;
        rq_discard(rt->rqs, r);
    }
    log_error("request '%s': %s", q->id, deras_errmsg());
    snprintf(msg, cap, "out of memory");
    return PE_INTERNAL;
}

enum proto_error_code frontend_admit(router_t *rt, const rq_origin *o, const proto_request *q,
                                     char *msg, size_t cap)
{
    rt->st.requests++;
    enum proto_error_code code = admit(rt, o, q, msg, cap);
    if (code != PE_NONE) {
        /* counted as a request that ended with finish_reason "error" in the metrics */
        metrics_request_error(rt->metrics);
        stats_line_request_refused(q->id, code);
    }
    return code;
}

static void handle_request(router_t *rt, const uint8_t *ident, int ident_len, bool delim, int fd,
                           const proto_request *q)
{
    char msg[256];
    rq_origin o = {.ident = ident, .ident_len = ident_len, .delim = delim, .fd = fd};
    enum proto_error_code code = frontend_admit(rt, &o, q, msg, sizeof msg);
    /* duplicate_id carries id "": an error with the live request's id would read as that
     * request's end, and its stream goes on (its chunks and final still come) */
    if (code != PE_NONE)
        frontend_error(rt, ident, ident_len, delim, code == PE_DUPLICATE_ID ? "" : q->id, code,
                       msg);
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
    conn_guard_proven(rt->client_guard, fd); /* a peer that speaks is kept over a flood */
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

/* Whether fd is a connection of the client socket: a tcp socket on its port, or a unix
 * socket on its path. The fd came from an ACCEPTED event that may be stale (closed since,
 * the number reused by a worker's or an HTTP connection); this keeps a shutdown to client
 * connections. */
static bool is_client_conn(const router_t *rt, int fd)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len))
        return false;
    if (sa.ss_family == AF_INET)
        return rt->client_port && ntohs(((struct sockaddr_in *)&sa)->sin_port) == rt->client_port;
    if (sa.ss_family == AF_INET6)
        return rt->client_port &&
               ntohs(((struct sockaddr_in6 *)&sa)->sin6_port) == rt->client_port;
    if (sa.ss_family == AF_UNIX && !strncmp(rt->o.listen, "ipc://", 6))
        return !strncmp(((struct sockaddr_un *)&sa)->sun_path, rt->o.listen + 6,
                        sizeof ((struct sockaddr_un *)&sa)->sun_path);
    return false;
}

/* A new connection beyond the cap (rt->fds.clients_max): the guard's victim is shut down,
 * libzmq then closes it and reports the disconnect. No descriptor runs out, so no
 * listener fails to accept (libzmq aborts on EMFILE at an ipc listener). */
static void accepted(router_t *rt, int fd)
{
    int victim = conn_guard_open(rt->client_guard, fd, router_now_us() / 1e6);
    if (victim < 0 || !is_client_conn(rt, victim))
        return;
    shutdown(victim, SHUT_RDWR);
    rt->st.conn_evicted++;
    double now = router_now_us() / 1e6;
    if (now >= rt->next_cap_log) {
        rt->next_cap_log = now + 10.0;
        log_warn("client connections at the cap (%d, from the descriptor limit %d): shutting "
                 "down the oldest that has sent nothing (%llu so far)", rt->fds.clients_max,
                 rt->fds.limit, (unsigned long long)rt->st.conn_evicted);
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
            accepted(rt, (int)value);
            break;
        case ZMQ_EVENT_DISCONNECTED:
            rt->st.disconnects++;
            mark_fd(rt, (int)value, true);
            conn_guard_closed(rt->client_guard, (int)value);
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
