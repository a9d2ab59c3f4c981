/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_bench.c - `deras bench`: a load generator for deras-router, over its client protocol
 * (ZeroMQ, the default) or its OpenAI-compatible HTTP API (--http URL).
 *
 * One thread, many streaming requests in flight. The workload is fixed up front from
 * --seed: each request's prompt (a line of --prompts FILE, one of a built-in set, or
 * --random-prompt-tokens token ids), its max_tokens (uniform in --max-tokens MIN:MAX), and
 * its arrival time (all at t = 0 with --rate 0, else a Poisson process: gaps drawn from an
 * exponential distribution of mean 1/rate). A request is sent at its arrival time, or
 * later if --concurrency requests are already in flight. The same workload runs over
 * either transport (bench_zmq.c, bench_http.c), measured alike (bench.h), so the two doors
 * can be compared in one run; --chat sends each prompt as a user's message instead.
 *
 * A request succeeds when its samples end with "stop" or "length"; failures are counted by
 * the router's error code, or as timeout (no event for --timeout), client (could not be
 * sent), finish_error or aborted (a final said so), http (an HTTP answer without a
 * protocol code). Output tokens/s counts every token received, also from requests that
 * failed later; latencies are of successful requests. Speculative decoding is summed from
 * the finals' usage over ZeroMQ (the HTTP API does not report it).
 *
 * Report (bench_report.c): a table on stderr, or with --json one JSON object on stdout;
 * progress on stderr. Ctrl-C stops sending, cancels what is in flight, and reports what
 * finished. Exit status: 0 when at least one request succeeded (failures are in the
 * report), 1 when none did or the bench could not run, 2 usage, 130 interrupted.
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "tools/bench.h"
#include "tools/client_flags.h"
#include "tools/commands.h"

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


volatile sig_atomic_t bench_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    bench_interrupted = 1;
}

double bench_now(const bench *b)
{
    return cli_now() - b->t0;
}

bool bench_due(const bench *b, double t)
{
    return b->next < b->a->n_requests && b->r[b->next].arrival <= t && b->n_live < b->cap;
}

int bench_wait_ms(const bench *b)
{
    if (b->next >= b->a->n_requests || b->n_live >= b->cap)
        return BENCH_TICK_MS;
    double until = (b->r[b->next].arrival - bench_now(b)) * 1e3;
    return until <= 0 ? 0 : until < BENCH_TICK_MS ? (int)ceil(until) : BENCH_TICK_MS;
}

void bench_tokens(bench *b, req_state *r, int n, double t)
{
    if (r->n_tokens == 0) {
        r->t_first = t;
    } else {
        double gap = (t - r->t_last) / n;
        for (int k = 0; k < n && b->n_itl < b->cap_itl; k++)
            b->itl[b->n_itl++] = gap;
    }
    r->t_last = t;
    r->n_tokens += n;
    b->out_tokens += n;
}

void bench_finish(bench *b, req_state *r, bool ok, int err, double t)
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

void bench_tick(bench *b, double t)
{
    if (t < b->t_progress)
        return;
    if (!b->a->quiet)
        fprintf(stderr, "bench: %6.1f s  done %d/%d (%d failed)  in flight %d  %.0f output "
                "tok/s\n", t, b->n_done, b->a->n_requests, b->n_failed, b->n_live,
                t > 0 ? b->out_tokens / t : 0.0);
    b->t_progress = t + BENCH_PROGRESS_S;
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
       O_QUIET, O_SAMPLES, O_CHAT, O_HTTP, O_KEYFILE, O_MODEL, O_HELP };
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
    {"samples", required_argument, 0, O_SAMPLES},
    {"chat", no_argument, 0, O_CHAT},
    {"http", required_argument, 0, O_HTTP},
    {"api-key-file", required_argument, 0, O_KEYFILE},
    {"model", required_argument, 0, O_MODEL},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

/* one sample per request: TPOT and inter-token latency are per sample */
static const char *const excluded[] = {"n", NULL};

static void usage(FILE *f)
{
    fputs("usage: deras bench [options]\n"
          "\n"
          "Load deras-router with streaming requests and report throughput and latency,\n"
          "over its client protocol (ZeroMQ, --address) or its OpenAI HTTP API (--http).\n"
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
          "  --quiet                 no progress lines\n"
          "  --samples FILE          every request's timings as JSON lines (for\n"
          "                          bench/plot_bench.py)\n"
          "  --chat                  each prompt is a user's message in a chat (rendered\n"
          "                          by the model's template) instead of a raw prompt\n"
          "  --http URL              the OpenAI-compatible API at URL (http://HOST:PORT,\n"
          "                          e.g. the router's http://127.0.0.1:9400): streaming\n"
          "                          /v1/completions, or /v1/chat/completions with --chat\n"
          "  --api-key-file FILE     with --http: the first key in FILE as the Bearer token\n"
          "  --model NAME            with --http: the model field (default: the first\n"
          "                          of GET /v1/models)\n",
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
        case O_SAMPLES: a->samples_file = optarg; break;
        case O_CHAT: a->chat = true; break;
        case O_HTTP: a->http = optarg; break;
        case O_KEYFILE: a->api_key_file = optarg; break;
        case O_MODEL: a->model = optarg; break;
        case 'h':
        case O_HELP: usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    const char *bad = a->prompts_file && a->ids_hi ? "--prompts and --random-prompt-tokens "
                                                     "exclude each other"
                      : a->chat && a->ids_hi ? "--chat takes text prompts, not "
                                               "--random-prompt-tokens"
                      : !a->http && (a->api_key_file || a->model) ? "--api-key-file and "
                                                                    "--model need --http"
                      /* fields the HTTP API does not have */
                      : a->http && a->f.req.deadline_ms ? "--deadline-ms is not available "
                                                          "over --http"
                      : a->http && a->f.req.params.spec_tokens ? "--num-speculative-tokens is "
                                                                 "not available over --http"
                      : a->http && a->chat && !a->f.req.add_special_tokens
                          ? "--no-special-tokens does not apply to --chat over --http"
                          : NULL;
    if (bad) {
        fprintf(stderr, "bench: %s\n", bad);
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
    b.cap = cap > BENCH_MAX_IN_FLIGHT ? BENCH_MAX_IN_FLIGHT : cap;
    if (!a.quiet)
        fprintf(stderr, "bench: %d %s requests to %s, rate %g/s%s, concurrency %d%s, "
                "max_tokens %d:%d\n", a.n_requests, a.chat ? "chat" : "completion",
                a.http ? a.http : a.f.address, a.rate,
                a.rate > 0 ? " (Poisson)" : " (all at once)", a.concurrency,
                a.concurrency ? "" : " (no cap)", a.tok_lo, a.tok_hi);
    sigaction(SIGINT, &sa, &old);
    rc = a.http ? bench_run_http(&b) : bench_run_zmq(&b);
    sigaction(SIGINT, &old, NULL);
    double duration = bench_now(&b);
    if (rc)
        goto out;
    if ((rc = bench_report(&b, duration)))
        goto out;
    status = bench_interrupted ? 130 : b.n_ok ? 0 : 1;
out:
    if (rc)
        fprintf(stderr, "deras bench: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
    free(b.r);
    free(b.id_pool);
    free(b.itl);
    free(b.lines);
    free(b.file_buf);
    return status;
}
