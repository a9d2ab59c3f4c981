/* SPDX-License-Identifier: Apache-2.0 */
/* fake_router.h - a router for worker tests: a ZeroMQ ROUTER bound on an ipc path in a
 * fresh temporary directory, speaking common/wire/worker_proto.h, and a record of what the
 * worker sent (every STEP's tokens and finishes by request, REJECTs, the last load).
 *
 * One worker at a time (the routing id of the last frame received from the worker's own
 * socket is where frames go; its pulse thread's "<name>/hb" frames are recorded, never
 * answered). Every wait is bounded and fails the test with what it waited for, so a broken
 * worker makes a test fail, never hang.
 */
#ifndef DERAS_FAKE_ROUTER_H
#define DERAS_FAKE_ROUTER_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/status.h"
#include "common/wire/worker_proto.h"

#define FR_MAX_REQS 16
#define FR_MAX_N 4
#define FR_MAX_GEN 128
#define FR_MAX_REJECTS 16

typedef struct fr_sample {
    int n;                               /* tokens received (all of them counted) */
    int32_t tokens[FR_MAX_GEN];
    proto_logprob lps[FR_MAX_GEN];
    int finished;                        /* finishes received */
    wp_finish fin;
} fr_sample;

typedef struct fr_req {
    uint64_t rid;
    fr_sample s[FR_MAX_N];
} fr_req;

typedef struct fr_reject {
    uint64_t rid;
    enum proto_error_code code;
    char text[256];
} fr_reject;

typedef struct fake_router {
    void *ctx, *sock;
    char dir[64], endpoint[128];
    wp_decoder_t *dec;
    wp_encoder_t *enc;
    char peer[WPROTO_MAX_NAME + 1];
    size_t peer_len;
    /* what the worker sent */
    int n_hello, n_heartbeat, n_step;
    int n_pulse;                         /* heartbeats of its pulse thread ("<name>/hb") */
    wp_hello hello;                      /* the last HELLO */
    wp_load load;                        /* from the last HEARTBEAT or STEP */
    bool load_from_heartbeat;
    int max_tokens_per_step;             /* most tokens one STEP carried */
    fr_req reqs[FR_MAX_REQS];
    int n_reqs;
    fr_reject rejects[FR_MAX_REJECTS];
    int n_rejects;
    int n_bye, n_after_bye;              /* BYEs, and frames of any kind after the first */
    char bye[256];                       /* the last BYE's reason */
} fake_router;

static inline double fr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An ipc endpoint in a fresh temporary directory that nothing binds. */
static inline void fr_unbound_endpoint(char *dir, size_t dir_cap, char *ep, size_t ep_cap)
{
    snprintf(dir, dir_cap, "/tmp/deras-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(ep, ep_cap, "ipc://%s/workers.sock", dir);
}

static inline void fr_bind(fake_router *r)
{
    r->ctx = zmq_ctx_new();
    r->sock = zmq_socket(r->ctx, ZMQ_ROUTER);
    assert_non_null(r->sock);
    int linger = 0;
    zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(r->sock, r->endpoint))
        fail_msg("bind %s: %s", r->endpoint, zmq_strerror(zmq_errno()));
    r->peer_len = 0;
}

static inline fake_router *fr_new(void)
{
    fake_router *r = calloc(1, sizeof *r);
    assert_non_null(r);
    fr_unbound_endpoint(r->dir, sizeof r->dir, r->endpoint, sizeof r->endpoint);
    fr_bind(r);
    assert_int_equal(wp_decoder_new(16u << 20, &r->dec), DERAS_OK);
    assert_int_equal(wp_encoder_new(&r->enc), DERAS_OK);
    assert_non_null(r->dec);
    assert_non_null(r->enc);
    return r;
}

/* A router restart: close the socket (the worker's connection drops), bind a new one on
 * the same endpoint. The record of what the worker sent is kept. */
static inline void fr_restart(fake_router *r)
{
    zmq_close(r->sock);
    zmq_ctx_term(r->ctx);
    fr_bind(r);
}

static inline void fr_destroy(fake_router **rp)
{
    fake_router *r = *rp;
    if (!r)
        return;
    zmq_close(r->sock);
    zmq_ctx_term(r->ctx);
    wp_decoder_destroy(&r->dec);
    wp_encoder_destroy(&r->enc);
    char path[256];
    snprintf(path, sizeof path, "%s/workers.sock", r->dir);
    unlink(path);
    rmdir(r->dir);
    free(r);
    *rp = NULL;
}

