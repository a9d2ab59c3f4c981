/* SPDX-License-Identifier: Apache-2.0 */
/* bench_batching.c - continuous batching against static batching on one engine.
 *
 *   bench_batching [--model PATH] [--requests 32] [--max-seqs 16] [--max-batch-tokens 256]
 *                  [--prompt 16:256] [--output 8:128] [--rate 0] [--seed 1] [--threads N]
 *
 * One workload (fixed seed: prompt and output lengths uniform in the given ranges, random
 * token ids, EOS ignored so every request generates exactly its output length) runs twice
 * through the same engine code: continuous batching (sequences join and leave at every
 * step) and static batching (the scheduler's baseline mode: a batch runs until its last
 * sequence ends before the next is admitted; finished sequences leave and cost nothing, so
 * this baseline is generous). Requests arrive all at once (--rate 0) or as a Poisson
 * process of the given rate per second.
 *
 * Reported per mode (JSON lines on stdout): wall time, generated tokens/s, requests/s,
 * p50/p99 of request latency (arrival to last token) and of time to first token; then the
 * continuous/static ratios. Progress goes to stderr.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "engine/loader.h"

typedef struct req_state {
    double arrival, first_token, done;
    int n_prompt, n_out;
    int32_t *prompt;
} req_state;

typedef struct run {
    req_state *r;
    int n, n_done;
    double t0;
} run;

static void on_token(void *ctx, uint64_t id, int index, const sample_result *res)
{
    run *x = ctx;
    if (x->r[id].first_token == 0)
        x->r[id].first_token = cli_now() - x->t0;
}

static void on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    run *x = ctx;
    x->r[id].done = cli_now() - x->t0;
    x->n_done++;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)ceil(p / 100.0 * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static int parse_range(const char *opt, const char *s, int *lo, int *hi)
{
    if (sscanf(s, "%d:%d", lo, hi) != 2 || *lo < 1 || *hi < *lo) {
        fprintf(stderr, "%s: expected MIN:MAX with 1 <= MIN <= MAX, got '%s'\n", opt, s);
        return -1;
    }
    return 0;
}

typedef struct result {
    double wall, tok_s, req_s, lat50, lat99, ttft50, ttft99;
} result;

/* One engine over the loader's model (no end-of-generation ids: fixed output lengths). */
static int run_mode(loader_t *l, run *x, bool static_mode, int max_seqs, result *res)
{
    engine_opts eo;
    int rc = loader_engine_opts(l, &eo);
    if (rc)
        return rc;
    eo.max_live_seqs = x->n + max_seqs;
    eo.static_batching = static_mode;
    eo.cb = (engine_callbacks){on_token, on_finish, x};
    engine_t *e = NULL;
    if ((rc = engine_new(loader_model(l), &eo, &e)))
        return rc;
    for (int i = 0; i < x->n; i++)
        x->r[i].first_token = x->r[i].done = 0;
    x->n_done = 0;
    x->t0 = cli_now();
    int next = 0, last_report = -1;
    long total_out = 0;
    while (x->n_done < x->n) {
        double now = cli_now() - x->t0;
        while (next < x->n && x->r[next].arrival <= now) {
            engine_request q = {.id = (uint64_t)next, .prompt = x->r[next].prompt,
                                .n_prompt = x->r[next].n_prompt,
                                .params.max_tokens = x->r[next].n_out,
                                .params.n = 1, .params.ignore_eos = true};
            sampling_params_default(&q.params.sp);
            if ((rc = engine_add(e, &q)))
                goto out;
            total_out += x->r[next].n_out;
            next++;
        }
        if (!engine_has_work(e)) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if ((rc = engine_step(e, NULL)))
            goto out;
        if (x->n_done * 10 / x->n != last_report) {
            last_report = x->n_done * 10 / x->n;
            fprintf(stderr, "  %s: %d/%d requests done\n", static_mode ? "static" : "continuous",
                    x->n_done, x->n);
        }
    }
    double *lat = malloc((size_t)x->n * sizeof(double)), *ttft = malloc((size_t)x->n * sizeof(double));
    double end = 0;
    for (int i = 0; i < x->n; i++) {
        lat[i] = x->r[i].done - x->r[i].arrival;
        ttft[i] = x->r[i].first_token - x->r[i].arrival;
        end = x->r[i].done > end ? x->r[i].done : end;
    }
    res->wall = end;
    res->tok_s = (double)total_out / end;
    res->req_s = x->n / end;
    res->lat50 = pct(lat, x->n, 50);
    res->lat99 = pct(lat, x->n, 99);
    res->ttft50 = pct(ttft, x->n, 50);
    res->ttft99 = pct(ttft, x->n, 99);
    free(lat);
    free(ttft);
out:
    engine_destroy(&e);
    return rc;
}

