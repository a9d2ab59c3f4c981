/* SPDX-License-Identifier: Apache-2.0 */
/* test_router_metrics.c - the router's metrics (router/metrics.c) rendered as Prometheus
 * text, read back line by line.
 *
 * Pinned down: every family has HELP and TYPE lines before its samples; request ends are
 * counted by finish reason (samples for finals, requests for errors) and tokens as given;
 * histograms are cumulative, end with +Inf = _count, and their _sum is the sum observed;
 * a value on a bucket bound falls in that bucket (le is "less or equal"); per-worker
 * series appear for live workers only, with their names escaped; KV usage is a ratio;
 * a warm render allocates nothing new (the buffer is reused).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "router/metrics.h"
#include "router/workers.h"

#define VOCAB 1005

static metrics_t *m;
static workers_t *reg;
static uint64_t errors[PE_N_CODES];
static const char *text;
static size_t len;

static int setup(void **state)
{
    (void)state;
    assert_int_equal(metrics_new(&m), DERAS_OK);
    assert_int_equal(workers_new(VOCAB, "/models/tiny-chat", 3000, 10000, &reg), DERAS_OK);
    memset(errors, 0, sizeof errors);
    assert_non_null(m);
    assert_non_null(reg);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    metrics_destroy(&m);
    workers_destroy(&reg);
    return 0;
}

static void render(void)
{
    metrics_router r = {.requests_waiting = 3, .requests_received = 42, .errors = errors,
                        .redispatched = 5, .worker_deaths = 1, .worker_stuck = 2,
                        .start_time_s = 1700000000.25, .model_name = "tiny-chat"};
    int rc = metrics_render(m, reg, &r, &text, &len);
    if (rc)
        fail_msg("metrics_render: expected DERAS_OK, got %d (%s)", rc, deras_errmsg());
}

/* The value of the sample line "series value" (series with its labels, exact), or NAN. */
static double value_of(const char *series)
{
    size_t n = strlen(series);
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            fail_msg("the text does not end with a newline");
        if ((size_t)(eol - p) > n && !memcmp(p, series, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = eol + 1;
    }
    return NAN;
}

static void expect_series(const char *series, double want)
{
    double got = value_of(series);
    if (isnan(got))
        fail_msg("%s: expected %g, got no such line", series, want);
    if (fabs(got - want) > 1e-9 * (fabs(want) + 1))
        fail_msg("%s: expected %g, got %g", series, want, got);
}

static bool has_line(const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; p && p < text + len;) {
        if ((size_t)(text + len - p) >= n && !memcmp(p, line, n) && (p[n] == '\n'))
            return true;
        const char *eol = memchr(p, '\n', (size_t)(text + len - p));
        p = eol ? eol + 1 : NULL;
    }
    return false;
}

static worker_t *add_worker(const char *name, int kv_total, int kv_free)
{
    wp_hello h = {0};
    snprintf(h.name, sizeof h.name, "%s", name);
    snprintf(h.device, sizeof h.device, "cpu");
    snprintf(h.model, sizeof h.model, "tiny-chat");
    h.vocab_size = VOCAB;
    h.max_model_len = 4096;
    h.max_seqs = 4;
    h.kv_blocks_total = kv_total;
    h.block_size = 16;
    h.tp_size = 1;
    h.pid = 7;
    worker_t *k;
    char why[256];
    if (workers_hello(reg, name, (int)strlen(name), &h, -1, 0, &k, why, sizeof why) != HELLO_NEW)
        fail_msg("HELLO from %s refused: %s", name, why);
    wp_load l = {.phase = WP_PHASE_READY, .running = 2, .waiting = 1, .kv_blocks_free = kv_free,
                 .kv_blocks_total = kv_total, .tokens_per_s = 12.5, .preemptions = 4,
                 .prefix_hit_tokens = 30, .prefix_query_tokens = 90};
    workers_load(k, &l, true, 0);
    return k;
}

static void every_family_has_help_and_type_before_its_samples(void **state)
{
    (void)state;
    add_worker("w0", 100, 100);
    render();
    /* walk the text: a sample's family must have been announced by TYPE just before */
    char family[128] = "";
    for (const char *p = text; p < text + len;) {
        const char *eol = memchr(p, '\n', (size_t)(text + len - p));
        assert_non_null(eol);
        if (!strncmp(p, "# HELP ", 7)) {
            const char *t = eol + 1;
            size_t n = strcspn(p + 7, " ");
            snprintf(family, sizeof family, "%.*s", (int)n, p + 7);
            char want[160];
            snprintf(want, sizeof want, "# TYPE %s ", family);
            if (strncmp(t, want, strlen(want)))
                fail_msg("HELP of %s: expected its TYPE line next, got '%.40s'", family, t);
        } else if (*p != '#') {
            if (!family[0] || strncmp(p, family, strlen(family)))
                fail_msg("sample '%.*s' outside its family (last announced: %s)", (int)(eol - p),
                         p, family);
        }
        p = eol + 1;
    }
}