static inline fr_req *fr_req_of(fake_router *r, uint64_t rid)
{
    for (int i = 0; i < r->n_reqs; i++)
        if (r->reqs[i].rid == rid)
            return &r->reqs[i];
    assert_true(r->n_reqs < FR_MAX_REQS);
    fr_req *q = &r->reqs[r->n_reqs++];
    memset(q, 0, sizeof *q);
    q->rid = rid;
    return q;
}

/* Record one decoded message from the worker. */
static inline void fr_record(fake_router *r, const wp_msg *m)
{
    if (r->n_bye)
        r->n_after_bye++;
    switch (m->type) {
    case WP_HELLO:
        r->n_hello++;
        r->hello = m->hello;
        break;
    case WP_HEARTBEAT:
        r->n_heartbeat++;
        r->load = m->load;
        r->load_from_heartbeat = true;
        break;
    case WP_STEP:
        r->n_step++;
        r->load = m->load;
        r->load_from_heartbeat = false;
        if (m->n_tokens > r->max_tokens_per_step)
            r->max_tokens_per_step = m->n_tokens;
        for (int i = 0; i < m->n_tokens; i++) {
            const wp_token *t = &m->tokens[i];
            assert_true(t->index >= 0 && t->index < FR_MAX_N);
            fr_sample *s = &fr_req_of(r, t->rid)->s[t->index];
            if (s->finished)
                fail_msg("request %llu sample %d: token after its finish",
                         (unsigned long long)t->rid, t->index);
            if (s->n < FR_MAX_GEN) {
                s->tokens[s->n] = t->lp.token_id;
                s->lps[s->n] = t->lp;
            }
            s->n++;
        }
        for (int i = 0; i < m->n_finishes; i++) {
            const wp_finish *f = &m->finishes[i];
            assert_true(f->index >= 0 && f->index < FR_MAX_N);
            fr_sample *s = &fr_req_of(r, f->rid)->s[f->index];
            s->finished++;
            s->fin = *f;
        }
        break;
    case WP_REJECT:
        assert_true(r->n_rejects < FR_MAX_REJECTS);
        r->rejects[r->n_rejects].rid = m->rid;
        r->rejects[r->n_rejects].code = m->code;
        snprintf(r->rejects[r->n_rejects].text, sizeof r->rejects[0].text, "%s", m->text);
        r->n_rejects++;
        break;
    case WP_BYE:
        r->n_bye++;
        snprintf(r->bye, sizeof r->bye, "%s", m->text);
        break;
    default:
        fail_msg("the worker sent a message of type %d, which only a router sends", (int)m->type);
    }
}

#define FR_PULSE 100 /* fr_recv's answer for a pulse: never a message type */

/* Receive and record one message within timeout_ms; its type, FR_PULSE for a heartbeat of
 * the worker's pulse thread (routing id "<name>/hb": counted, never answered, the load
 * not recorded, as deras-router does), or 0 on timeout. */
