/* SPDX-License-Identifier: Apache-2.0 */
/* fake_frontend.c - a stand-in for deras-router in a thread (see fake_frontend.h).
 *
 * One thread owns the ROUTER socket: it polls with a short timeout, answers what arrives,
 * then emits one token for every live request that is due. Live requests sit in a fixed
 * array; the fake is small on purpose and trusts the codec for validation.
 */
#include "fake_frontend.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/wire/protocol.h"
#include "common/base/status.h"

#define MAX_LIVE 1024

typedef struct fake_req {
    bool used, stream;
    uint8_t ident[256];
    size_t ident_len;
    char id[PROTO_MAX_ID + 1];
    int n, limit, generated[REQ_MAX_N], prompt_tokens, n_done;
    int hold;                    /* "hold:K": K tokens, then none until cancelled; -1: none */
    bool done[REQ_MAX_N];
    finish_reason finish;
    double delay, next_at, t0, t_first;
} fake_req;

struct fake_frontend {
    void *ctx, *sock;
    pthread_t thread;
    atomic_int quit;
    atomic_int frames_sent;
    char address[64];
    proto_decoder_t *dec;
    proto_encoder_t *enc;
    fake_req live[MAX_LIVE];
    fake_frontend_stats stats;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void send_to(fake_frontend *r, const uint8_t *ident, size_t ident_len, const void *buf,
                    size_t len)
{
    zmq_send(r->sock, ident, ident_len, ZMQ_SNDMORE);
    zmq_send(r->sock, buf, len, 0);
    atomic_fetch_add(&r->frames_sent, 1);
}

static void send_error(fake_frontend *r, const uint8_t *ident, size_t ident_len, const char *id,
                       enum proto_error_code code, const char *message)
{
    const void *buf;
    size_t len;
    if (!proto_encode_error(r->enc, id, code, message, &buf, &len))
        send_to(r, ident, ident_len, buf, len);
}

static void send_final(fake_frontend *r, fake_req *q, int k, finish_reason reason,
                       const char *abort_reason)
{
    double now = now_s();
    proto_usage u = {.prompt_tokens = q->prompt_tokens, .completion_tokens = q->generated[k],
                     .queue_ms = 0.1, .ttft_ms = ((q->t_first ? q->t_first : now) - q->t0) * 1e3,
                     .total_ms = (now - q->t0) * 1e3};
    char text[8192];
    int32_t ids[1024];
    size_t tl = 0;
    int n = 0;
    if (!q->stream)
        for (; n < q->generated[k] && n < 1024 && tl + 16 < sizeof text; n++) {
            ids[n] = 100 + 10 * k + n;
            tl += (size_t)snprintf(text + tl, sizeof text - tl, "w%d ", n);
        }
    const void *buf;
    size_t len;
    if (!proto_encode_final(r->enc, q->id, k, reason, abort_reason, &u, q->stream ? NULL : text,
                            tl, q->stream ? NULL : ids, n, NULL, &buf, &len))
        send_to(r, q->ident, q->ident_len, buf, len);
    q->done[k] = true;
    if (++q->n_done == q->n)
        q->used = false;
}

static fake_req *find_live(fake_frontend *r, const uint8_t *ident, size_t ident_len, const char *id)
{
    for (int i = 0; i < MAX_LIVE; i++) {
        fake_req *q = &r->live[i];
        if (q->used && q->ident_len == ident_len && !memcmp(q->ident, ident, ident_len) &&
            !strcmp(q->id, id))
            return q;
    }
    return NULL;
}

static void on_request(fake_frontend *r, const uint8_t *ident, size_t ident_len,
                       const proto_request *req)
{
    r->stats.requests++;
    if (find_live(r, ident, ident_len, req->id))
        return send_error(r, ident, ident_len, req->id, PE_DUPLICATE_ID, "id is already live");
    char prompt[128] = "";
    if (req->prompt)
        snprintf(prompt, sizeof prompt, "%.*s",
                 (int)(req->prompt_len < 127 ? req->prompt_len : 127), req->prompt);
    if (!strncmp(prompt, "error:", 6)) {
        for (int c = 1; c < PE_N_CODES; c++)
            if (!strcmp(proto_error_name(c), prompt + 6))
                return send_error(r, ident, ident_len, req->id, c,
                                  "fake failure requested by the prompt");
        return send_error(r, ident, ident_len, req->id, PE_INTERNAL, "unknown code in prompt");
    }
    if (!strcmp(prompt, "silent"))
        return;
    fake_req *q = NULL;
    for (int i = 0; i < MAX_LIVE && !q; i++)
        if (!r->live[i].used)
            q = &r->live[i];
    if (!q)
        return send_error(r, ident, ident_len, req->id, PE_BUSY, "fake router full");
    memset(q, 0, sizeof *q);
    q->used = true;
    memcpy(q->ident, ident, ident_len);
    q->ident_len = ident_len;
    snprintf(q->id, sizeof q->id, "%s", req->id);
    q->n = req->params.n;
    q->stream = req->stream;
    q->limit = req->params.max_tokens;
    q->finish = FINISH_LENGTH;
    q->hold = !strncmp(prompt, "hold:", 5) ? atoi(prompt + 5) : -1;
    if (!strncmp(prompt, "stop:", 5)) {
        int k = atoi(prompt + 5);
        if (k < q->limit)
            q->limit = k;
        q->finish = FINISH_STOP;
    }
    q->prompt_tokens = req->prompt ? 1 : req->n_prompt_ids;
    for (size_t i = 0; req->prompt && i < req->prompt_len; i++)
        q->prompt_tokens += req->prompt[i] == ' ';
    q->delay = !strcmp(prompt, "slow") ? 0.02 : 0;
    q->t0 = q->next_at = now_s();
}

static void on_cancel(fake_frontend *r, const uint8_t *ident, size_t ident_len, const char *id)
{
    r->stats.cancels++;
    snprintf(r->stats.last_cancel_id, sizeof r->stats.last_cancel_id, "%s", id);
    fake_req *q = find_live(r, ident, ident_len, id);
    if (!q)
        return send_error(r, ident, ident_len, id, PE_UNKNOWN_REQUEST, "no such live request");
    for (int k = 0; k < q->n; k++)
        if (!q->done[k])
            send_final(r, q, k, FINISH_ABORT, "cancelled");
}

static void on_ping(fake_frontend *r, const uint8_t *ident, size_t ident_len)
{
    r->stats.pings++;
    proto_worker_status w = {.name = "fake0", .state = "ready", .kv_blocks_free = 100,
                             .kv_blocks_total = 128};
    for (int i = 0; i < MAX_LIVE; i++)
        w.running += r->live[i].used;
    const void *buf;
    size_t len;
    if (!proto_encode_pong(r->enc, &w, 1, &buf, &len))
        send_to(r, ident, ident_len, buf, len);
}

static void step(fake_frontend *r)
{
    double now = now_s();
    for (int i = 0; i < MAX_LIVE; i++) {
        fake_req *q = &r->live[i];
        if (!q->used || now < q->next_at)
            continue;
        q->next_at = now + q->delay;
        if (!q->t_first)
            q->t_first = now;
        for (int k = 0; k < q->n && q->used; k++) {
            if (q->done[k])
                continue;
            if (q->hold >= 0 && q->generated[k] >= q->hold)
                continue; /* held: only a cancel ends it */
            if (q->generated[k] >= q->limit) {
                send_final(r, q, k, q->finish, NULL);
                continue;
            }
            int t = q->generated[k]++;
            if (!q->stream)
                continue;
            int32_t id = 100 + 10 * k + t;
            char text[16];
            int tl = snprintf(text, sizeof text, "w%d ", t);
            const void *buf;
            size_t len;
            if (!proto_encode_chunk(r->enc, q->id, k, &id, 1, text, (size_t)tl, NULL, &buf, &len))
                send_to(r, q->ident, q->ident_len, buf, len);
        }
    }
}

static bool any_due(const fake_frontend *r, int *wait_ms)
{
    double now = now_s(), next = now + 0.01;
    bool any = false;
    for (int i = 0; i < MAX_LIVE; i++)
        if (r->live[i].used) {
            any = true;
            if (r->live[i].next_at < next)
                next = r->live[i].next_at;
        }
    *wait_ms = next <= now ? 0 : (int)((next - now) * 1e3) + 1;
    return any;
}

static void *run(void *arg)
{
    fake_frontend *r = arg;
    uint8_t ident[256], body[1 << 16];
    while (!atomic_load(&r->quit)) {
        int wait;
        if (!any_due(r, &wait))
            wait = 10;
        zmq_pollitem_t it = {.socket = r->sock, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, wait) > 0) {
            int il = zmq_recv(r->sock, ident, sizeof ident, 0);
            int more = 0;
            size_t ml = sizeof more;
            zmq_getsockopt(r->sock, ZMQ_RCVMORE, &more, &ml);
            int bl = more ? zmq_recv(r->sock, body, sizeof body, 0) : -1;
            if (il < 0 || bl < 0 || bl > (int)sizeof body)
                continue;
            proto_client_msg m;
            proto_error err;
            if (proto_decode_client(r->dec, body, (size_t)bl, &m, &err)) {
                r->stats.decode_errors++;
                send_error(r, ident, (size_t)il, err.id, err.code, err.message);
            } else if (m.type == PROTO_REQUEST) {
                on_request(r, ident, (size_t)il, &m.req);
            } else if (m.type == PROTO_CANCEL) {
                on_cancel(r, ident, (size_t)il, m.cancel_id);
            } else if (m.type == PROTO_PING) {
                on_ping(r, ident, (size_t)il);
            }
        }
        step(r);
    }
    return NULL;
}

