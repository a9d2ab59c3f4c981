/* SPDX-License-Identifier: Apache-2.0 */
/* server.h - the worker process's event loop: the engine behind a ZeroMQ link to the router.
 *
 * worker_server_new() loads everything a worker needs - backend, checkpoint, the
 * tokenizer's end-of-generation ids, a KV cache sized from a budget (logged), the engine -
 * and worker_server_run() speaks common/wire/worker_proto.h to deras-router until told to stop:
 *
 *   connect a DEALER (routing id = name) -> HELLO -> WELCOME within the handshake timeout
 *   loop: poll the socket and the stop fd (timeout 0 while the engine has work, else until
 *         the next heartbeat); SUBMIT -> engine_add or REJECT; ABORT -> engine_abort;
 *         one engine_step; every token and finish of the step goes out in one STEP frame;
 *         a HEARTBEAT with the engine's load every heartbeat_ms
 *
 * Stopping. DRAIN from the router: REJECT new SUBMITs (busy), keep serving what runs.
 * SHUTDOWN, or one byte on stop_fd (deras-worker's signal handler writes the signal
 * number there): the same, heartbeat at once (the router learns of it), and return once
 * nothing is in flight, or when drain_timeout_s runs out. A second byte on stop_fd:
 * return at once. Leaving, the worker says BYE with the reason; requests it still held
 * are dropped unreported, and the router re-dispatches or fails them on that BYE.
 *
 * Router restarts. A REFUSE while registered means the router does not know this worker
 * (it restarted): every request in flight is aborted silently (the new router never
 * heard of them) and HELLO is sent again, then again every handshake timeout until a
 * WELCOME comes. A REFUSE of the first HELLO ends worker_server_run with the reason.
 *
 * Nothing here installs signal handlers or exits: deras-worker (main.c) does that, and
 * tests run the loop in a thread. The loop allocates nothing per token; per step, only
 * libzmq's copy of the one STEP frame.
 */
#ifndef DERAS_WORKER_SERVER_H
#define DERAS_WORKER_SERVER_H

#include "engine/kv_sizing.h"
#include "worker/worker_opts.h"

typedef struct worker_server worker_server_t;

/* Check the options, create the backend, load the checkpoint (progress on stderr), size
 * the KV cache (the budget line is logged) and build the engine. No socket yet. On
 * failure *out is NULL and deras_errmsg() says what failed. The options' strings are
 * copied. */
int worker_server_new(const worker_opts *o, worker_server_t **out);

/* Connect, register and serve until stopped. DERAS_OK after a stop (SHUTDOWN, stop_fd);
 * DERAS_ETIMEOUT when no WELCOME came within the handshake timeout (the message says what
 * to check); DERAS_ECLOSED when the router refused the first HELLO (the message carries
 * its reason); other codes for socket or engine failures. Call once. */
int worker_server_run(worker_server_t *s);

/* Close the socket and free everything; sets *s to NULL. NULL-safe. */
void worker_server_destroy(worker_server_t **s);

/* What the server was built with (after defaults): the name, the endpoint, the KV sizing. */
const char *worker_server_name(const worker_server_t *s);
const char *worker_server_router(const worker_server_t *s);
const kv_sizing *worker_server_kv(const worker_server_t *s);

#endif
