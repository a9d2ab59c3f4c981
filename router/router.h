/* SPDX-License-Identifier: Apache-2.0 */
/* router.h - the state of one deras-router process, shared by its modules.
 *
 * The router is one thread running one event loop (main.c) over five kinds of events:
 * client frames (frontend.c), worker frames (wlink.c), operator requests (admin.c on the
 * admin socket, http.c for GET /metrics and /health), connection events from socket
 * monitors, and timers (deadlines, worker silence and stuck workers, the wait for a
 * worker, drains). Every module works on this struct; modules with state of their own
 * keep it opaque (requests, workers, dispatch, metrics, admin, http, curve). Nothing here
 * is touched by more than one thread (libmicrohttpd runs inside the loop, without
 * threads of its own), so there are no locks.
 *
 * Who ends a request: relay.c, always. It tells the client (chunk + final per
 * sample, or one error), aborts the request at its worker when the worker may still
 * be running it, gives the worker's capacity back and releases the record.
 */
#ifndef DERAS_ROUTER_ROUTER_H
#define DERAS_ROUTER_ROUTER_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <zmq.h>

#include "common/checkpoint/checkpoint.h"
#include "common/wire/protocol.h"
#include "common/tokenizer/tokenizer.h"
#include "common/wire/worker_proto.h"
#include "router/chat.h"
#include "router/dispatch.h"
#include "router/metrics.h"
#include "router/requests.h"
#include "router/workers.h"

#define ROUTER_ADDR_MAX 512
/* Dispatches of one request before a worker failure is reported instead of retried. */
#define ROUTER_MAX_ATTEMPTS 3

typedef struct router_opts {
    const char *model;
    char listen[ROUTER_ADDR_MAX];
    char workers[ROUTER_ADDR_MAX];
    char admin[ROUTER_ADDR_MAX];
    char metrics_listen[ROUTER_ADDR_MAX]; /* host:port of HTTP (metrics, health, the API), or "none" */
    const char *api_key_file;             /* keys the OpenAI-compatible routes require, or NULL */
    const char *chat_template_file;       /* a chat template instead of the model's, or NULL */
    const char *tool_call_parser;         /* the tool-call style (tool_calls.h), NULL: the
                                             template's */
    bool metrics_listen_given;            /* explicit: failing to bind it stops the router */
    const char *curve_secret_file, *curve_allow_file, *admin_curve_allow_file;
    const char *worker_curve_allow_file;  /* workers' public keys: the worker socket is CURVE */
    int max_queued_requests;
    int64_t max_queued_tokens;
    int max_tokens_cap;
    bool allow_insecure_bind, log_prompts;
    int heartbeat_ms, worker_timeout_ms, no_workers_wait_ms, stuck_timeout_ms;
    int drain_timeout_ms;
    int stats_interval_ms;                /* the periodic stats line; 0: never */
} router_opts;

/* Counters, logged at exit (and at debug level as they change). */
typedef struct router_stats {
    uint64_t frames;                      /* client frames received */
    uint64_t requests, completed, cancels, pings;
    uint64_t errors[PE_N_CODES];          /* error replies by code */
    uint64_t bad_envelopes;               /* frames not [payload] / ["", payload] */
    uint64_t stale_frames;                /* frames from connections already closed */
    uint64_t send_failures;               /* client gone or not reading */
    /* Client connections closed. A frame over the cap makes ZeroMQ drop the connection,
     * and libzmq 4.3 reports that as a plain disconnect (no event of its own), so such
     * drops are counted here. */
    uint64_t disconnects;
    uint64_t protocol_drops;              /* dropped by ZeroMQ: not a ZMTP peer, bad handshake */
    uint64_t auth_denied, auth_allowed;   /* CURVE handshakes judged by the ZAP handler */
    uint64_t worker_frames, worker_bad_frames, stray_tokens, redispatched, worker_deaths;
    uint64_t worker_stuck;
    uint64_t admin_requests, admin_errors, http_requests;
    uint64_t http_api_calls, http_api_errors; /* OpenAI-compatible calls, and their errors */
    uint64_t conn_evicted;                /* client connections shut down at the cap */
    uint64_t prompt_tokens;               /* dispatched to workers (re-dispatches too) */
    uint64_t generated_tokens;            /* received from workers */
} router_stats;

/* ---- fd_budget.c: the descriptor limit and the connection caps ---- */
typedef struct fd_budget {
    int limit;         /* RLIMIT_NOFILE's soft limit after raising (at most 65536 counted) */
    int reserve;       /* kept for workers, admin, ZeroMQ's internals and files */
    int clients_max;   /* client connections (the client socket's conn_guard) */
    int http_max;      /* HTTP connections */
} fd_budget;
/* Raise the soft limit toward the hard one and split it; logs the result. DERAS_EIO. */
int fd_budget_init(fd_budget *b);

