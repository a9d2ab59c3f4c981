/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_bench.c - `deras bench`: a load generator for deras-router.
 *
 * One thread, one client socket, many streaming requests in flight. The workload is fixed
 * up front from --seed: each request's prompt (a line of --prompts FILE, one of a built-in
 * set, or --random-prompt-tokens token ids), its max_tokens (uniform in --max-tokens
 * MIN:MAX), and its arrival time (all at t = 0 with --rate 0, else a Poisson process: gaps
 * drawn from an exponential distribution of mean 1/rate). A request is sent at its arrival
 * time, or later if --concurrency requests are already in flight.
 *
 * Every event is stamped on arrival. Per request: TTFT (send to first chunk with tokens),
 * TPOT ((last token - first token) / (tokens - 1)), end-to-end latency (send to the last
 * final); over all tokens: inter-token latency, the gap between consecutive chunks of a
 * sample divided by the tokens in the later chunk, counted once per token. Timestamps go
 * into arrays sized from the workload at start, so the event loop allocates nothing.
 *
 * A request succeeds when its samples end with "stop" or "length"; failures are counted by
 * the router's error code, or as timeout (no event for --timeout), client (could not be
 * sent), finish_error or aborted (a final said so). Output tokens/s counts every token
 * received, also from requests that failed later; latencies are of successful requests.
 *
 * Speculative decoding is summed from the finals' usage (drafts verified and accepted,
 * verifications of each sample the worker speculated for; a sample the router ended itself,
 * at a stop string or a cancel, reports none).
 *
 * Report: a table on stderr, or with --json one JSON object on stdout; progress on stderr.
 * Ctrl-C stops sending, cancels what is in flight, and reports what finished. Exit status:
 * 0 when at least one request succeeded (failures are in the report), 1 when none did or
 * the bench could not run, 2 usage, 130 interrupted.
 */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "tools/client/deras_client.h"
#include "tools/client_flags.h"
#include "tools/commands.h"

#define PROGRESS_S 2.0
#define TICK_MS 50      /* longest receive wait: timeouts, progress and Ctrl-C are checked */
#define MAX_IN_FLIGHT 65536 /* --concurrency 0 still keeps the client's table bounded */
/* failure codes of the client's own, after the protocol's */
#define ERR_TIMEOUT PE_N_CODES      /* no event for --timeout */
#define ERR_CLIENT (PE_N_CODES + 1) /* the request could not be sent */
#define ERR_FINISH (PE_N_CODES + 2) /* a sample ended with finish_reason "error" */
#define ERR_ABORT (PE_N_CODES + 3)  /* a sample ended with finish_reason "abort" (drain, Ctrl-C) */
#define N_ERR (PE_N_CODES + 4)

/* Varied built-in prompts: short and long, prose, code, lists, questions. */
static const char *const builtin_prompts[] = {
    "Hello! How are you today?",
    "Write a short poem about the sea.",
    "Explain the difference between a process and a thread in two sentences.",
    "List five fruits that are red.",
    "Translate to French: The weather is nice and we are going to the beach this afternoon.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    ("Summarize the plot of a detective story in which the butler is innocent, the gardener is "
     "suspicious, and the real culprit is the cat, which knocked the vase off the shelf while "
     "chasing a moth at midnight."),
    "What is 17 times 23?",
    "Once upon a time, in a village at the edge of a great forest, there lived",
    "Give three tips for writing clear technical documentation.",
    "SELECT name, COUNT(*) FROM orders GROUP BY",
    "Why is the sky blue? Answer for a ten-year-old.",
    "Describe the smell of rain on hot asphalt.",
    "Compose a haiku about autumn leaves.",
    "The mitochondria is",
    ("Write a polite email declining a meeting invitation because of a scheduling conflict, "
     "and propose two alternative times next week."),
};
#define N_BUILTIN (int)(sizeof builtin_prompts / sizeof *builtin_prompts)

