/* SPDX-License-Identifier: Apache-2.0 */
/* deras_client.c - the C client of deras-router (see deras_client.h).
 *
 * One DEALER socket, one protocol encoder and decoder, and an open-addressing hash table
 * of the requests in flight (id -> samples expected, finals seen, user pointer), sized at
 * start for max_in_flight so that sending and receiving never allocate. Linear probing
 * with backward-shift deletion keeps the table free of tombstones however many requests
 * pass through it.
 *
 * The frame last received is kept in `cur` until the next receive because the decoded
 * message points into it. ping() must not lose request events that arrive while it waits
 * for the pong: it moves them (zmq_msg_move, no copy) into a small FIFO that recv drains
 * first; that FIFO grows only while a ping waits, never per token.
 */
#include "tools/client/deras_client.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/base/status.h"
#include "common/wire/zmq_check.h"

typedef struct live_req {
    char id[PROTO_MAX_ID + 1]; /* "" = empty slot */
    int n, n_finals;
    void *user;
} live_req;

struct deras_client {
    void *ctx, *sock;
    bool own_ctx;
    proto_encoder_t *enc;
    proto_decoder_t *dec;
    char address[512];
    live_req *table;        /* cap slots, cap a power of two >= 2 * max_in_flight */
    size_t cap;
    int n_live, max_live;
    uint64_t id_prefix, id_counter;
    zmq_msg_t cur;          /* the frame the last event points into */
    zmq_msg_t *stash;       /* frames received while ping() waited, FIFO [stash_head, n_stash) */
    size_t n_stash, stash_head, stash_cap;
};

/* ---- table of live requests ---- */

static size_t id_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* Slot of `id`, or of the empty slot where it would go. The table is never full. */
static size_t table_find(const deras_client_t *c, const char *id)
{
    size_t mask = c->cap - 1, i = id_hash(id) & mask;
    while (c->table[i].id[0] && strcmp(c->table[i].id, id))
        i = (i + 1) & mask;
    return i;
}