typedef struct curve curve_t;
typedef struct admin admin_t;
typedef struct http http_t;
typedef struct http_call http_call_t;
typedef struct http_api http_api_t;
typedef struct conn_guard conn_guard_t;

typedef struct router {
    router_opts o;

    /* the model: tokenizer and limits only, never weights */
    checkpoint_t *ckpt;
    tokenizer_t *tok;
    chat_t *chat;              /* the model's chat template (or built-in format) */
    tool_style tools;          /* how tool calls are enforced and parsed (tool_calls.h) */
    int vocab_size, ctx_len;
    proto_limits lim;

    /* sockets */
    void *zctx;
    fd_budget fds;
    void *clients, *client_mon;
    conn_guard_t *client_guard;/* the cap on client connections (conn_guard.h) */
    int client_port;           /* the client socket's bound tcp port, or 0 (ipc) */
    double next_cap_log;       /* monotonic seconds: "at the cap" is logged once per 10 s */
    void *workers_sock, *worker_mon;
    void *admin_sock;
    void *zap;
    curve_t *curve, *admin_curve, *worker_curve;

    /* codecs, reused for every message */
    proto_decoder_t *pdec;
    proto_encoder_t *penc;
    wp_decoder_t *wdec;
    wp_encoder_t *wenc;

    rq_table_t *rqs;
    workers_t *workers;
    dispatch_t *disp;
    metrics_t *metrics;
    admin_t *admin;
    http_t *http;
    http_api_t *api;           /* the OpenAI-compatible routes' state (http_api.c) */

    /* scratch */
    int32_t *tok_buf;          /* ctx_len + 1 ids: a text prompt's tokens */
    size_t tok_cap;
    struct touched { rq_t *r; int k; } *touched; /* samples a STEP gave tokens or a finish */
    int n_touched, cap_touched;
    uint64_t stray_rids[64];   /* unknown rids of one STEP, to ABORT once each */
    int n_stray;
    bool gone_pending;         /* some requests are marked gone: relay_reap */
    uint8_t *fd_closed;        /* client connection fds closed and not yet reused */
    size_t fd_closed_cap;
    proto_worker_status pong[WORKERS_MAX];

    router_stats st;
    router_stats stats_last;   /* at the last stats line */
    int64_t stats_last_us, stats_next_us;
    bool draining;
    int64_t drain_deadline_us;
    int64_t start_us;          /* monotonic */
    double start_time_s;       /* wall clock, seconds since the Unix epoch */
} router_t;

static inline int64_t router_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- sockets.c: what the client, worker and admin sockets share ---- */
typedef struct router_sock_opts {
    const char *endpoint;      /* where it will bind: keepalive applies to tcp:// only */
    int64_t max_msg_bytes;     /* ZMQ_MAXMSGSIZE: the peer is dropped above it */
    int sndhwm;
    int rcvhwm;                /* 0: libzmq's default */
    int heartbeat_ivl_ms, heartbeat_timeout_ms; /* ZMTP heartbeats; 0: none */
    int keepalive_idle_s, keepalive_intvl_s;    /* TCP keepalive; 0: off */
    int keepalive_cnt;         /* 0: the system's default */
} router_sock_opts;
/* A ZMQ_ROUTER socket in *out (stored first, so the caller's close frees it on failure)
 * with ROUTER_MANDATORY, linger 0 and the options in o; not yet bound. DERAS_EIO or a
 * ZMQ_CHECK status. */
int router_socket_open(router_t *rt, const router_sock_opts *o, void **out);
/* Bind sock to `endpoint`; `what` names it in the error ("the worker socket"). An ipc://
 * socket file is created 0600 (the umask is 0177 around the bind, which libzmq performs
 * in this thread), so only this user can connect whatever the process's umask, and no
 * chmod through a path that could be a link follows. DERAS_EIO naming the endpoint. */
int router_bind(void *sock, const char *endpoint, const char *what);
/* Monitor sock's `events` on the inproc address `addr`, read through a PAIR socket in
 * *mon. A ZMQ_CHECK status on failure. */
int router_monitor_open(router_t *rt, void *sock, const char *addr, int events, void **mon);
/* The next pending monitor event (its id and value, e.g. the fd of a closed connection);
 * false when none is pending. Never blocks. */