typedef struct bench_args {
    client_flags f;
    int n_requests, concurrency, tok_lo, tok_hi, ids_lo, ids_hi, vocab;
    double rate;
    uint64_t seed;
    bool has_seed, json, quiet;
    const char *prompts_file;
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
    deras_client_t *cl;
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
    /* speculative decoding, summed over the finals' usage: drafts verified, accepted,
     * verifications, and samples that speculated */
    spec_counters spec;          /* summed over the finals */
    unsigned long long spec_samples;
    double t0, t_progress;
} bench;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    interrupted = 1;
}

static double now_s(const bench *b)
{
    return cli_now() - b->t0;
}

/* splitmix64: a seeded, portable workload */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) /* (0, 1] */
{
    return ((rng_next(s) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static int rng_range(uint64_t *s, int lo, int hi)
{
    return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

enum { O_REQ = 256, O_RATE, O_CONC, O_PROMPTS, O_RANDOM, O_VOCAB, O_MAXTOK, O_SEED, O_JSON,
       O_QUIET, O_HELP };
static const struct option own_opts[] = {
    {"requests", required_argument, 0, O_REQ},
    {"rate", required_argument, 0, O_RATE},
    {"concurrency", required_argument, 0, O_CONC},
    {"prompts", required_argument, 0, O_PROMPTS},
    {"random-prompt-tokens", required_argument, 0, O_RANDOM},
    {"vocab", required_argument, 0, O_VOCAB},
    {"max-tokens", required_argument, 0, O_MAXTOK},
    {"seed", required_argument, 0, O_SEED},
    {"json", no_argument, 0, O_JSON},
    {"quiet", no_argument, 0, O_QUIET},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

/* one sample per request: TPOT and inter-token latency are per sample */
static const char *const excluded[] = {"n", NULL};

static void usage(FILE *f)
{
    fputs("usage: deras bench [options]\n"
          "\n"
          "Load deras-router with streaming requests and report throughput and latency.\n"
          "\n"
          "  --requests N            requests to send (default 100)\n"
          "  --rate R                Poisson arrivals per second; 0 = all at once (default 0)\n"
          "  --concurrency C         most requests in flight; 0 = no cap (default 0;\n"
          "                          65536 at most either way)\n"
          "  --prompts FILE          prompts, one per line (default: a built-in varied set)\n"
          "  --random-prompt-tokens MIN:MAX\n"
          "                          random token-id prompts of MIN..MAX tokens instead\n"
          "  --vocab V               token ids for random prompts are drawn from [0, V)\n"
          "                          (default 1000)\n"
          "  --max-tokens MIN:MAX    output tokens per request, uniform (or N; default 128)\n"
          "  --seed N                workload seed; request i also samples with seed N+i\n"
          "  --json                  print the report as one JSON object on stdout\n"
          "  --quiet                 no progress lines\n",
          f);
    client_flags_usage(f, own_opts, excluded);
}

static int parse_range(const char *opt, const char *s, int *lo, int *hi)
{
    char tail;
    if (sscanf(s, "%d:%d%c", lo, hi, &tail) == 2 && *lo >= 1 && *hi >= *lo)
        return 0;
    if (sscanf(s, "%d%c", lo, &tail) == 1 && *lo >= 1) {
        *hi = *lo;
        return 0;
    }
    fprintf(stderr, "%s: expected N or MIN:MAX with 1 <= MIN <= MAX, got '%s'\n", opt, s);
    return -1;
}

static int parse_args(int argc, char **argv, bench_args *a)
{
    struct option opts[CLIENT_FLAGS_MAX_OPTIONS];
    client_flags_options(own_opts, excluded, opts);
    memset(a, 0, sizeof *a);
    client_flags_init(&a->f);
    a->n_requests = 100;
    a->tok_lo = a->tok_hi = 128;
    a->vocab = 1000;
    long l;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int r = client_flags_apply(&a->f, c, optarg);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        switch (c) {
        case O_REQ:
            if (cli_int("--requests", optarg, 1, 10000000, &l)) return 2;
            a->n_requests = (int)l;
            break;
        case O_RATE:
            if (cli_float("--rate", optarg, 0, 1e6, &a->rate)) return 2;
            break;
        case O_CONC:
            if (cli_int("--concurrency", optarg, 0, 1000000, &l)) return 2;
            a->concurrency = (int)l;
            break;
        case O_PROMPTS: a->prompts_file = optarg; break;
        case O_RANDOM:
            if (parse_range("--random-prompt-tokens", optarg, &a->ids_lo, &a->ids_hi)) return 2;
            break;
        case O_VOCAB:
            if (cli_int("--vocab", optarg, 1, INT32_MAX, &l)) return 2;
            a->vocab = (int)l;
            break;
        case O_MAXTOK:
            if (parse_range("--max-tokens", optarg, &a->tok_lo, &a->tok_hi)) return 2;
            break;
        case O_SEED:
            if (cli_u64("--seed", optarg, &a->seed)) return 2;
            a->has_seed = true;
            break;
        case O_JSON: a->json = true; break;
        case O_QUIET: a->quiet = true; break;
        case 'h':
        case O_HELP: usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (a->prompts_file && a->ids_hi) {
        fprintf(stderr, "bench: --prompts and --random-prompt-tokens exclude each other\n");
        return 2;
    }
    return 0;
}

/* ---- workload ---- */

static int load_prompts(bench *b, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return deras_fail(DERAS_EIO, "--prompts %s: cannot open", path);
    size_t len = 0, cap = 0;
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *p = realloc(b->file_buf, cap);
            if (!p) {
                fclose(f);
                return deras_fail(DERAS_ENOMEM, "out of memory");
            }
            b->file_buf = p;
        }
        memcpy(b->file_buf + len, tmp, n);
        len += n;
    }
    fclose(f);
    if (!len)
        return deras_fail(DERAS_EINVAL, "--prompts %s: empty file", path);
    b->file_buf[len] = '\0';
    int n_lines = 1;
    for (size_t i = 0; i < len; i++)
        n_lines += b->file_buf[i] == '\n';
    if (!(b->lines = malloc((size_t)n_lines * sizeof *b->lines)))
        return deras_fail(DERAS_ENOMEM, "out of memory");
    for (char *p = b->file_buf, *e; p && *p; p = e ? e + 1 : NULL) {
        if ((e = strchr(p, '\n')))
            *e = '\0';
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r')
            p[--l] = '\0';
        if (l)
            b->lines[b->n_lines++] = p;
    }
    if (!b->n_lines)
        return deras_fail(DERAS_EINVAL, "--prompts %s: no non-empty line", path);
    return DERAS_OK;
}

static int make_workload(bench *b)
{
    const bench_args *a = b->a;
    int rc;
    uint64_t rng = a->has_seed ? a->seed : 1;
    if (a->prompts_file && (rc = load_prompts(b, a->prompts_file)))
        return rc;
    if (!(b->r = calloc((size_t)a->n_requests, sizeof *b->r)))
        return deras_fail(DERAS_ENOMEM, "out of memory");
    size_t pool = 0, tokens = 0;
    if (a->ids_hi) {
        pool = (size_t)a->n_requests * (size_t)a->ids_hi;
        if (!(b->id_pool = malloc(pool * sizeof *b->id_pool)))
            return deras_fail(DERAS_ENOMEM, "out of memory (%zu prompt token ids)", pool);
    }
    double t = 0;
    size_t used = 0;
    for (int i = 0; i < a->n_requests; i++) {
        req_state *r = &b->r[i];
        if (a->ids_hi) {
            r->n_ids = rng_range(&rng, a->ids_lo, a->ids_hi);
            r->ids = b->id_pool + used;
            for (int k = 0; k < r->n_ids; k++)
                r->ids[k] = (int32_t)(rng_next(&rng) % (uint64_t)a->vocab);
            used += (size_t)r->n_ids;
        } else if (b->n_lines) {
            r->prompt = b->lines[rng_next(&rng) % (uint64_t)b->n_lines];
        } else {
            r->prompt = builtin_prompts[rng_next(&rng) % N_BUILTIN];
        }
        r->max_tokens = rng_range(&rng, a->tok_lo, a->tok_hi);
        tokens += (size_t)r->max_tokens;
        if (a->rate > 0 && i > 0)
            t += -log(rng_unit(&rng)) / a->rate;
        r->arrival = t;
    }
    b->cap_itl = tokens;
    if (!(b->itl = malloc((tokens ? tokens : 1) * sizeof *b->itl)))
        return deras_fail(DERAS_ENOMEM, "out of memory (%zu token timings)", tokens);
    return DERAS_OK;
}

/* ---- the event loop ---- */

static void finish_req(bench *b, req_state *r, bool ok, int err, double t)
{
    r->state = ok ? RS_OK : RS_FAILED;
    r->t_end = t;
    r->err = err;
    b->in_tokens += r->prompt_tokens;
    b->n_live--;
    b->n_done++;
    if (ok) {
        b->n_ok++;
    } else {
        b->n_failed++;
        b->n_err[err]++;
    }
}

static int send_next(bench *b)
{
    const bench_args *a = b->a;
    int i = b->next++;
    req_state *r = &b->r[i];
    proto_request q = a->f.req;
    q.id[0] = '\0';
    if (r->ids) {
        q.prompt_ids = r->ids;
        q.n_prompt_ids = r->n_ids;
    } else {
        q.prompt = r->prompt;
        q.prompt_len = strlen(r->prompt);
    }
    q.params.max_tokens = r->max_tokens;
    q.stream = true;
    if (a->has_seed) {
        q.has_seed = true;
        q.params.seed = a->seed + (uint64_t)i;
    }
    r->t_send = r->t_heard = now_s(b);
    r->state = RS_LIVE;
    b->n_live++;
    int rc = deras_client_send(b->cl, &q, r);
    if (rc) {
        if (b->n_err[ERR_CLIENT] == 0)
            fprintf(stderr, "bench: request %d: %s\n", i, deras_errmsg());
        finish_req(b, r, false, ERR_CLIENT, r->t_send);
        return rc == DERAS_EINVAL || rc == DERAS_ENOMEM ? rc : DERAS_OK;
    }
    memcpy(r->id, q.id, sizeof r->id);
    return DERAS_OK;
}

static void on_event(bench *b, const deras_event *ev, double t)
{
    if (!ev->known) {
        b->n_stray++;
        return;
    }
    req_state *r = ev->user;
    const proto_server_msg *m = &ev->msg;
    r->t_heard = t;
    switch (m->type) {
    case PROTO_CHUNK:
        if (m->n_token_ids <= 0)
            break;
        if (r->n_tokens == 0) {
            r->t_first = t;
        } else {
            double gap = (t - r->t_last) / m->n_token_ids;
            for (int k = 0; k < m->n_token_ids && b->n_itl < b->cap_itl; k++)
                b->itl[b->n_itl++] = gap;
        }
        r->t_last = t;
        r->n_tokens += m->n_token_ids;
        b->out_tokens += m->n_token_ids;
        break;
    case PROTO_FINAL:
        r->prompt_tokens = m->usage.prompt_tokens;
        spec_counters_add(&b->spec, &m->usage.spec);
        b->spec_samples += spec_counters_any(&m->usage.spec);
        if (m->finish == FINISH_ERROR)
            r->bad_finish = ERR_FINISH;
        else if (m->finish == FINISH_ABORT && !r->bad_finish)
            r->bad_finish = ERR_ABORT;
        if (r->n_tokens == 0 && m->usage.completion_tokens > 0) { /* a router without chunks */
            r->n_tokens = m->usage.completion_tokens;
            b->out_tokens += r->n_tokens;
        }
        if (ev->done) {
            finish_req(b, r, !r->bad_finish, r->bad_finish, t);
        }
        break;
    case PROTO_ERROR:
        if (b->n_err[m->code] == 0)
            fprintf(stderr, "bench: request %s: %s: %s\n", r->id, proto_error_name(m->code),
                    m->message);
        finish_req(b, r, false, m->code, t);
        break;
    default: break;
    }
}

/* Requests silent for --timeout: cancelled, forgotten, failed. O(requests sent). */
static void expire(bench *b, double t)
{
    for (int i = 0; i < b->next; i++) {
        req_state *r = &b->r[i];
        if (r->state != RS_LIVE || t - r->t_heard < b->a->f.timeout_s)
            continue;
        deras_client_cancel(b->cl, r->id);
        deras_client_forget(b->cl, r->id);
        if (b->n_err[ERR_TIMEOUT] == 0)
            fprintf(stderr, "bench: request %s: no event for %.3g s, counted as failed\n",
                    r->id, b->a->f.timeout_s);
        finish_req(b, r, false, ERR_TIMEOUT, t);
    }
}

static void progress(bench *b, double t)
{
    fprintf(stderr, "bench: %6.1f s  done %d/%d (%d failed)  in flight %d  %.0f output tok/s\n",
            t, b->n_done, b->a->n_requests, b->n_failed, b->n_live,
            t > 0 ? b->out_tokens / t : 0.0);
}

static int run(bench *b)
{
    const bench_args *a = b->a;
    int rc = DERAS_OK;
    bool stopping = false;
    double stop_at = 0;
    b->t0 = cli_now();
    b->t_progress = PROGRESS_S;
    while (b->n_done < a->n_requests) {
        double t = now_s(b);
        if (interrupted && !stopping) {
            stopping = true;
            stop_at = t;
            fprintf(stderr, "bench: interrupted: cancelling %d requests in flight\n", b->n_live);
            for (int i = 0; i < b->next; i++)
                if (b->r[i].state == RS_LIVE)
                    deras_client_cancel(b->cl, b->r[i].id);
        }
        if (stopping && (b->n_live == 0 || t - stop_at > 5))
            break;
        while (!stopping && b->next < a->n_requests && b->r[b->next].arrival <= t &&
               b->n_live < b->cap)
            if ((rc = send_next(b)))
                return rc;
        int wait = TICK_MS;
        if (!stopping && b->next < a->n_requests && b->n_live < b->cap) {
            double until = (b->r[b->next].arrival - now_s(b)) * 1e3;
            wait = until <= 0 ? 0 : until < TICK_MS ? (int)ceil(until) : TICK_MS;
        }
        deras_event ev;
        rc = deras_client_recv(b->cl, wait, &ev);
        while (rc == DERAS_OK) { /* drain what is there before sending more */
            on_event(b, &ev, now_s(b));
            rc = deras_client_recv(b->cl, 0, &ev);
        }
        if (rc != DERAS_ETIMEOUT)
            return rc;
        rc = DERAS_OK;
        t = now_s(b);
        expire(b, t);
        if (t >= b->t_progress) {
            if (!a->quiet)
                progress(b, t);
            b->t_progress = t + PROGRESS_S;
        }
    }
    return rc;
}

/* ---- report ---- */

typedef struct dist {
    int n;
    double mean, p50, p90, p99; /* milliseconds */
} dist;

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* nearest-rank percentiles of v[0..n) (sorted in place), seconds -> ms */
static dist summarize(double *v, size_t n)
{
    dist d = {.n = (int)n};
    if (!n)
        return d;
    qsort(v, n, sizeof *v, cmp_d);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    double p[3] = {50, 90, 99}, *out[3] = {&d.p50, &d.p90, &d.p99};
    for (int k = 0; k < 3; k++) {
        long i = (long)ceil(p[k] / 100.0 * (double)n) - 1;
        *out[k] = v[i < 0 ? 0 : (size_t)i >= n ? n - 1 : (size_t)i] * 1e3;
    }
    d.mean = sum / (double)n * 1e3;
    return d;
}

static json_t *dist_json(const dist *d)
{
    return json_pack("{s:i, s:f, s:f, s:f, s:f}", "n", d->n, "mean", d->mean, "p50", d->p50,
                     "p90", d->p90, "p99", d->p99);
}

static const char *err_name(int e)
{
    return e == ERR_TIMEOUT   ? "timeout"
           : e == ERR_CLIENT  ? "client"
           : e == ERR_FINISH  ? "finish_error"
           : e == ERR_ABORT   ? "aborted"
                              : proto_error_name(e);
}

static int report(bench *b, double duration)
{
    const bench_args *a = b->a;
    int n = a->n_requests;
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    dist ttft, tpot, e2e, itl;
    size_t k = 0;
    for (int i = 0; i < n; i++)
        if (b->r[i].state == RS_OK && b->r[i].t_first > 0)
            v[k++] = b->r[i].t_first - b->r[i].t_send;
    ttft = summarize(v, k);
    k = 0;
    for (int i = 0; i < n; i++)
        if (b->r[i].state == RS_OK && b->r[i].n_tokens > 1 && b->r[i].t_last > b->r[i].t_first)
            v[k++] = (b->r[i].t_last - b->r[i].t_first) / (b->r[i].n_tokens - 1);
    tpot = summarize(v, k);
    k = 0;
    for (int i = 0; i < n; i++)
        if (b->r[i].state == RS_OK)
            v[k++] = b->r[i].t_end - b->r[i].t_send;
    e2e = summarize(v, k);
    itl = summarize(b->itl, b->n_itl);
    free(v);

    double req_s = duration > 0 ? b->n_ok / duration : 0;
    double out_s = duration > 0 ? b->out_tokens / duration : 0;
    double in_s = duration > 0 ? b->in_tokens / duration : 0;
    const spec_counters *sp = &b->spec;
    double acc_rate = sp->proposed ? (double)sp->accepted / (double)sp->proposed : 0;
    double acc_len = sp->verifications ? (double)sp->accepted / (double)sp->verifications : 0;
    if (a->json) {
        json_t *by = json_object();
        for (int e = 0; e < N_ERR; e++)
            if (b->n_err[e])
                json_object_set_new(by, err_name(e), json_integer(b->n_err[e]));
        json_t *o = json_pack(
            "{s:s, s:i, s:i, s:i, s:o, s:f, s:f, s:I, s:f, s:I, s:f, s:o, s:o, s:o, s:o,"
            " s:{s:f, s:i, s:[i,i], s:s, s:b}, s:{s:I, s:I, s:I, s:I, s:f, s:f}}",
            "address", a->f.address, "requests", n, "ok", b->n_ok, "failed", b->n_failed,
            "failed_by_code", by, "duration_s", duration, "requests_per_s", req_s,
            "output_tokens", (json_int_t)b->out_tokens, "output_tokens_per_s", out_s,
            "input_tokens", (json_int_t)b->in_tokens, "input_tokens_per_s", in_s,
            "ttft_ms", dist_json(&ttft), "tpot_ms", dist_json(&tpot), "itl_ms", dist_json(&itl),
            "e2e_ms", dist_json(&e2e), "config", "rate", a->rate, "concurrency", a->concurrency,
            "max_tokens", a->tok_lo, a->tok_hi, "prompts",
            a->ids_hi ? "random_ids" : a->prompts_file ? a->prompts_file : "builtin",
            "ignore_eos", (int)a->f.req.params.ignore_eos, "speculation", "samples",
            (json_int_t)b->spec_samples, "draft_tokens", (json_int_t)sp->proposed,
            "accepted_tokens", (json_int_t)sp->accepted, "verifications",
            (json_int_t)sp->verifications, "acceptance_rate", acc_rate,
            "mean_accepted_length", acc_len);
        if (!o)
            return deras_fail(DERAS_ENOMEM, "building the JSON report failed");
        json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
        fputc('\n', stdout);
        fflush(stdout);
        json_decref(o);
        return DERAS_OK;
    }
    fprintf(stderr, "\n");
    fprintf(stderr, "requests        %d ok, %d failed (of %d)\n", b->n_ok, b->n_failed, n);
    if (b->n_failed) {
        fprintf(stderr, "failed by code ");
        for (int e = 0, first = 1; e < N_ERR; e++)
            if (b->n_err[e]) {
                fprintf(stderr, "%s%s %d", first ? " " : ", ", err_name(e), b->n_err[e]);
                first = 0;
            }
        fputc('\n', stderr);
    }
    fprintf(stderr, "duration        %.3f s\n", duration);
    fprintf(stderr, "throughput      %.2f requests/s, %.1f output tokens/s (%lld tokens), "
                    "%.1f prompt tokens/s\n", req_s, out_s, b->out_tokens, in_s);
    fprintf(stderr, "latency (ms)      %8s %8s %8s %8s %8s\n", "n", "mean", "p50", "p90", "p99");
    const dist *ds[] = {&ttft, &tpot, &itl, &e2e};
    const char *names[] = {"TTFT", "TPOT", "inter-token", "end-to-end"};
    for (int i = 0; i < 4; i++)
        fprintf(stderr, "  %-15s %8d %8.2f %8.2f %8.2f %8.2f\n", names[i], ds[i]->n, ds[i]->mean,
                ds[i]->p50, ds[i]->p90, ds[i]->p99);
    if (b->spec_samples)
        fprintf(stderr, "speculation     %llu samples: %llu draft tokens, %llu accepted "
                        "(%.1f%%), %.2f accepted per verification (%llu verifications)\n",
                b->spec_samples, (unsigned long long)sp->proposed,
                (unsigned long long)sp->accepted, 100.0 * acc_rate, acc_len,
                (unsigned long long)sp->verifications);
    else
        fprintf(stderr, "speculation     none\n");
    if (b->n_stray)
        fprintf(stderr, "(%d messages for unknown request ids ignored)\n", b->n_stray);
    return DERAS_OK;
}

int cmd_bench(int argc, char **argv)
{
    bench_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    bench b = {.a = &a};
    struct sigaction sa = {.sa_handler = on_sigint}, old;
    sigemptyset(&sa.sa_mask);
    int status = 1;
    if ((rc = make_workload(&b)))
        goto out;
    int cap = a.concurrency ? a.concurrency : a.n_requests;
    if (cap > MAX_IN_FLIGHT)
        cap = MAX_IN_FLIGHT;
    b.cap = cap;
    if ((rc = client_flags_connect(&a.f, cap, &b.cl)))
        goto out;
    if (!a.quiet)
        fprintf(stderr, "bench: %d requests to %s, rate %g/s%s, concurrency %d%s, max_tokens "
                "%d:%d\n", a.n_requests, a.f.address, a.rate,
                a.rate > 0 ? " (Poisson)" : " (all at once)", a.concurrency,
                a.concurrency ? "" : " (no cap)", a.tok_lo, a.tok_hi);
    sigaction(SIGINT, &sa, &old);
    rc = run(&b);
    sigaction(SIGINT, &old, NULL);
    double duration = now_s(&b);
    if (rc)
        goto out;
    if ((rc = report(&b, duration)))
        goto out;
    status = interrupted ? 130 : b.n_ok ? 0 : 1;
out:
    if (rc)
        fprintf(stderr, "deras bench: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
    deras_client_destroy(&b.cl);
    free(b.r);
    free(b.id_pool);
    free(b.itl);
    free(b.lines);
    free(b.file_buf);
    return status;
}