/* Remove the entry at slot i and shift later members of its probe run back. */
static void table_remove_at(deras_client_t *c, size_t i)
{
    size_t mask = c->cap - 1, j = i;
    c->table[i].id[0] = '\0';
    for (;;) {
        j = (j + 1) & mask;
        if (!c->table[j].id[0])
            break;
        size_t home = id_hash(c->table[j].id) & mask;
        /* move j into the hole at i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            c->table[i] = c->table[j];
            c->table[j].id[0] = '\0';
            i = j;
        }
    }
    c->n_live--;
}

/* ---- lifecycle ---- */

void deras_client_request_init(proto_request *r)
{
    if (r)
        proto_request_default(r);
}

int deras_client_new(const deras_client_opts *opts, deras_client_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "deras_client_new: NULL out");
    *out = NULL;
    deras_client_opts o = {0};
    if (opts)
        o = *opts;
    if (!o.address)
        o.address = DERAS_CLIENT_DEFAULT_ADDRESS;
    if (o.max_in_flight < 0 || o.max_in_flight > (1 << 24) || o.send_timeout_ms < 0)
        return deras_fail(DERAS_EINVAL, "deras_client_new: max_in_flight %d or send_timeout_ms "
                          "%d out of range", o.max_in_flight, o.send_timeout_ms);
    if (!o.max_in_flight)
        o.max_in_flight = 4096;
    if (!o.send_timeout_ms)
        o.send_timeout_ms = 5000;
    if (o.curve_server_key && strlen(o.curve_server_key) != 40)
        return deras_fail(DERAS_EINVAL, "CURVE server key: expected 40 Z85 characters, got %zu",
                          strlen(o.curve_server_key));
    if (o.curve_secret_key && strlen(o.curve_secret_key) != 40)
        return deras_fail(DERAS_EINVAL, "CURVE secret key: expected 40 Z85 characters, got %zu",
                          strlen(o.curve_secret_key));
    if (o.curve_secret_key && !o.curve_server_key)
        return deras_fail(DERAS_EINVAL, "a CURVE secret key needs the router's public key too");
    if (strlen(o.address) >= sizeof ((deras_client_t *)0)->address)
        return deras_fail(DERAS_EINVAL, "address too long");

    int rc = DERAS_OK;
    deras_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    zmq_msg_init(&c->cur);
    snprintf(c->address, sizeof c->address, "%s", o.address);
    c->max_live = o.max_in_flight;
    for (c->cap = 16; c->cap < 2 * (size_t)o.max_in_flight; c->cap *= 2)
        ;
    c->table = calloc(c->cap, sizeof *c->table);
    if (!c->table) {
        rc = deras_fail(DERAS_ENOMEM, "out of memory");
        goto fail;
    }
    proto_limits lim;
    proto_limits_default(&lim);
    lim.max_message_bytes = (size_t)64 << 20; /* a long non-streamed final; the router's call */
    if ((rc = proto_encoder_new(&c->enc)) || (rc = proto_decoder_new(&lim, &c->dec)))
        goto fail;
    if (getrandom(&c->id_prefix, sizeof c->id_prefix, GRND_NONBLOCK) != sizeof c->id_prefix)
        c->id_prefix = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^
                       (uint64_t)(uintptr_t)c;

    c->own_ctx = !o.zmq_ctx;
    if (o.zmq_ctx)
        c->ctx = o.zmq_ctx;
    else if ((rc = ZMQ_CHECK_PTR(c->ctx, zmq_ctx_new())))
        goto fail;
    int zero = 0;
    if ((rc = ZMQ_CHECK_PTR(c->sock, zmq_socket(c->ctx, ZMQ_DEALER))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero))) ||
        /* never drop tokens on our side */
        (rc = ZMQ_CHECK(zmq_setsockopt(c->sock, ZMQ_RCVHWM, &zero, sizeof zero))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(c->sock, ZMQ_SNDTIMEO, &o.send_timeout_ms, sizeof(int)))))
        goto fail;
    if (o.curve_server_key) {
        char pub[41], sec[41];
        if (o.curve_secret_key) {
            memcpy(sec, o.curve_secret_key, 41);
            if (zmq_curve_public(pub, sec) == -1) {
                rc = deras_fail(DERAS_EINVAL, "CURVE secret key: not a valid Z85 key");
                goto fail;
            }
        } else if ((rc = ZMQ_CHECK(zmq_curve_keypair(pub, sec)))) {
            goto fail;
        }
        const char *srv = o.curve_server_key;
        if ((rc = ZMQ_CHECK(zmq_setsockopt(c->sock, ZMQ_CURVE_SERVERKEY, srv, 40))) ||
            (rc = ZMQ_CHECK(zmq_setsockopt(c->sock, ZMQ_CURVE_PUBLICKEY, pub, 40))) ||
            (rc = ZMQ_CHECK(zmq_setsockopt(c->sock, ZMQ_CURVE_SECRETKEY, sec, 40))))
            goto fail;
    }
    if ((rc = ZMQ_CHECK(zmq_connect(c->sock, c->address))))
        goto fail;
    *out = c;
    return DERAS_OK;

fail:
    deras_fail_ctx(rc, "connecting to %s: ", o.address);
    deras_client_destroy(&c);
    return rc;
}

void deras_client_destroy(deras_client_t **pc)
{
    if (!pc || !*pc)
        return;
    deras_client_t *c = *pc;
    zmq_msg_close(&c->cur);
    for (size_t i = c->stash_head; i < c->n_stash; i++)
        zmq_msg_close(&c->stash[i]);
    free(c->stash);
    if (c->sock)
        zmq_close(c->sock);
    if (c->own_ctx && c->ctx)
        zmq_ctx_term(c->ctx);
    proto_encoder_destroy(&c->enc);
    proto_decoder_destroy(&c->dec);
    free(c->table);
    free(c);
    *pc = NULL;
}

int deras_client_n_in_flight(const deras_client_t *c)
{
    return c ? c->n_live : 0;
}

/* ---- sending ---- */

