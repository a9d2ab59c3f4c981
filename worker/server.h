/* server.h - the worker process's event loop: the engine behind a ZeroMQ link to the router.
 *
 * worker_server_new() loads everything a worker needs - backend, checkpoint, the
 * tokenizer's end-of-generation ids, a KV cache sized from a budget (logged), the engine -
 * and worker_server_run() speaks common/worker_proto.h to deras-router until told to stop:
 *
 *   connect a DEALER (routing id = name) -> HELLO -> WELCOME within the handshake timeout
 *   loop: poll the socket and the stop fd (timeout 0 while the engine has work, else until
 *         the next heartbeat); SUBMIT -> engine_add or REJECT; ABORT -> engine_abort;
 *         one engine_step; every token and finish of the step goes out in one STEP frame;
 *         a HEARTBEAT with the engine's load every heartbeat_ms
 *
 * Stopping. DRAIN from the router: REJECT new SUBMITs (busy), keep serving what runs.
 * SHUTDOWN, or one byte on stop_fd (deras-worker's signal handler writes the signal
 * number there): the same, and return once nothing is in flight, or abort what is left
 * when drain_timeout_s runs out. A second byte on stop_fd: abort everything (the router
 * hears the aborts) and return at once.
 *
 * Router restarts. A REFUSE while registered means the router does not know this worker
 * (it restarted): every request in flight is aborted silently (the new router never
 * heard of them) and HELLO is sent again, then again every handshake timeout until a
 * WELCOME comes. A REFUSE of the first HELLO ends worker_server_run with the reason.
 *
 * Nothing here installs signal handlers or exits: deras-worker (main.c) does that, and
 * tests run the loop in a thread. The loop allocates nothing per token or per step.
 */
#ifndef DERAS_WORKER_SERVER_H
#define DERAS_WORKER_SERVER_H

#include <stdbool.h>

#include "worker/kv_sizing.h"

typedef struct worker_opts {
    const char *model;           /* checkpoint: .gguf file or Hugging Face directory (required) */
    const char *router;          /* the router's worker endpoint; NULL: endpoints_default_workers */
    const char *name;            /* routing id, 1..64 of [A-Za-z0-9._:@-]; NULL: "w<pid>" */
    const char *device;          /* "cpu" or "cuda:N" */
    int threads;                 /* CPU threads, 0: all cores */
    const char *kv_cache_memory; /* "4GiB" or a fraction of available memory, "0.4" */
    int max_seqs;                /* sequences per step */
    int max_batch_tokens;        /* tokens per step, >= max_seqs */
    int max_live_seqs;           /* sequences queued + running; 0: 4 x max_seqs */
    int block_size;              /* KV block size in tokens */
    bool prefix_caching;
    int tp_rank, tp_size;        /* only 0 / 1 for now */
    double handshake_timeout_s;  /* wait for WELCOME */
    double drain_timeout_s;      /* finishing in-flight work at a stop, then abort */
    int heartbeat_ms;            /* until WELCOME says otherwise */
    int stop_fd;                 /* readable fd: each byte is one stop request; -1: none */
} worker_opts;

/* The defaults deras-worker documents: device cpu, budget "0.4", 64 sequences, 512 batch
 * tokens, block size 16, prefix caching, tp 0/1, handshake 10 s, drain 30 s, heartbeat
 * 1000 ms, stop_fd -1. model, router and name NULL. */
void worker_opts_default(worker_opts *o);

/* Check every option without loading anything. DERAS_EINVAL with a message naming the
 * option (as deras-worker spells it) and the accepted values; DERAS_EUNSUPPORTED for
 * --tp-size other than 1. */
int worker_opts_check(const worker_opts *o);

typedef struct worker_server worker_server;

/* Check the options, create the backend, load the checkpoint (progress on stderr), size
 * the KV cache (the budget line is logged) and build the engine. No socket yet. On
 * failure *out is NULL and deras_errmsg() says what failed. The options' strings are
 * copied. */
int worker_server_new(const worker_opts *o, worker_server **out);

/* Connect, register and serve until stopped. DERAS_OK after a stop (SHUTDOWN, stop_fd);
 * DERAS_ETIMEOUT when no WELCOME came within the handshake timeout (the message says what
 * to check); DERAS_ECLOSED when the router refused the first HELLO (the message carries
 * its reason); other codes for socket or engine failures. Call once. */
int worker_server_run(worker_server *s);

/* Close the socket and free everything; sets *s to NULL. NULL-safe. */
void worker_server_destroy(worker_server **s);

/* What the server was built with (after defaults): the name, the endpoint, the KV sizing. */
const char *worker_server_name(const worker_server *s);
const char *worker_server_router(const worker_server *s);
const kv_sizing *worker_server_kv(const worker_server *s);

#endif