int main(int argc, char **argv)
{
    char model_path[4096];
    cli_default_model(model_path, sizeof model_path);
    int n_req = 32, max_seqs = 16, max_tokens = 256, threads = 0;
    int p_lo = 16, p_hi = 256, o_lo = 8, o_hi = 128;
    double rate = 0;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        if (!v) {
            fprintf(stderr, "bench_batching: option %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--model"))
            snprintf(model_path, sizeof model_path, "%s", v);
        else if (!strcmp(a, "--requests") && !cli_int(a, v, 1, 100000, &l))
            n_req = (int)l;
        else if (!strcmp(a, "--max-seqs") && !cli_int(a, v, 1, 4096, &l))
            max_seqs = (int)l;
        else if (!strcmp(a, "--max-batch-tokens") && !cli_int(a, v, 1, 1 << 20, &l))
            max_tokens = (int)l;
        else if (!strcmp(a, "--threads") && !cli_int(a, v, 0, 1024, &l))
            threads = (int)l;
        else if (!strcmp(a, "--prompt") && !parse_range(a, v, &p_lo, &p_hi))
            ;
        else if (!strcmp(a, "--output") && !parse_range(a, v, &o_lo, &o_hi))
            ;
        else if (!strcmp(a, "--rate") && !cli_float(a, v, 0, 1e6, &rate))
            ;
        else if (!strcmp(a, "--seed") && !cli_u64(a, v, &seed))
            ;
        else {
            fprintf(stderr, "bench_batching: bad option %s %s\n", a, v);
            return 2;
        }
    }

    const int max_len = p_hi + o_hi;
    int progress_last = -100;
    loader_opts lo = {.model = model_path, .threads = threads, .max_seqs = max_seqs,
                      .max_batch_tokens = max_tokens, .model_only = true,
                      .progress = cli_progress, .progress_ctx = &progress_last};
    loader_t *l = NULL;
    int rc;
    if ((rc = loader_open(&lo, &l)) || (rc = loader_size_seqs(l, max_seqs, max_len)) ||
        (rc = loader_build_model(l)))
        goto fail;
    const model_config *c = loader_config(l);

    run x = {.n = n_req};
    x.r = calloc((size_t)n_req, sizeof *x.r);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    double t = 0;
    for (int i = 0; i < n_req; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x.r[i].n_prompt = p_lo + (int)((s >> 33) % (uint64_t)(p_hi - p_lo + 1));
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x.r[i].n_out = o_lo + (int)((s >> 33) % (uint64_t)(o_hi - o_lo + 1));
        x.r[i].prompt = malloc((size_t)x.r[i].n_prompt * sizeof(int32_t));
        for (int k = 0; k < x.r[i].n_prompt; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x.r[i].prompt[k] = 100 + (int32_t)((s >> 33) % (uint64_t)(c->vocab_size - 100));
        }
        if (rate > 0) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u = ((s >> 11) + 0.5) * 0x1.0p-53;
            t += -log(u) / rate;
        }
        x.r[i].arrival = t;
    }
    printf("{\"bench\":\"batching_workload\",\"requests\":%d,\"max_seqs\":%d,\"max_batch_tokens\":%d,"
           "\"prompt\":[%d,%d],\"output\":[%d,%d],\"rate\":%g,\"seed\":%llu}\n",
           n_req, max_seqs, max_tokens, p_lo, p_hi, o_lo, o_hi, rate, (unsigned long long)seed);
    fflush(stdout);

    result r[2];
    for (int mode = 0; mode < 2; mode++) {
        fprintf(stderr, "running %s batching...\n", mode ? "static" : "continuous");
        if ((rc = run_mode(l, &x, mode == 1, max_seqs, &r[mode])))
            goto fail;
        printf("{\"bench\":\"batching\",\"mode\":\"%s\",\"wall_s\":%.2f,\"tokens_per_s\":%.2f,"
               "\"requests_per_s\":%.3f,\"latency_p50_s\":%.2f,\"latency_p99_s\":%.2f,"
               "\"ttft_p50_s\":%.2f,\"ttft_p99_s\":%.2f}\n",
               mode ? "static" : "continuous", r[mode].wall, r[mode].tok_s, r[mode].req_s,
               r[mode].lat50, r[mode].lat99, r[mode].ttft50, r[mode].ttft99);
        fflush(stdout);
    }
    printf("{\"bench\":\"batching_ratio\",\"throughput_continuous_over_static\":%.3f,"
           "\"latency_p50_static_over_continuous\":%.3f,\"latency_p99_static_over_continuous\":%.3f}\n",
           r[0].tok_s / r[1].tok_s, r[1].lat50 / r[0].lat50, r[1].lat99 / r[0].lat99);
    for (int i = 0; i < n_req; i++)
        free(x.r[i].prompt);
    free(x.r);
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "bench_batching: %s\n", deras_errmsg());
    loader_destroy(&l);
    return rc ? 1 : 0;
}