/* A blocking send bounded by ZMQ_SNDTIMEO. ZMQ_CHECK maps EINTR to DERAS_ETIMEOUT (retried
 * here) and EAGAIN, the queue staying full for the whole timeout, to DERAS_EBUSY. */
static int send_frame(deras_client_t *c, const void *buf, size_t len)
{
    int rc;
    do
        rc = ZMQ_CHECK(zmq_send(c->sock, buf, len, 0));
    while (rc == DERAS_ETIMEOUT);
    if (rc == DERAS_EBUSY)
        rc = deras_fail(DERAS_ETIMEOUT, "sending to %s: the send queue stayed full (router "
                        "not reading?)", c->address);
    return rc;
}

int deras_client_send(deras_client_t *c, proto_request *r, void *user)
{
    if (!c || !r)
        return deras_fail(DERAS_EINVAL, "deras_client_send: NULL argument");
    if (!r->prompt == !r->prompt_ids)
        return deras_fail(DERAS_EINVAL, "request: give exactly one of prompt, prompt_ids");
    if (r->params.n < 1 || r->params.n > REQ_MAX_N)
        return deras_fail(DERAS_EINVAL, "request: n %d outside [1, %d]", r->params.n, REQ_MAX_N);
    if (memchr(r->id, '\0', sizeof r->id) == NULL)
        return deras_fail(DERAS_EINVAL, "request: id longer than %d bytes", PROTO_MAX_ID);
    if (c->n_live >= c->max_live)
        return deras_fail(DERAS_EBUSY, "%d requests in flight (max_in_flight)", c->n_live);
    if (!r->id[0])
        snprintf(r->id, sizeof r->id, "%016llx%016llx", (unsigned long long)c->id_prefix,
                 (unsigned long long)++c->id_counter);
    size_t slot = table_find(c, r->id);
    if (c->table[slot].id[0])
        return deras_fail(DERAS_EINVAL, "request id '%s' is already in flight", r->id);

    const void *buf;
    size_t len;
    int rc;
    if ((rc = proto_encode_request(c->enc, r, &buf, &len)))
        return deras_fail_ctx(rc, "encoding request %s: ", r->id);
    if ((rc = send_frame(c, buf, len)))
        return rc;
    live_req *e = &c->table[slot];
    memcpy(e->id, r->id, sizeof e->id);
    e->n = r->params.n;
    e->n_finals = 0;
    e->user = user;
    c->n_live++;
    return DERAS_OK;
}

int deras_client_cancel(deras_client_t *c, const char *id)
{
    if (!c || !id || !id[0] || strlen(id) > PROTO_MAX_ID)
        return deras_fail(DERAS_EINVAL, "deras_client_cancel: bad id");
    const void *buf;
    size_t len;
    int rc;
    if ((rc = proto_encode_cancel(c->enc, id, &buf, &len)))
        return deras_fail_ctx(rc, "encoding cancel %s: ", id);
    return send_frame(c, buf, len);
}

void deras_client_forget(deras_client_t *c, const char *id)
{
    if (!c || !id || !id[0])
        return;
    size_t slot = table_find(c, id);
    if (c->table[slot].id[0])
        table_remove_at(c, slot);
}

/* ---- receiving ---- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Receive one whole message from the socket into c->cur (its last frame: a leading empty
 * delimiter is tolerated). DERAS_ETIMEOUT when none arrives within timeout_ms. */
static int recv_frame(deras_client_t *c, int timeout_ms)
{
    int rc;
    double deadline = timeout_ms < 0 ? 0 : now_ms() + timeout_ms;
    for (;;) {
        int wait = -1;
        if (timeout_ms >= 0) {
            double left = deadline - now_ms();
            wait = left <= 0 ? 0 : (int)(left + 0.999);
        }
        zmq_pollitem_t it = {.socket = c->sock, .events = ZMQ_POLLIN};
        int n = zmq_poll(&it, 1, wait);
        if (n == -1 && zmq_errno() == EINTR)
            continue; /* a signal: wait out the rest (callers poll in slices to react) */
        if ((rc = ZMQ_CHECK(n)))
            return rc;
        if (n > 0)
            break;
        if (wait == 0)
            return deras_fail(DERAS_ETIMEOUT, "no reply from %s within %d ms", c->address,
                              timeout_ms);
    }
    for (;;) {
        zmq_msg_close(&c->cur);
        zmq_msg_init(&c->cur);
        if ((rc = ZMQ_CHECK(zmq_msg_recv(&c->cur, c->sock, ZMQ_DONTWAIT))))
            return rc;
        if (!zmq_msg_more(&c->cur))
            return DERAS_OK;
    }
}

