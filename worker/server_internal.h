/* SPDX-License-Identifier: Apache-2.0 */
/* server_internal.h - the worker server's state, shared by server.c (the serving loop:
 * engine callbacks, requests, stops, warm-up, construction) and link.c (the router link:
 * sending and receiving frames, the handshake, load reports). Private to those two files;
 * the door is server.h.
 */
#ifndef DERAS_WORKER_SERVER_INTERNAL_H
#define DERAS_WORKER_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <zmq.h>

#include "common/service/sdnotify.h"
#include "common/wire/endpoints.h"
#include "common/wire/worker_proto.h"
#include "engine/engine.h"
#include "engine/grammar_cache.h"
#include "engine/loader.h"
#include "worker/group.h"
#include "worker/pulse.h"
#include "worker/server.h"

#define MAX_FRAME (16u << 20) /* bound on a frame from the router */
#define RECV_BATCH 256        /* router messages handled between two engine steps */
#define RATE_SAMPLES 21       /* tokens/s window: samples >= RATE_SPACING_S apart, ~10 s */
#define RATE_SPACING_S 0.5
#define LINGER_MS 500         /* what close waits for unsent frames */
#define MAX_POLL_MS 1000      /* an idle poll still wakes this often (deadlines are rechecked) */
#define HELLO_RETRY_S 0.1     /* REJOIN: a HELLO that could not be queued is sent again this soon */


typedef struct live_req {
    uint64_t rid;
    int n, n_done;
} live_req;

/* A request the engine ended with an error (a grammar's budget): told after its STEP. */
typedef struct failed_req {
    uint64_t rid;
    enum proto_error_code code;
    char msg[200];
} failed_req;

enum link_state { LINK_HELLO_FIRST, LINK_READY, LINK_REJOIN };

struct worker_server {
    char model[4096], router[ENDPOINT_MAX], name[WPROTO_MAX_NAME + 1], device[32], kv_spec[64],
        kv_dtype[16];
    char spec_proposer[4096];
    worker_opts o;              /* strings point at the copies above */
    loader_t *ld;               /* backend, model, draft model, engine (engine/loader.h) */
    group_t *group;             /* tensor-parallel leader: the followers' segment; else NULL */
    engine_t *e;                /* the loader's */
    int vocab;
    wp_hello hello;

    void *zctx, *sock;
    pulse_t *pulse;             /* heartbeats from a side thread while a step runs long */
    zmq_msg_t rx;
    bool rx_open;
    wp_decoder_t *dec;
    wp_encoder_t *step_enc, *msg_enc;
    wp_msg in;                  /* the message being handled (too big for the stack) */

    live_req *live;             /* (max_live_seqs) requests in the engine */
    int n_live;
    failed_req *failed;         /* (max_live_seqs) ended with an error this step */
    int n_failed;
    gcache_t *grammars;         /* structured output: the vocabulary trie and compiled
                                   grammars (engine/grammar_cache.h) */
    bool silent;                /* callbacks report nothing (aborts the router can't know) */
    int cb_err;                 /* first encoder failure inside a callback */
    bool warned_logprob;

    enum link_state link;
    double hello_deadline;      /* HELLO_FIRST: give up; REJOIN: say HELLO again */
    bool hello_dropped;         /* REJOIN: the last HELLO could not be queued */
    int n_refused;              /* REFUSEs while in REJOIN (only the first is logged) */
    int heartbeat_ms;
    double next_heartbeat;

    bool warm;                  /* the warm-up step ran: the load says "ready" */
    engine_stats warm_base;     /* the engine's counters after warm-up, left out of the load */
    bool draining;              /* DRAIN: REJECT new SUBMITs */
    bool stopping;              /* SHUTDOWN or a signal: return once idle */
    double stop_deadline;
    int n_stops;                /* bytes read from stop_fd */
    bool stalled;               /* the last step could run nothing: don't spin on it */
    sdnotify_watchdog wd;       /* systemd's, pinged between steps */

    double rate_t[RATE_SAMPLES];
    uint64_t rate_gen[RATE_SAMPLES];
    int rate_head, rate_n;
    uint64_t n_dropped;         /* frames dropped in the current outage */
};

/* Seconds on the monotonic clock. */
double server_now(void);

/* ---- link.c: the router link ---- */

/* Send one frame without blocking; a full queue drops it (one warning per outage). */
int link_send_frame(worker_server_t *s, const void *buf, size_t len);
/* HELLO, and when to say it again (REJOIN) or give up (HELLO_FIRST). */
int link_send_hello(worker_server_t *s, double t);
int link_send_heartbeat(worker_server_t *s, double t);
/* Send the STEP the engine callbacks built, if any, and start the next one. */
int link_flush_step(worker_server_t *s, double t);
int link_send_reject(worker_server_t *s, uint64_t rid, enum proto_error_code code, const char *msg);
/* BYE with the reason, when the router knows this worker. */
int link_send_bye(worker_server_t *s, const char *why);
/* The engine's load as the router hears it (warm-up left out). */
void link_load(worker_server_t *s, double t, wp_load *l);
/* Handle what the router sent, at most RECV_BATCH messages: the link's own (WELCOME,
 * REFUSE) here, the rest through server_handle. */
int link_recv(worker_server_t *s, double t);

/* ---- server.c ---- */

/* SUBMIT, ABORT, DRAIN, SHUTDOWN. */
int server_handle(worker_server_t *s, const wp_msg *m, double t);
/* End every request in the engine without reporting them. */
void server_abort_all(worker_server_t *s);

#endif