static void request_ends_are_counted_by_finish_reason_and_tokens_as_given(void **state)
{
    (void)state;
    metrics_sample_end(m, FINISH_LENGTH, 7, 0.01, 0.002, 0.05);
    metrics_sample_end(m, FINISH_LENGTH, 5, 0.02, 0.003, 0.06);
    metrics_sample_end(m, FINISH_STOP, 1, 0.03, -1, 0.04);   /* one token: no TPOT */
    metrics_sample_end(m, FINISH_ABORT, 0, -1, -1, 0.5);     /* no token: no TTFT */
    metrics_request_end(m, 11, 0.001);
    metrics_request_end(m, 4, 0.002);
    metrics_request_error(m);
    errors[PE_BUSY] = 3;
    render();
    expect_series("deras_requests_total{finish_reason=\"length\"}", 2);
    expect_series("deras_requests_total{finish_reason=\"stop\"}", 1);
    expect_series("deras_requests_total{finish_reason=\"abort\"}", 1);
    expect_series("deras_requests_total{finish_reason=\"error\"}", 1);
    expect_series("deras_generation_tokens_total", 13);
    expect_series("deras_prompt_tokens_total", 15);
    expect_series("deras_errors_total{code=\"busy\"}", 3);
    expect_series("deras_errors_total{code=\"malformed\"}", 0);
    expect_series("deras_requests_received_total", 42);
    expect_series("deras_requests_waiting", 3);
    expect_series("deras_requests_redispatched_total", 5);
    expect_series("deras_worker_deaths_total", 1);
    expect_series("deras_worker_stuck_total", 2);
    expect_series("deras_time_to_first_token_seconds_count", 3);
    expect_series("deras_time_per_output_token_seconds_count", 2);
    expect_series("deras_e2e_request_latency_seconds_count", 4);
    expect_series("deras_request_queue_time_seconds_count", 2);
    expect_series("deras_e2e_request_latency_seconds_sum", 0.65);
    expect_series("deras_router_start_time_seconds", 1700000000.25);
    expect_series("deras_router_ready", 0); /* no worker */
}

static void histograms_are_cumulative_and_a_bound_belongs_to_its_bucket(void **state)
{
    (void)state;
    metrics_sample_end(m, FINISH_LENGTH, 2, 0.1, 0.1, 0.1);  /* exactly on the 0.1 bounds */
    metrics_sample_end(m, FINISH_LENGTH, 2, 0.2, 0.2, 0.2);
    metrics_sample_end(m, FINISH_LENGTH, 2, 1e6, 1e6, 1e6); /* above every bound */
    render();
    expect_series("deras_time_to_first_token_seconds_bucket{le=\"0.08\"}", 0);
    expect_series("deras_time_to_first_token_seconds_bucket{le=\"0.1\"}", 1);
    expect_series("deras_time_to_first_token_seconds_bucket{le=\"0.25\"}", 2);
    expect_series("deras_time_to_first_token_seconds_bucket{le=\"640\"}", 2);
    expect_series("deras_time_to_first_token_seconds_bucket{le=\"+Inf\"}", 3);
    expect_series("deras_time_to_first_token_seconds_count", 3);
    expect_series("deras_time_to_first_token_seconds_sum", 1e6 + 0.3);
    /* every bucket line of every histogram: never decreasing, ending at the count */
    const char *hists[] = {"deras_time_to_first_token_seconds", "deras_time_per_output_token_seconds",
                           "deras_e2e_request_latency_seconds", "deras_request_queue_time_seconds"};
    for (int h = 0; h < 4; h++) {
        char prefix[96];
        snprintf(prefix, sizeof prefix, "%s_bucket{le=\"", hists[h]);
        double last = 0;
        int n = 0;
        for (const char *p = strstr(text, prefix); p; p = strstr(p + 1, prefix)) {
            double v = strtod(strchr(p, ' ') + 1, NULL);
            if (v < last)
                fail_msg("%s: bucket %d holds %g, below the previous %g", hists[h], n, v, last);
            last = v;
            n++;
        }
        char count[96];
        snprintf(count, sizeof count, "%s_count", hists[h]);
        if (n < 10 || last != value_of(count))
            fail_msg("%s: expected >= 10 buckets ending at the count %g, got %d ending at %g",
                     hists[h], value_of(count), n, last);
    }
}