static int decode_cur(deras_client_t *c, proto_server_msg *m)
{
    proto_error err;
    if (proto_decode_server(c->dec, zmq_msg_data(&c->cur), zmq_msg_size(&c->cur), m, &err))
        return deras_fail(DERAS_EFORMAT, "reply from %s: %s (%s)", c->address, err.message,
                          proto_error_name(err.code));
    return DERAS_OK;
}

/* Attribute a decoded message to its request and update the table. */
static void classify(deras_client_t *c, deras_event *ev)
{
    ev->user = NULL;
    ev->known = false;
    ev->done = false;
    if (ev->msg.type == PROTO_PONG)
        return;
    size_t slot = table_find(c, ev->msg.id);
    live_req *e = ev->msg.id[0] ? &c->table[slot] : NULL;
    if (!e || !e->id[0])
        return;
    ev->known = true;
    ev->user = e->user;
    if (ev->msg.type == PROTO_ERROR || (ev->msg.type == PROTO_FINAL && ++e->n_finals >= e->n)) {
        ev->done = true;
        table_remove_at(c, slot);
    }
}

int deras_client_recv(deras_client_t *c, int timeout_ms, deras_event *ev)
{
    if (!c || !ev)
        return deras_fail(DERAS_EINVAL, "deras_client_recv: NULL argument");
    int rc;
    if (c->stash_head < c->n_stash) {
        zmq_msg_close(&c->cur);
        zmq_msg_init(&c->cur);
        zmq_msg_move(&c->cur, &c->stash[c->stash_head++]);
        if (c->stash_head == c->n_stash)
            c->stash_head = c->n_stash = 0;
    } else if ((rc = recv_frame(c, timeout_ms))) {
        return rc;
    }
    if ((rc = decode_cur(c, &ev->msg)))
        return rc;
    classify(c, ev);
    return DERAS_OK;
}

static int stash_cur(deras_client_t *c)
{
    if (c->n_stash == c->stash_cap) {
        size_t cap = c->stash_cap ? 2 * c->stash_cap : 64;
        zmq_msg_t *s = realloc(c->stash, cap * sizeof *s);
        if (!s)
            return deras_fail(DERAS_ENOMEM, "out of memory");
        c->stash = s;
        c->stash_cap = cap;
    }
    zmq_msg_init(&c->stash[c->n_stash]);
    zmq_msg_move(&c->stash[c->n_stash++], &c->cur);
    return DERAS_OK;
}

int deras_client_ping(deras_client_t *c, int timeout_ms, proto_server_msg *pong)
{
    if (!c || !pong)
        return deras_fail(DERAS_EINVAL, "deras_client_ping: NULL argument");
    static const uint8_t ping[] = {0x81, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'p', 'i', 'n', 'g'};
    int rc;
    if ((rc = send_frame(c, ping, sizeof ping)))
        return rc;
    double deadline = now_ms() + (timeout_ms < 0 ? 1e18 : timeout_ms);
    for (;;) {
        double left = deadline - now_ms();
        if (left < 0)
            left = 0;
        if ((rc = recv_frame(c, timeout_ms < 0 ? -1 : (int)left)))
            return rc == DERAS_ETIMEOUT
                       ? deras_fail(rc, "no pong from %s within %d ms", c->address, timeout_ms)
                       : rc;
        /* a peek that is not a pong is kept whole for recv; decoding it twice is cheap */
        if ((rc = decode_cur(c, pong)))
            return rc;
        if (pong->type == PROTO_PONG)
            return DERAS_OK;
        if ((rc = stash_cur(c)))
            return rc;
    }
}
