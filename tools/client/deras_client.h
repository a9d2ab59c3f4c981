/* SPDX-License-Identifier: Apache-2.0 */
/* deras_client.h - the C client of deras-router: requests out, events in, over one socket.
 *
 * A deras_client_t is one ZeroMQ DEALER socket connected to the router's client endpoint
 * (optionally CURVE-encrypted), the protocol codec (common/wire/protocol.h), and a table of the
 * requests in flight. Any number of requests may be in flight; their events (chunks,
 * finals, errors) arrive interleaved through deras_client_recv(), each tagged with the
 * request's id and the user pointer given when it was sent, and flagged `done` on the
 * request's last event (its n-th final, or an error), after which the client forgets it.
 *
 *   deras_client_t *c;
 *   if (deras_client_new(&(deras_client_opts){.address = "tcp://..."}, &c))
 *       fprintf(stderr, "%s\n", deras_errmsg());    // and give up
 *   proto_request r;
 *   deras_client_request_init(&r);
 *   r.prompt = "Hello"; r.prompt_len = 5; r.stream = true;
 *   r.params.sp.min_tokens = 8;                   // r.params: common/request/req_params.h
 *   logit_bias_add(&r.params.sp.logit_bias, 13, -100);
 *   deras_client_send(c, &r, my_state);          // r.id is filled in
 *   deras_event ev;
 *   while (deras_client_recv(c, 30000, &ev) == DERAS_OK) { ...; if (ev.done) break; }
 *   deras_client_destroy(&c);
 *
 * Status convention of deras (common/base/status.h): 0 on success, a negative deras_status on
 * failure with deras_errmsg() saying what failed; the constructor, like every deras
 * constructor, returns such a status and the client through its last argument. Every wait
 * takes a timeout, so a dead router surfaces as DERAS_ETIMEOUT, never as a hang.
 *
 * Changed: deras_client_new used to return the client (NULL on failure); it now returns a
 * status and sets *out (NULL on failure), so `c = deras_client_new(&o); if (!c) ...` becomes
 * `if (deras_client_new(&o, &c)) ...`. The type is deras_client_t; its old name deras_client
 * stays as an alias so existing declarations compile. Nothing else changed.
 *
 * Costs: send and recv are O(1) expected (a hash table of live ids) plus the codec's O(len);
 * after warm-up neither allocates (ZeroMQ itself allocates for frames over 33 bytes). The
 * table holds at most opts.max_in_flight requests.
 *
 * Threads: a client is not thread-safe (nor is its socket); use one per thread.
 */
#ifndef DERAS_CLIENT_H
#define DERAS_CLIENT_H

#include <stdbool.h>

#include "common/wire/protocol.h"

#define DERAS_CLIENT_DEFAULT_ADDRESS "tcp://127.0.0.1:5555"

typedef struct deras_client deras_client_t;
typedef deras_client_t deras_client; /* the former name, kept for source compatibility */

typedef struct deras_client_opts {
    const char *address;          /* NULL: DERAS_CLIENT_DEFAULT_ADDRESS */
    const char *curve_server_key; /* router's CURVE public key, 40 Z85 characters; NULL: plain */
    const char *curve_secret_key; /* this client's CURVE secret key (Z85), the one whose public
                                     key the router allows; NULL: a fresh key pair (a router
                                     with an allow list then refuses the connection) */
    int max_in_flight;            /* requests tracked at once; 0: 4096 */
    int send_timeout_ms;          /* how long a send may wait for queue space; 0: 5000 */
    void *zmq_ctx;                /* a ZeroMQ context to share; NULL: the client makes its own */
} deras_client_opts;

/* One event from the router. msg points into the client and stays valid until the next
 * deras_client_recv / deras_client_ping / deras_client_destroy on it. */
typedef struct deras_event {
    proto_server_msg msg;
    void *user;  /* the pointer given to deras_client_send; NULL when !known */
    bool known;  /* msg.id names a request in flight on this client */
    bool done;   /* the request's last event (its n-th final, or an error): it is forgotten */
} deras_event;

/* Connect (ZeroMQ connects lazily: a router that is not there yet is not an error; it
 * shows as DERAS_ETIMEOUT on the first recv, and so does a CURVE handshake the router
 * refuses). opts NULL: every default. DERAS_OK with the client in *out; on failure *out is
 * NULL and the status says why with deras_errmsg() set: DERAS_EINVAL (a bad key, a bad
 * option, an address too long), DERAS_ENOMEM, or ZeroMQ's refusal (a bad address). */
int deras_client_new(const deras_client_opts *opts, deras_client_t **out);

/* Close the socket (without waiting for unsent messages) and free everything; NULLs *c.
 * Safe on NULL and on *c == NULL. */
void deras_client_destroy(deras_client_t **c);

/* Reset *r to the protocol's defaults (req_params_init: max_tokens 256, n 1, the sampling
 * table's defaults; add_special_tokens true; no prompt, empty id), so only the fields set
 * afterwards are sent. */
void deras_client_request_init(proto_request *r);

/* Send a request. An empty r->id is filled with a fresh id unique to this client (32 hex
 * digits); a given id must not be in flight. `user` comes back with each of its events.
 * Returns DERAS_OK, DERAS_EINVAL (no prompt or both, bad n, id in flight or too long),
 * DERAS_EBUSY (max_in_flight requests in flight), DERAS_ETIMEOUT (the socket's queue
 * stayed full for send_timeout_ms) or DERAS_EIO. Cost: O(request size). */
int deras_client_send(deras_client_t *c, proto_request *r, void *user);

/* Wait up to timeout_ms (-1: forever, 0: just look) for the next event of any request and
 * fill *ev. DERAS_OK; DERAS_ETIMEOUT when nothing came; DERAS_EFORMAT when the router sent
 * something the codec refuses (message names the field); DERAS_EIO. Messages for ids not
 * in flight (late events of a cancelled or forgotten request, unattributable errors, a
 * late pong) come back with known == false. */
int deras_client_recv(deras_client_t *c, int timeout_ms, deras_event *ev);

/* Ask the router to stop request `id`. The request stays in flight until its finals
 * (finish_reason "abort") arrive through recv. DERAS_EINVAL for a bad id, else as send. */
int deras_client_cancel(deras_client_t *c, const char *id);

/* Stop tracking `id` locally (e.g. after a timeout); its later events come back with
 * known == false. No-op for an id not in flight. */
void deras_client_forget(deras_client_t *c, const char *id);

/* Round trip: send a ping and wait up to timeout_ms for the pong, filling *pong (workers
 * point into the client until the next recv/ping). Events of requests that arrive while
 * waiting are kept and returned by later recv calls, in order. DERAS_ETIMEOUT, else as
 * send/recv. */
int deras_client_ping(deras_client_t *c, int timeout_ms, proto_server_msg *pong);

/* Requests in flight. O(1). */
int deras_client_n_in_flight(const deras_client_t *c);

#endif
