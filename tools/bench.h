/* SPDX-License-Identifier: Apache-2.0 */
/* bench.h - `deras bench`'s shared state: the options, the workload, every request's
 * timestamps, and what the two transports (bench_zmq.c: the client protocol over ZeroMQ;
 * bench_http.c: the OpenAI-compatible HTTP API) report into it, so that both measure
 * alike and one report (bench_report.c) prints them.
 *
 * A transport sends request i at b->r[i].arrival or later (bench_due), stamps every event
 * on arrival, and tells the core about it: bench_tokens() for n new tokens of a request's
 * sample, bench_finish() when the request ends. TTFT is send to the first token, TPOT
 * (last token - first token) / (tokens - 1), end-to-end send to the end, inter-token
 * latency every gap between a sample's consecutive token-bearing events divided by the
 * tokens of the later one. The arrays are sized from the workload at start, so the event
 * loops allocate nothing per token.
 */
#ifndef DERAS_TOOLS_BENCH_H
#define DERAS_TOOLS_BENCH_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/request/spec_counters.h"
#include "common/wire/protocol.h"
#include "tools/client_flags.h"

#define BENCH_PROGRESS_S 2.0
#define BENCH_TICK_MS 50        /* longest wait: timeouts, progress and Ctrl-C are checked */
#define BENCH_MAX_IN_FLIGHT 65536 /* --concurrency 0 still keeps the tables bounded */
/* failure codes of the bench's own, after the protocol's */
#define ERR_TIMEOUT PE_N_CODES      /* no event for --timeout */
#define ERR_CLIENT (PE_N_CODES + 1) /* the request could not be sent (or connected) */
#define ERR_FINISH (PE_N_CODES + 2) /* a sample ended with finish_reason "error" */
#define ERR_ABORT (PE_N_CODES + 3)  /* a sample ended with finish_reason "abort" (drain, Ctrl-C) */
#define ERR_HTTP (PE_N_CODES + 4)   /* an HTTP answer without a protocol code, a broken stream */
#define N_ERR (PE_N_CODES + 5)

typedef struct bench_args {
    client_flags f;
    int n_requests, concurrency, tok_lo, tok_hi, ids_lo, ids_hi, vocab;
    double rate;
    uint64_t seed;
    bool has_seed, json, quiet, chat;
    const char *prompts_file;
    const char *samples_file;   /* --samples: per-request JSON lines (bench_samples.h) */
    const char *http;           /* --http URL: the OpenAI API instead of ZeroMQ */
    const char *api_key_file;   /* --api-key-file (with --http) */
    const char *model;          /* --model (with --http); NULL: the first of /v1/models */
} bench_args;

typedef struct req_state {
    const char *prompt;         /* into the prompt set; NULL with token ids */
    int32_t *ids;               /* into the id pool */
    int n_ids, max_tokens, n_tokens, prompt_tokens, err;
    int bad_finish;             /* ERR_FINISH or ERR_ABORT when a final said so, else 0 */
    double arrival, t_send, t_first, t_last, t_end, t_heard; /* seconds since start */
    enum { RS_WAITING, RS_LIVE, RS_OK, RS_FAILED } state;
    char id[PROTO_MAX_ID + 1];
} req_state;

typedef struct bench {
    const bench_args *a;
    req_state *r;
    int32_t *id_pool;
    char **lines;               /* --prompts */
    int n_lines;
    char *file_buf;
    double *itl;                /* inter-token latencies, seconds */
    size_t n_itl, cap_itl;
    int next, n_live, cap, n_done, n_ok, n_failed, n_stray; /* cap: most in flight */
    int n_err[N_ERR];
    long long out_tokens, in_tokens;
    spec_counters spec;          /* summed over the finals (ZeroMQ only) */
    unsigned long long spec_samples;
    double t0, t_progress;
    char target[300];            /* what the report names: the address or the URL */
} bench;

/* Set by SIGINT: stop sending, cancel what is in flight, report. */
extern volatile sig_atomic_t bench_interrupted;

/* Seconds since the run began. */
double bench_now(const bench *b);
/* Whether request b->next may be sent at time t (arrived, under the cap, not stopping). */
bool bench_due(const bench *b, double t);
/* How long to wait for events before the next arrival, in ms (0..BENCH_TICK_MS). */
int bench_wait_ms(const bench *b);
/* n tokens of request r arrived at t (n > 0). */
void bench_tokens(bench *b, req_state *r, int n, double t);
/* Request r ended at t: ok, or failed with err (a protocol code or ERR_*). */
void bench_finish(bench *b, req_state *r, bool ok, int err, double t);
/* The progress line, every BENCH_PROGRESS_S, unless --quiet. */
void bench_tick(bench *b, double t);
/* A failure code's name in the report. */
const char *bench_err_name(int e);

/* The transports: run the workload to its end (or Ctrl-C). DERAS_OK, or a status that
 * stops the bench (could not connect at all, out of memory). */
int bench_run_zmq(bench *b);
int bench_run_http(bench *b);

/* Print the report (a table on stderr, or JSON on stdout) and write --samples. */
int bench_report(bench *b, double duration);

#endif