fake_frontend *fake_frontend_start(const char *curve_secret_key)
{
    fake_frontend *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    proto_limits lim;
    proto_limits_default(&lim);
    if (proto_decoder_new(&lim, &r->dec) || proto_encoder_new(&r->enc))
        goto fail;
    r->ctx = zmq_ctx_new();
    r->sock = r->ctx ? zmq_socket(r->ctx, ZMQ_ROUTER) : NULL;
    if (!r->sock)
        goto fail;
    int zero = 0, one = 1;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(r->sock, ZMQ_SNDHWM, &zero, sizeof zero);
    if (curve_secret_key && (zmq_setsockopt(r->sock, ZMQ_CURVE_SERVER, &one, sizeof one) ||
                             zmq_setsockopt(r->sock, ZMQ_CURVE_SECRETKEY, curve_secret_key, 40)))
        goto fail;
    size_t al = sizeof r->address;
    if (zmq_bind(r->sock, "tcp://127.0.0.1:*") ||
        zmq_getsockopt(r->sock, ZMQ_LAST_ENDPOINT, r->address, &al))
        goto fail;
    if (pthread_create(&r->thread, NULL, run, r))
        goto fail;
    return r;
fail:
    if (r->sock)
        zmq_close(r->sock);
    if (r->ctx)
        zmq_ctx_term(r->ctx);
    proto_decoder_destroy(&r->dec);
    proto_encoder_destroy(&r->enc);
    free(r);
    return NULL;
}

const char *fake_frontend_address(const fake_frontend *r)
{
    return r->address;
}

int fake_frontend_frames_sent(const fake_frontend *r)
{
    return atomic_load(&((fake_frontend *)r)->frames_sent);
}

void fake_frontend_stop(fake_frontend **pr, fake_frontend_stats *stats)
{
    if (!pr || !*pr)
        return;
    fake_frontend *r = *pr;
    atomic_store(&r->quit, 1);
    pthread_join(r->thread, NULL);
    if (stats)
        *stats = r->stats;
    zmq_close(r->sock);
    zmq_ctx_term(r->ctx);
    proto_decoder_destroy(&r->dec);
    proto_encoder_destroy(&r->enc);
    free(r);
    *pr = NULL;
}
