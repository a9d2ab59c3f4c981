/* SPDX-License-Identifier: Apache-2.0 */
/* bench_report.c - `deras bench`'s report: percentiles of TTFT, TPOT, inter-token and
 * end-to-end latency over the successful requests, throughput over the run, failures by
 * code, speculation; a table on stderr or one JSON object on stdout, and --samples.
 * Costs: O(requests log requests + tokens log tokens) once, at the end. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/base/status.h"
#include "tools/bench.h"
#include "tools/bench_samples.h"

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

const char *bench_err_name(int e)
{
    return e == ERR_TIMEOUT   ? "timeout"
           : e == ERR_CLIENT  ? "client"
           : e == ERR_FINISH  ? "finish_error"
           : e == ERR_ABORT   ? "aborted"
           : e == ERR_HTTP    ? "http"
                              : proto_error_name(e);
}

static int write_samples(const bench *b, json_t *run)
{
    int n = b->a->n_requests;
    bench_sample *s = calloc((size_t)n, sizeof *s);
    if (!s)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        const req_state *r = &b->r[i];
        s[i] = (bench_sample){.arrival = r->arrival, .send = r->t_send, .first = r->t_first,
                              .last = r->t_last, .end = r->t_end, .output_tokens = r->n_tokens,
                              .prompt_tokens = r->prompt_tokens, .ok = r->state == RS_OK,
                              .error = r->state == RS_FAILED ? bench_err_name(r->err)
                                       : r->state == RS_OK   ? NULL
                                                             : "not_sent"};
    }
    int rc = bench_samples_write(b->a->samples_file, run, s, n);
    free(s);
    return rc;
}

int bench_report(bench *b, double duration)
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
    json_t *o = NULL;
    if (a->json || a->samples_file) {
        json_t *by = json_object();
        for (int e = 0; e < N_ERR; e++)
            if (b->n_err[e])
                json_object_set_new(by, bench_err_name(e), json_integer(b->n_err[e]));
        o = json_pack(
            "{s:s, s:i, s:i, s:i, s:o, s:f, s:f, s:I, s:f, s:I, s:f, s:o, s:o, s:o, s:o,"
            " s:{s:f, s:i, s:[i,i], s:s, s:b, s:s, s:s}, s:{s:I, s:I, s:I, s:I, s:f, s:f}}",
            "address", b->target, "requests", n, "ok", b->n_ok, "failed", b->n_failed,
            "failed_by_code", by, "duration_s", duration, "requests_per_s", req_s,
            "output_tokens", (json_int_t)b->out_tokens, "output_tokens_per_s", out_s,
            "input_tokens", (json_int_t)b->in_tokens, "input_tokens_per_s", in_s,
            "ttft_ms", dist_json(&ttft), "tpot_ms", dist_json(&tpot), "itl_ms", dist_json(&itl),
            "e2e_ms", dist_json(&e2e), "config", "rate", a->rate, "concurrency", a->concurrency,
            "max_tokens", a->tok_lo, a->tok_hi, "prompts",
            a->ids_hi ? "random_ids" : a->prompts_file ? a->prompts_file : "builtin",
            "ignore_eos", (int)a->f.req.params.ignore_eos, "transport",
            a->http ? "http" : "zmq", "endpoint", a->chat ? "chat" : "completions", "speculation", "samples",
            (json_int_t)b->spec_samples, "draft_tokens", (json_int_t)sp->proposed,
            "accepted_tokens", (json_int_t)sp->accepted, "verifications",
            (json_int_t)sp->verifications, "acceptance_rate", acc_rate,
            "mean_accepted_length", acc_len);
        if (!o)
            return deras_fail(DERAS_ENOMEM, "building the JSON report failed");
    }
    if (a->samples_file) {
        int rc = write_samples(b, o);
        if (rc) {
            json_decref(o);
            return rc;
        }
    }
    if (a->json) {
        json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
        fputc('\n', stdout);
        fflush(stdout);
        json_decref(o);
        return DERAS_OK;
    }
    json_decref(o);
    fprintf(stderr, "\n");
    fprintf(stderr, "requests        %d ok, %d failed (of %d)\n", b->n_ok, b->n_failed, n);
    if (b->n_failed) {
        fprintf(stderr, "failed by code ");
        for (int e = 0, first = 1; e < N_ERR; e++)
            if (b->n_err[e]) {
                fprintf(stderr, "%s%s %d", first ? " " : ", ", bench_err_name(e), b->n_err[e]);
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
        fprintf(stderr, "speculation     %s\n", a->http ? "not reported over HTTP" : "none");
    if (b->n_stray)
        fprintf(stderr, "(%d messages for unknown request ids ignored)\n", b->n_stray);
    return DERAS_OK;
}

