/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.c - request counters, fixed-bucket histograms, Prometheus text (see metrics.h).
 *
 * A histogram keeps one count per bucket (not cumulative) plus the sum and the count;
 * rendering accumulates them into the `le` series Prometheus expects. Bucket bounds are
 * fixed at compile time, chosen like vLLM's for the same quantities so that dashboards
 * written for one read the other, and wide enough for a CPU worker's slow steps.
 *
 * The text buffer grows geometrically and is kept between renders: a warm render
 * allocates nothing. Label values (worker names) are escaped as the format requires
 * (backslash, double quote, newline); names are validated UTF-8 by the worker protocol.
 */
#include "router/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

typedef struct hist {
    const char *name, *help;
    const double *le;          /* upper bounds, ascending */
    int n_le;
    uint64_t counts[METRICS_MAX_BUCKETS + 1]; /* per bucket; [n_le] is above the last bound */
    double sum;
    uint64_t count;
} hist;

static const double ttft_le[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
static const double tpot_le[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double e2e_le[] = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0,
                                15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
                                1920.0, 7680.0};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
_Static_assert(N_OF(ttft_le) <= METRICS_MAX_BUCKETS && N_OF(tpot_le) <= METRICS_MAX_BUCKETS &&
                   N_OF(e2e_le) <= METRICS_MAX_BUCKETS,
               "bucket bounds fit a histogram");

struct metrics {
    uint64_t finished[FINISH_N];  /* by finish reason; FINISH_ERROR counts error replies */
    uint64_t prompt_tokens, generation_tokens;
    hist ttft, tpot, e2e, queue;

    char *buf;                 /* the last render */
    size_t len, cap;
    int err;                   /* first failure of the render in progress */
};

static void hist_init(hist *h, const char *name, const char *help, const double *le, int n_le)
{
    memset(h, 0, sizeof *h);
    h->name = name;
    h->help = help;
    h->le = le;
    h->n_le = n_le;
}

static void observe(hist *h, double v)
{
    int i = 0;
    while (i < h->n_le && v > h->le[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

int metrics_new(metrics_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "metrics_new: NULL out");
    metrics_t *m = *out = calloc(1, sizeof *m);
    if (!m)
        return deras_fail(DERAS_ENOMEM, "metrics_new: out of memory");
    hist_init(&m->ttft, "deras_time_to_first_token_seconds",
              "Time from receipt of a request to the first token of a sample, observed when "
              "the sample ends.", ttft_le, N_OF(ttft_le));
    hist_init(&m->tpot, "deras_time_per_output_token_seconds",
              "Mean time between output tokens of a sample: (last token - first token) / "
              "(tokens - 1).", tpot_le, N_OF(tpot_le));
    hist_init(&m->e2e, "deras_e2e_request_latency_seconds",
              "Time from receipt of a request to the final of a sample.", e2e_le, N_OF(e2e_le));
    hist_init(&m->queue, "deras_request_queue_time_seconds",
              "Time a request waited in the router's queue before its (last) dispatch.", e2e_le,
              N_OF(e2e_le));
    return DERAS_OK;
}

void metrics_destroy(metrics_t **mp)
{
    if (!mp || !*mp)
        return;
    free((*mp)->buf);
    free(*mp);
    *mp = NULL;
}

void metrics_sample_end(metrics_t *m, finish_reason finish, int completion_tokens,
                        double ttft_s, double tpot_s, double e2e_s)
{
    m->finished[(int)finish >= 0 && finish <= FINISH_LAST_SAMPLE ? finish : FINISH_ABORT]++;
    if (completion_tokens > 0)
        m->generation_tokens += (uint64_t)completion_tokens;
    if (ttft_s >= 0)
        observe(&m->ttft, ttft_s);
    if (tpot_s >= 0)
        observe(&m->tpot, tpot_s);
    observe(&m->e2e, e2e_s < 0 ? 0 : e2e_s);
}

void metrics_request_end(metrics_t *m, int prompt_tokens, double queue_s)
{
    if (prompt_tokens > 0)
        m->prompt_tokens += (uint64_t)prompt_tokens;
    observe(&m->queue, queue_s < 0 ? 0 : queue_s);
}

void metrics_request_error(metrics_t *m)
{
    m->finished[FINISH_ERROR]++;
}

/* ---- rendering ---- */

static void put(metrics_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(metrics_t *m, const char *fmt, ...)
{
    if (m->err)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(m->buf + m->len, m->cap - m->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            m->err = deras_fail(DERAS_EINTERNAL, "metrics: formatting failed");
            return;
        }
        if ((size_t)n < m->cap - m->len) {
            m->len += (size_t)n;
            return;
        }
        size_t cap = m->cap ? m->cap * 2 : 16384;
        while (cap - m->len <= (size_t)n)
            cap *= 2;
        char *p = realloc(m->buf, cap);
        if (!p) {
            m->err = deras_fail(DERAS_ENOMEM, "metrics: out of memory for %zu bytes", cap);
            return;
        }
        m->buf = p;
        m->cap = cap;
    }
}

static void head(metrics_t *m, const char *name, const char *type, const char *help)
{
    put(m, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A metric with one unlabelled sample: its HELP and TYPE lines, then the value. */
static void one(metrics_t *m, const char *name, const char *type, const char *help,
                unsigned long long v)
{
    head(m, name, type, help);
    put(m, "%s %llu\n", name, v);
}

/* A label value with \, " and newline escaped (at most 64 bytes in, 128 out). */
static const char *label(const char *v, char *out, size_t cap)
{
    size_t j = 0;
    for (size_t i = 0; v[i] && j + 3 < cap; i++) {
        char c = v[i];
        if (c == '\\' || c == '"' || c == '\n') {
            out[j++] = '\\';
            c = c == '\n' ? 'n' : c;
        }
        out[j++] = c;
    }
    out[j] = '\0';
    return out;
}

static void render_hist(metrics_t *m, const hist *h)
{
    head(m, h->name, "histogram", h->help);
    uint64_t acc = 0;
    for (int i = 0; i < h->n_le; i++) {
        acc += h->counts[i];
        put(m, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->le[i], (unsigned long long)acc);
    }
    acc += h->counts[h->n_le];
    put(m, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", h->name,
        (unsigned long long)acc, h->name, h->sum, h->name, (unsigned long long)h->count);
}

typedef enum { WV_REQUESTS, WV_RUNNING, WV_WAITING, WV_KV, WV_TPS, WV_PREEMPT, WV_PQUERY,
               WV_PHIT, WV_SERVED, WV_N } worker_value;

static const struct {
    const char *name, *type, *help;
} worker_series[WV_N] = {
    {"deras_worker_requests_running", "gauge",
     "Requests the router has dispatched to the worker and not yet ended."},
    {"deras_worker_sequences_running", "gauge",
     "Sequences the worker's scheduler is running (its last report)."},
    {"deras_worker_sequences_waiting", "gauge",
     "Sequences waiting in the worker's scheduler (its last report)."},
    {"deras_kv_cache_usage_ratio", "gauge",
     "Fraction of the worker's KV cache blocks in use (its last report)."},
    {"deras_worker_generation_tokens_per_second", "gauge",
     "Tokens the worker generated per second, averaged over about 10 s."},
    {"deras_preemptions_total", "counter",
     "Sequences the worker's scheduler preempted (KV cache full), since it started."},
    {"deras_prefix_cache_queries_total", "counter",
     "Prompt tokens looked up in the worker's prefix cache, since it started."},
    {"deras_prefix_cache_hits_total", "counter",
     "Prompt tokens found in the worker's prefix cache, since it started."},
    {"deras_worker_requests_dispatched_total", "counter",
     "Requests the router dispatched to the worker since it registered."},
};

static void render_worker_value(metrics_t *m, const worker_t *k, worker_value v, const char *name)
{
    const wp_load *l = &k->load;
    const char *series = worker_series[v].name;
    switch (v) {
    case WV_REQUESTS: put(m, "%s{worker=\"%s\"} %d\n", series, name, k->inflight_reqs); break;
    case WV_RUNNING: put(m, "%s{worker=\"%s\"} %d\n", series, name, l->running); break;
    case WV_WAITING: put(m, "%s{worker=\"%s\"} %d\n", series, name, l->waiting); break;
    case WV_KV:
        put(m, "%s{worker=\"%s\"} %.6g\n", series, name,
            l->kv_blocks_total > 0
                ? 1.0 - (double)l->kv_blocks_free / (double)l->kv_blocks_total
                : 0.0);
        break;
    case WV_TPS: put(m, "%s{worker=\"%s\"} %.6g\n", series, name, l->tokens_per_s); break;
    case WV_PREEMPT:
        put(m, "%s{worker=\"%s\"} %llu\n", series, name, (unsigned long long)l->preemptions);
        break;
    case WV_PQUERY:
        put(m, "%s{worker=\"%s\"} %llu\n", series, name,
            (unsigned long long)l->prefix_query_tokens);
        break;
    case WV_PHIT:
        put(m, "%s{worker=\"%s\"} %llu\n", series, name,
            (unsigned long long)l->prefix_hit_tokens);
        break;
    case WV_SERVED:
        put(m, "%s{worker=\"%s\"} %llu\n", series, name, (unsigned long long)k->served);
        break;
    case WV_N: break;
    }
}

static void render_workers(metrics_t *m, workers_t *w)
{
    static const char *const state_names[] = {"starting", "ready", "draining", "stuck", "dead"};
    int counts[W_DEAD + 1];
    workers_count(w, counts);
    head(m, "deras_workers", "gauge",
         "Workers known to the router, by state (drained ones count as draining).");
    for (int s = W_STARTING; s <= W_DEAD; s++)
        put(m, "deras_workers{state=\"%s\"} %d\n", state_names[s - W_STARTING], counts[s]);
    int running = 0;
    for (int i = 0; i < WORKERS_MAX; i++) {
        const worker_t *k = workers_at(w, i);
        if (workers_live(k))
            running += k->inflight_reqs;
    }
    one(m, "deras_requests_running", "gauge",
        "Requests dispatched to workers and not yet ended.",
        (unsigned long long)running);

    /* per live worker: one family at a time, as the format wants them grouped */
    char name[2 * WPROTO_MAX_NAME + 2];
    for (int v = 0; v < WV_N; v++) {
        head(m, worker_series[v].name, worker_series[v].type, worker_series[v].help);
        for (int i = 0; i < WORKERS_MAX; i++) {
            const worker_t *k = workers_at(w, i);
            if (workers_live(k))
                render_worker_value(m, k, (worker_value)v, label(k->name, name, sizeof name));
        }
    }
    /* the speculation counters of the workers' loads, labelled by proposer */
    for (int c = 0; c < SPEC_N_COUNTERS; c++) {
        const spec_counter_info *ci = &spec_counter_table[c];
        head(m, ci->metric, "counter", ci->help);
        for (int i = 0; i < WORKERS_MAX; i++) {
            const worker_t *k = workers_at(w, i);
            if (workers_live(k))
                put(m, "%s{worker=\"%s\",proposer=\"%s\"} %llu\n", ci->metric,
                    label(k->name, name, sizeof name), workers_spec_name(k),
                    (unsigned long long)spec_counter_get(&k->load.spec, c));
        }
    }
}

/* vLLM's gauges over every live worker (the model-server protocol gateways read). */
static void render_vllm(metrics_t *m, workers_t *w, const metrics_router *r)
{
    int waiting = r->requests_waiting, running = 0, block_size = 0;
    long long free_blocks = 0, total = 0;
    for (int i = 0; i < WORKERS_MAX; i++) {
        const worker_t *k = workers_at(w, i);
        if (!workers_live(k))
            continue;
        waiting += k->load.waiting;
        running += k->load.running;
        free_blocks += k->load.kv_blocks_free;
        total += k->load.kv_blocks_total;
        if (!block_size)
            block_size = k->hello.block_size;
    }
    char model[2 * 256 + 2];
    label(r->model_name ? r->model_name : "", model, sizeof model);
    head(m, "vllm:num_requests_waiting", "gauge",
         "Requests waiting: in the router's queue and in the workers' schedulers (vLLM's name).");
    put(m, "vllm:num_requests_waiting{model_name=\"%s\"} %d\n", model, waiting);
    head(m, "vllm:num_requests_running", "gauge",
         "Sequences the workers are running (vLLM's name).");
    put(m, "vllm:num_requests_running{model_name=\"%s\"} %d\n", model, running);
    head(m, "vllm:kv_cache_usage_perc", "gauge",
         "Fraction (0..1) of the live workers' KV cache blocks in use (vLLM's name).");
    put(m, "vllm:kv_cache_usage_perc{model_name=\"%s\"} %.6g\n", model,
        total > 0 ? 1.0 - (double)free_blocks / (double)total : 0.0);
    head(m, "vllm:cache_config_info", "gauge",
         "The KV cache's configuration as labels: tokens per block, blocks of all live workers.");
    put(m, "vllm:cache_config_info{model_name=\"%s\",block_size=\"%d\",num_gpu_blocks=\"%lld\"} 1\n",
        model, block_size, total);
}

int metrics_render(metrics_t *m, workers_t *w, const metrics_router *r, const char **text,
                   size_t *len)
{
    if (!m || !w || !r || !text || !len)
        return deras_fail(DERAS_EINVAL, "metrics_render: NULL argument");
    m->len = 0;
    m->err = DERAS_OK;
    if (m->cap)
        m->buf[0] = '\0';

    head(m, "deras_router_start_time_seconds", "gauge",
         "When the router started, in seconds since the Unix epoch.");
    put(m, "deras_router_start_time_seconds %.3f\n", r->start_time_s);
    one(m, "deras_router_ready", "gauge",
        "1 while at least one worker is ready, else 0.",
        workers_ready(w) > 0);
    one(m, "deras_requests_received_total", "counter", "Request frames the router decoded.",
        (unsigned long long)r->requests_received);
    head(m, "deras_requests_total", "counter",
         "Requests ended, by finish reason: one per sample final (stop, length, abort), one per "
         "request ended with an error reply (error).");
    for (int f = 0; f < FINISH_N; f++)
        put(m, "deras_requests_total{finish_reason=\"%s\"} %llu\n",
            finish_reason_name((finish_reason)f),
            (unsigned long long)m->finished[f]);
    head(m, "deras_errors_total", "counter",
         "Error replies by code, to any client frame (requests and frames that failed "
         "decoding).");
    for (int c = PE_NONE + 1; c < PE_N_CODES; c++)
        put(m, "deras_errors_total{code=\"%s\"} %llu\n", proto_error_name((enum proto_error_code)c),
            (unsigned long long)(r->errors ? r->errors[c] : 0));
    one(m, "deras_requests_waiting", "gauge",
        "Requests admitted and waiting in the router's queue for a worker.",
        (unsigned long long)r->requests_waiting);
    one(m, "deras_prompt_tokens_total", "counter",
        "Prompt tokens of requests that ended with finals (once per request).",
        (unsigned long long)m->prompt_tokens);
    one(m, "deras_generation_tokens_total", "counter",
        "Tokens generated, as reported in the finals' usage (completion_tokens).",
        (unsigned long long)m->generation_tokens);
    one(m, "deras_requests_redispatched_total", "counter",
        "Requests sent to another worker after theirs died or got stuck.",
        (unsigned long long)r->redispatched);
    one(m, "deras_worker_deaths_total", "counter",
        "Workers declared dead (silent for --worker-timeout-ms, or restarted).",
        (unsigned long long)r->worker_deaths);
    one(m, "deras_worker_stuck_total", "counter",
        "Workers declared stuck (no step completed for --stuck-timeout-ms while busy).",
        (unsigned long long)r->worker_stuck);
    render_workers(m, w);
    render_vllm(m, w, r);
    render_hist(m, &m->ttft);
    render_hist(m, &m->tpot);
    render_hist(m, &m->e2e);
    render_hist(m, &m->queue);
    if (m->err)
        return m->err;
    *text = m->buf;
    *len = m->len;
    return DERAS_OK;
}