static void worker_series_cover_live_workers_with_escaped_names(void **state)
{
    (void)state;
    worker_t *a = add_worker("w0", 200, 50);
    add_worker("we\"ird\\name", 100, 100);
    worker_t *dead = add_worker("gone", 10, 10);
    workers_dead(dead, 5);
    a->inflight_reqs = 3;
    render();
    expect_series("deras_kv_cache_usage_ratio{worker=\"w0\"}", 0.75);
    expect_series("deras_kv_cache_usage_ratio{worker=\"we\\\"ird\\\\name\"}", 0);
    expect_series("deras_worker_requests_running{worker=\"w0\"}", 3);
    expect_series("deras_worker_sequences_running{worker=\"w0\"}", 2);
    expect_series("deras_worker_sequences_waiting{worker=\"w0\"}", 1);
    expect_series("deras_preemptions_total{worker=\"w0\"}", 4);
    expect_series("deras_prefix_cache_hits_total{worker=\"w0\"}", 30);
    expect_series("deras_prefix_cache_queries_total{worker=\"w0\"}", 90);
    expect_series("deras_worker_generation_tokens_per_second{worker=\"w0\"}", 12.5);
    expect_series("deras_requests_running", 3);
    expect_series("deras_workers{state=\"ready\"}", 2);
    expect_series("deras_workers{state=\"dead\"}", 1);
    expect_series("deras_router_ready", 1);
    if (!isnan(value_of("deras_kv_cache_usage_ratio{worker=\"gone\"}")))
        fail_msg("a dead worker's series: expected none, got a kv_cache_usage_ratio line");
    assert_true(has_line("# TYPE deras_preemptions_total counter"));
    assert_true(has_line("# TYPE deras_time_to_first_token_seconds histogram"));
}

/* The gauges gateways read, under vLLM's names: over the live workers, the router's queue
 * counted as waiting, the KV usage a fraction of all their blocks. */
static void vllm_gauges_sum_the_live_workers(void **state)
{
    (void)state;
    add_worker("w0", 200, 50);
    add_worker("w1", 100, 100);
    worker_t *dead = add_worker("gone", 10, 10);
    workers_dead(dead, 5);
    render();
    expect_series("vllm:num_requests_waiting{model_name=\"tiny-chat\"}", 3 + 1 + 1);
    expect_series("vllm:num_requests_running{model_name=\"tiny-chat\"}", 2 + 2);
    expect_series("vllm:kv_cache_usage_perc{model_name=\"tiny-chat\"}", 150.0 / 300.0);
    expect_series("vllm:cache_config_info{model_name=\"tiny-chat\",block_size=\"16\","
                  "num_gpu_blocks=\"300\"}", 1);
    assert_true(has_line("# TYPE vllm:kv_cache_usage_perc gauge"));
}

static void speculation_series_carry_the_proposer_label(void **state)
{
    (void)state;
    worker_t *a = add_worker("w0", 100, 100), *b = add_worker("w1", 100, 100);
    add_worker("w2", 100, 100); /* named no proposer */
    snprintf(a->hello.spec, sizeof a->hello.spec, "ngram");
    snprintf(b->hello.spec, sizeof b->hello.spec, "x\"}y"); /* unknown: never a raw label */
    a->load.spec.proposed = 40;
    a->load.spec.accepted = 30;
    a->load.spec.verifications = 12;
    b->load.spec.proposed = 5;
    render();
    expect_series("deras_spec_draft_tokens_total{worker=\"w0\",proposer=\"ngram\"}", 40);
    expect_series("deras_spec_accepted_tokens_total{worker=\"w0\",proposer=\"ngram\"}", 30);
    expect_series("deras_spec_verifications_total{worker=\"w0\",proposer=\"ngram\"}", 12);
    expect_series("deras_spec_draft_tokens_total{worker=\"w1\",proposer=\"other\"}", 5);
    expect_series("deras_spec_draft_tokens_total{worker=\"w2\",proposer=\"none\"}", 0);
    assert_true(has_line("# TYPE deras_spec_accepted_tokens_total counter"));
    if (strstr(text, "x\"}y"))
        fail_msg("the unknown proposer name reached the metrics text");
}

static void a_warm_render_reuses_its_buffer(void **state)
{
    (void)state;
    add_worker("w0", 100, 100);
    render();
    const char *first = text;
    size_t first_len = len;
    metrics_sample_end(m, FINISH_STOP, 3, 0.1, 0.01, 0.2);
    render();
    if (text != first)
        fail_msg("second render: expected the same buffer %p, got %p", (const void *)first,
                 (const void *)text);
    if (len < first_len)
        fail_msg("second render: expected at least %zu bytes, got %zu", first_len, len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(every_family_has_help_and_type_before_its_samples, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(request_ends_are_counted_by_finish_reason_and_tokens_as_given,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(histograms_are_cumulative_and_a_bound_belongs_to_its_bucket,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(worker_series_cover_live_workers_with_escaped_names, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(vllm_gauges_sum_the_live_workers, setup, teardown),
        cmocka_unit_test_setup_teardown(speculation_series_carry_the_proposer_label, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_warm_render_reuses_its_buffer, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