bool router_monitor_next(void *mon, uint16_t *event, uint32_t *value);
/* Read one multipart message without waiting: its first `max` frames into f (the caller
 * closes f[0..n-1]), the others discarded and counted in *extra. Returns n; 0 when nothing
 * was pending, zmq_errno() then says why (EAGAIN: nothing). */
int router_recv_frames(void *sock, zmq_msg_t *f, int max, int *extra);

/* ---- frontend.c: the client socket ---- */
int frontend_open(router_t *rt);
void frontend_close(router_t *rt);
/* Read and handle up to `budget` client frames. */
void frontend_recv(router_t *rt, int budget);
/* Handle the client socket monitor's events (disconnects). */
void frontend_monitor(router_t *rt);
/* Send one reply payload to a client. DERAS_ECLOSED when the client is gone or not
 * reading (its requests are then marked gone for relay_reap). */
int frontend_send(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                  const void *buf, size_t len);
/* Who sent a request: a ZeroMQ envelope (ident, delim, the connection's fd), or an HTTP
 * call (ident a unique key of the call, fd -1). */
typedef struct rq_origin {
    const uint8_t *ident;
    int ident_len;
    bool delim;
    int fd;
    http_call_t *http;         /* NULL: ZeroMQ */
} rq_origin;
/* Both doors' way in: check q (the model's limits, the prompt tokenized or the chat
 * rendered, the context), then admit it to the dispatch queue. PE_NONE: the request is live
 * (and may already have ended: dispatch runs at once); else the code with msg filled, the
 * refusal counted in the metrics, nothing sent. Cost: tokenizing or rendering the prompt,
 * O(prompt); allocates only a new slot's buffers. */
enum proto_error_code frontend_admit(router_t *rt, const rq_origin *o, const proto_request *q,
                                     char *msg, size_t cap);
/* q's prompt as token ids (tokenized, or a chat rendered and tokenized; into rt->tok_buf,
 * valid until the next call) checked against the vocabulary and the context with
 * q->params.max_tokens. PE_NONE or the code with msg. */
enum proto_error_code frontend_prompt(router_t *rt, const proto_request *q, const int32_t **ids,
                                      int *n_ids, char *msg, size_t cap);
/* An error reply (not tied to a live request). */
void frontend_error(router_t *rt, const uint8_t *ident, int ident_len, bool delim,
                    const char *id, enum proto_error_code code, const char *msg);

/* ---- wlink.c: the worker socket ---- */
int wlink_open(router_t *rt);
void wlink_close(router_t *rt);
void wlink_recv(router_t *rt, int budget);
void wlink_monitor(router_t *rt);
/* dispatch_submit_fn */
int wlink_submit(void *ctx, worker_t *k, rq_t *r);
void wlink_abort(router_t *rt, worker_t *k, uint64_t rid);
/* DRAIN to every live worker. */
void wlink_drain_all(router_t *rt);
/* Declare workers silent past the timeout dead, and busy ones without progress stuck. */
void wlink_check_timeouts(router_t *rt, int64_t now_us);

/* ---- relay.c: what clients hear about their requests ---- */
/* The tokens and finishes of one STEP frame from worker k. */
void relay_step(router_t *rt, worker_t *k, const wp_msg *m);
/* End unfinished samples with finish_reason "abort" and this abort_reason. */
void relay_abort(router_t *rt, rq_t *r, const char *abort_reason);
/* End the request with an error (all samples). */
void relay_fail(router_t *rt, rq_t *r, enum proto_error_code code, const char *msg);
/* dispatch_fail_fn */
void relay_fail_cb(void *ctx, rq_t *r, enum proto_error_code code, const char *msg);
/* Worker k is gone: re-dispatch what the client has not heard about, fail the rest. */
void relay_worker_dead(router_t *rt, worker_t *k, const char *why);
/* Worker k is stuck: the same, and each of its requests is aborted there. */
void relay_worker_stuck(router_t *rt, worker_t *k, const char *why);
/* End every request running on k with finish_reason "abort" and this abort_reason (they
 * are aborted at k). Returns how many. */
int relay_abort_worker(router_t *rt, worker_t *k, const char *abort_reason);
/* The connection fd closed: end the requests that came on it. */
void relay_fd_closed(router_t *rt, int fd);
/* Mark every request of this client gone (no more sends; relay_reap ends them). */
void relay_mark_gone(router_t *rt, const uint8_t *ident, int ident_len);
/* End (silently) the requests marked gone. */
void relay_reap(router_t *rt);
/* End requests whose deadline passed. */
void relay_deadlines(router_t *rt, int64_t now_us);