static inline int fr_recv(fake_router *r, int timeout_ms)
{
    zmq_pollitem_t it = {r->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return 0;
    zmq_msg_t id, body;
    zmq_msg_init(&id);
    zmq_msg_init(&body);
    assert_true(zmq_msg_recv(&id, r->sock, 0) >= 0);
    assert_true(zmq_msg_more(&id));
    assert_true(zmq_msg_recv(&body, r->sock, 0) >= 0);
    assert_false(zmq_msg_more(&body));
    wp_msg m;
    proto_error err;
    size_t id_len = zmq_msg_size(&id);
    if (id_len > 3 && !memcmp((char *)zmq_msg_data(&id) + id_len - 3, "/hb", 3)) {
        if (wp_decode(r->dec, zmq_msg_data(&body), zmq_msg_size(&body), &m, &err) ||
            m.type != WP_HEARTBEAT)
            fail_msg("the worker's pulse sent something other than a heartbeat");
        r->n_pulse++;
        zmq_msg_close(&id);
        zmq_msg_close(&body);
        return FR_PULSE;
    }
    r->peer_len = zmq_msg_size(&id) < sizeof r->peer - 1 ? zmq_msg_size(&id) : sizeof r->peer - 1;
    memcpy(r->peer, zmq_msg_data(&id), r->peer_len);
    r->peer[r->peer_len] = '\0';
    if (wp_decode(r->dec, zmq_msg_data(&body), zmq_msg_size(&body), &m, &err))
        fail_msg("undecodable frame from the worker: %s: %s", proto_error_name(err.code),
                 err.message);
    fr_record(r, &m);
    zmq_msg_close(&id);
    zmq_msg_close(&body);
    return (int)m.type;
}

/* Receive until cond(r, ctx) holds; fail after timeout_s naming `what`. */
static inline void fr_until(fake_router *r, double timeout_s, bool (*cond)(fake_router *, void *),
                            void *ctx, const char *what)
{
    double end = fr_now() + timeout_s;
    while (!cond(r, ctx)) {
        double left = end - fr_now();
        if (left <= 0)
            fail_msg("waited %.1f s for %s: did not happen", timeout_s, what);
        fr_recv(r, (int)(left * 1000) + 1);
    }
}

/* Receive until a message of `type` arrives; fail after timeout_s. */
static inline void fr_expect(fake_router *r, enum wproto_type type, double timeout_s)
{
    double end = fr_now() + timeout_s;
    for (;;) {
        double left = end - fr_now();
        if (left <= 0)
            fail_msg("waited %.1f s for a message of type %d from the worker", timeout_s, (int)type);
        if (fr_recv(r, (int)(left * 1000) + 1) == (int)type)
            return;
    }
}

static inline void fr_send(fake_router *r, const void *buf, size_t len)
{
    assert_true(r->peer_len > 0); /* a worker has spoken */
    assert_true(zmq_send(r->sock, r->peer, r->peer_len, ZMQ_SNDMORE) >= 0);
    assert_true(zmq_send(r->sock, buf, len, 0) >= 0);
}

static inline void fr_welcome(fake_router *r, int heartbeat_ms)
{
    const void *buf;
    size_t len;
    assert_int_equal(wp_encode_welcome(r->enc, heartbeat_ms, &buf, &len), 0);
    fr_send(r, buf, len);
}

static inline void fr_refuse(fake_router *r, const char *reason)
{
    const void *buf;
    size_t len;
    assert_int_equal(wp_encode_refuse(r->enc, reason, &buf, &len), 0);
    fr_send(r, buf, len);
}

static inline void fr_submit(fake_router *r, const wp_submit *s)
{
    const void *buf;
    size_t len;
    assert_int_equal(wp_encode_submit(r->enc, s, &buf, &len), 0);
    fr_send(r, buf, len);
}

static inline void fr_abort(fake_router *r, uint64_t rid)
{
    const void *buf;
    size_t len;
    assert_int_equal(wp_encode_abort(r->enc, rid, &buf, &len), 0);
    fr_send(r, buf, len);
}

static inline void fr_drain(fake_router *r)
{
    const void *buf;
    size_t len;
    assert_int_equal(wp_encode_drain(r->enc, &buf, &len), 0);
    fr_send(r, buf, len);
}

static inline void fr_shutdown(fake_router *r)
{
    const void *buf;
    size_t len;
    assert_int_equal(wp_encode_shutdown(r->enc, &buf, &len), 0);
    fr_send(r, buf, len);
}

/* A SUBMIT with the protocol's defaults for everything but the prompt and max_tokens:
 * greedy, n 1, no logprobs, no stops. The prompt pointer must outlive the send. */
static inline wp_submit fr_submit_defaults(uint64_t rid, const int32_t *prompt, int n_prompt,
                                           int max_tokens)
{
    wp_submit s;
    memset(&s, 0, sizeof s);
    s.rid = rid;
    s.prompt_ids = prompt;
    s.n_prompt = n_prompt;
    req_params_init(&s.params);
    s.params.max_tokens = max_tokens;
    s.params.sp.temperature = 0;
    return s;
}

/* Conditions for fr_until. */
static inline bool fr_cond_finished(fake_router *r, void *rid_p)
{
    uint64_t rid = *(uint64_t *)rid_p;
    for (int i = 0; i < r->n_reqs; i++)
        if (r->reqs[i].rid == rid)
            return r->reqs[i].s[0].finished > 0;
    return false;
}

static inline bool fr_cond_has_token(fake_router *r, void *rid_p)
{
    uint64_t rid = *(uint64_t *)rid_p;
    for (int i = 0; i < r->n_reqs; i++)
        if (r->reqs[i].rid == rid)
            return r->reqs[i].s[0].n > 0;
    return false;
}

static inline bool fr_cond_rejects(fake_router *r, void *n_p)
{
    return r->n_rejects >= *(int *)n_p;
}

static inline bool fr_cond_bye(fake_router *r, void *unused)
{
    return r->n_bye > 0;
}

/* The worker's last load report says it drains (it handled a stop). */
static inline bool fr_cond_draining(fake_router *r, void *unused)
{
    return r->load.phase == WP_PHASE_DRAINING;
}

/* A heartbeat showing an idle worker with every KV block free. */
static inline bool fr_cond_idle_heartbeat(fake_router *r, void *unused)
{
    return r->load_from_heartbeat && r->load.running == 0 && r->load.waiting == 0 &&
           r->load.kv_blocks_total > 0 && r->load.kv_blocks_free == r->load.kv_blocks_total;
}

#endif