/* ---- admin.c: the admin socket (derasctl): status, drain, undrain, health, metrics ---- */
int admin_open(router_t *rt);
void admin_close(router_t *rt);
/* Read and answer up to `budget` admin requests. */
void admin_recv(router_t *rt, int budget);
/* Timers: drains past their deadline (what is left is aborted), drains to answer. */
void admin_tick(router_t *rt, int64_t now_us);
/* When admin_tick next has something to do (INT64_MAX if nothing). */
int64_t admin_next_timer(const router_t *rt);
/* The Prometheus text of every metric (shared with http.c). DERAS_ENOMEM. */
int admin_metrics_text(router_t *rt, const char **text, size_t *len);
/* Ready: at least one worker ready and the router not stopping. */
bool admin_ready(const router_t *rt);

/* ---- http.c: GET /metrics, /health (readiness), /live on --metrics-listen ---- */
/* Check a --metrics-listen value (HOST:PORT or "none"; loopback unless allow_insecure). */
int http_check_listen(const char *addr, bool allow_insecure);
int http_open(router_t *rt);
void http_close(router_t *rt);
/* The fd to poll for input (-1 when HTTP is off). */
int http_fd(const router_t *rt);
/* The listening socket to poll, or -1 (no HTTP, or accepting paused after EMFILE). */
int http_listen_fd(const router_t *rt);
/* Serve what is ready on the HTTP sockets; never blocks. */
void http_run(router_t *rt);
/* When http_run must run even without input (connection timeouts; INT64_MAX if never). */
int64_t http_next_timer(const router_t *rt, int64_t now_us);

/* ---- http_api.c: the OpenAI-compatible routes; relay.c tells a call what its request did ---- */
/* (the libmicrohttpd side is router/http_api.h) */
/* The call's request r was admitted (frontend_admit). */
void http_api_bind(http_call_t *call, rq_t *r);
/* Pending text of sample k (streaming), sample k's final, the request's error, its end. */
void http_api_chunk(router_t *rt, rq_t *r, int k);
void http_api_final(router_t *rt, rq_t *r, int k, const proto_usage *u);
void http_api_fail(router_t *rt, rq_t *r, enum proto_error_code code, const char *msg);
void http_api_end(router_t *rt, rq_t *r);
/* Calls waiting on their request whose client went away: their requests are cancelled. */
void http_api_check_gone(router_t *rt);
/* The served model's id (/v1/models, the vllm:* gauges' model_name): the base name of
 * --model; "" before http_api_open. */
const char *http_api_model(const router_t *rt);
/* Whether a call was resumed since the last http_run (the next poll must not wait); the
 * take form also clears it (http_run, before MHD_run). */
bool http_api_resumed(const router_t *rt);
bool http_api_take_resumed(router_t *rt);
/* No call is in progress (every response written): a drain may end. */
bool http_api_idle(const router_t *rt);
/* Whether some call waits (the loop then checks for departures every 100 ms). */
bool http_api_waiting(const router_t *rt);
/* --api-key-file: load the keys (one per line, blank and # lines skipped). DERAS_EIO,
 * DERAS_EINVAL (no key in the file), DERAS_ENOMEM. */
int http_api_open(router_t *rt);
void http_api_close(router_t *rt);

/* ---- stats_line.c: the periodic stats line and the per-request end line ---- */
/* Log the stats line when its interval is over (the first call starts the interval). */
void stats_line_tick(router_t *rt, int64_t now_us);
/* When stats_line_tick must run next (INT64_MAX: never). */
int64_t stats_line_next(const router_t *rt);
/* One info line for r's end: its outcome (code PE_NONE: the samples' finish reasons, else
 * the error), tokens and times; never its text. */
void stats_line_request_end(const router_t *rt, const rq_t *r, enum proto_error_code code,
                            int64_t now_us);
/* The line of a request refused before admission (decoded, so it has an id). */
void stats_line_request_refused(const char *id, enum proto_error_code code);

/* ---- curve.c: CURVE keys and the ZAP handler ---- */
/* Keys for the sockets of ZAP domain `domain` (a static string: "deras" for clients,
 * "deras-admin" for the admin socket). */
int curve_load(const char *secret_file, const char *allow_file, const char *domain,
               curve_t **out);
void curve_destroy(curve_t **c);
/* Make sock a CURVE server with our secret key, in c's ZAP domain. */
int curve_apply(const curve_t *c, void *sock);
/* Bind the ZAP handler socket (before the server socket binds). */
int curve_zap_open(void *zctx, void **zap);
/* Answer pending ZAP requests: admit keys listed for the request's domain (client or
 * admin; either may be NULL). */
void curve_zap_handle(const curve_t *const *cs, int n, void *zap, router_stats *st);

#endif
