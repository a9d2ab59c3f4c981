/* SPDX-License-Identifier: Apache-2.0 */
/* test_sampler.c - logits processors, sampling distributions, seeds and logprobs.
 *
 * Distribution checks draw many samples with a fixed seed and compare the counts with the
 * exact target distribution by a chi-square statistic against the 0.1% critical value of
 * its degrees of freedom: a correct sampler passes with probability 99.9% for a random
 * seed, and for the fixed seeds used here it passes deterministically; a sampler off by a
 * few percent on any token fails. The logit bias and min_tokens are checked the same way
 * and through greedy choices.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/status.h"
#include "test_util.h"
#include "engine/sampler.h"

/* chi-square 0.999 quantiles for df = 1..10 */
static const double chi2_999[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59};

static void expect_distribution(const char *what, const int *counts, const double *p, int n, int draws)
{
    double chi = 0;
    int df = -1;
    for (int i = 0; i < n; i++) {
        if (p[i] == 0) {
            if (counts[i])
                fail_msg("%s: token %d has probability 0 but was drawn %d times", what, i, counts[i]);
            continue;
        }
        double e = p[i] * draws;
        chi += (counts[i] - e) * (counts[i] - e) / e;
        df++;
    }
    assert_true(df >= 1 && df <= 10);
    if (chi > chi2_999[df])
        fail_msg("%s: chi-square %.2f exceeds %.2f (df %d)", what, chi, chi2_999[df], df);
}

static void softmax(const float *l, int n, float t, double *p)
{
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++)
        mx = fmax(mx, l[i] / t);
    for (int i = 0; i < n; i++)
        z += (p[i] = exp(l[i] / t - mx));
    for (int i = 0; i < n; i++)
        p[i] /= z;
}

static void greedy_takes_argmax_and_lowest_id_on_ties(void **state)
{
    (void)state;
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(6, &s), DERAS_OK);
    sampling_params p;
    sampling_params_default(&p);
    sample_result r;
    assert_int_equal(sampler_sample(s, l, &p, NULL, NULL, &r), DERAS_OK);
    assert_int_equal(r.token, 1);
    sampler_destroy(&s);
    assert_null(s);
}

static void temperature_sampling_follows_softmax(void **state)
{
    (void)state;
    float l[5] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f};
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(5, &s), DERAS_OK);
    sampling_params p;
    sampling_params_default(&p);
    p.temperature = 0.7f;
    sampler_rng rng;
    sampler_rng_seed(&rng, 1234);
    int counts[5] = {0}, draws = 200000;
    sample_result r;
    for (int i = 0; i < draws; i++) {
        assert_int_equal(sampler_sample(s, l, &p, &rng, NULL, &r), DERAS_OK);
        counts[r.token]++;
    }
    double want[5];
    softmax(l, 5, 0.7f, want);
    expect_distribution("temperature 0.7", counts, want, 5, draws);
    sampler_destroy(&s);
}

static void top_k_top_p_min_p_restrict_and_renormalise(void **state)
{
    (void)state;
    /* probabilities at T=1: 0.5, 0.3, 0.15, 0.05 (logits = log p) */
    float l[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(4, &s), DERAS_OK);
    sampler_rng rng;
    sampler_rng_seed(&rng, 99);
    sample_result r;
    const int draws = 100000;
    struct {
        const char *name;
        int top_k;
        float top_p, min_p;
        double want[4];
    } cases[] = {
        {"top_k 2", 2, 1.0f, 0, {0.625, 0.375, 0, 0}},
        {"top_p 0.75 keeps the two whose mass first reaches it", 0, 0.75f, 0, {0.625, 0.375, 0, 0}},
        {"top_p 0.85 keeps three", 0, 0.85f, 0, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {"min_p 0.2 drops p < 0.1", 0, 1.0f, 0.2f, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
        {"top_k 3 then top_p 0.6", 3, 0.6f, 0, {0.625, 0.375, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sampling_params p;
        sampling_params_default(&p);
        p.temperature = 1.0f;
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        int counts[4] = {0};
        for (int i = 0; i < draws; i++) {
            sampler_sample(s, l, &p, &rng, NULL, &r);
            counts[r.token]++;
        }
        expect_distribution(cases[c].name, counts, cases[c].want, 4, draws);
    }
    sampler_destroy(&s);
}

static void top_p_over_a_flat_large_vocabulary_widens_past_first_slice(void **state)
{
    (void)state;
    /* 5000 tokens: token i has logit -i * 1e-4, so the top 90% needs ~4,500 tokens, well
     * beyond the first 1,024 ranked. Every draw must lie in the exact nucleus. */
    const int V = 5000;
    float *l = malloc(V * sizeof(float));
    double *p = malloc(V * sizeof(double));
    for (int i = 0; i < V; i++)
        l[i] = -1e-4f * (float)i;
    softmax(l, V, 1.0f, p);
    int nucleus = 0;
    for (double acc = 0; nucleus < V && acc < 0.9; nucleus++)
        acc += p[nucleus];
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(V, &s), DERAS_OK);
    sampling_params sp;
    sampling_params_default(&sp);
    sp.temperature = 1.0f;
    sp.top_p = 0.9f;
    sampler_rng rng;
    sampler_rng_seed(&rng, 7);
    sample_result r;
    int max_seen = 0;
    for (int i = 0; i < 4000; i++) {
        sampler_sample(s, l, &sp, &rng, NULL, &r);
        if (r.token >= nucleus)
            fail_msg("drew token %d outside the nucleus of %d tokens", r.token, nucleus);
        max_seen = r.token > max_seen ? r.token : max_seen;
    }
    assert_true(max_seen > 2048); /* the draw really covered the widened set */
    free(l), free(p);
    sampler_destroy(&s);
}

static void same_seed_same_tokens_different_seed_differs(void **state)
{
    (void)state;
    const int V = 300;
    float l[300];
    uint64_t seed = 5;
    test_fill_random(l, V, &seed, 3.0f);
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(V, &s), DERAS_OK);
    sampling_params p;
    sampling_params_default(&p);
    p.temperature = 1.0f;
    int32_t a[64], b[64], c[64];
    sampler_rng r1, r2, r3;
    sampler_rng_seed(&r1, 42);
    sampler_rng_seed(&r2, 42);
    sampler_rng_seed(&r3, 43);
    sample_result r;
    for (int i = 0; i < 64; i++) {
        sampler_sample(s, l, &p, &r1, NULL, &r), a[i] = r.token;
        sampler_sample(s, l, &p, &r2, NULL, &r), b[i] = r.token;
        sampler_sample(s, l, &p, &r3, NULL, &r), c[i] = r.token;
    }
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    sampler_destroy(&s);
}

static void penalties_change_logits_as_specified(void **state)
{
    (void)state;
    /* token 0 leads; penalties must make token 1 win exactly when expected */
    float l[3] = {2.0f, 1.5f, -1.0f};
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(3, &s), DERAS_OK);
    sampling_params p;
    sampling_params_default(&p);
    sample_result r;
    int32_t prompt[1] = {0}, out_ids[3] = {0, 0, 2};
    sample_history h = {prompt, 1, NULL, 0, NULL, 0, NULL};
    p.repetition_penalty = 1.2f; /* 2.0 / 1.2 = 1.67 > 1.5: token 0 still wins */
    sampler_sample(s, l, &p, NULL, &h, &r);
    assert_int_equal(r.token, 0);
    p.repetition_penalty = 1.4f; /* 2.0 / 1.4 = 1.43 < 1.5 */
    sampler_sample(s, l, &p, NULL, &h, &r);
    assert_int_equal(r.token, 1);
    /* presence applies to output tokens only: the prompt's token 0 is unaffected */
    sampling_params_default(&p);
    p.presence_penalty = 1.0f;
    sampler_sample(s, l, &p, NULL, &h, &r);
    assert_int_equal(r.token, 0);
    /* frequency 0.3 x count 2 = 0.6 > 0.5 margin */
    h = (sample_history){prompt, 1, out_ids, 3, NULL, 0, NULL};
    sampling_params_default(&p);
    p.frequency_penalty = 0.2f; /* 0.4 < 0.5 */
    sampler_sample(s, l, &p, NULL, &h, &r);
    assert_int_equal(r.token, 0);
    p.frequency_penalty = 0.3f;
    sampler_sample(s, l, &p, NULL, &h, &r);
    assert_int_equal(r.token, 1);
    /* negative logits are multiplied: token 2 at -1.0 with penalty 2 -> -2.0 */
    float l2[3] = {-1.0f, -1.5f, -3.0f};
    int32_t prompt2[1] = {0};
    h = (sample_history){prompt2, 1, NULL, 0, NULL, 0, NULL};
    sampling_params_default(&p);
    p.repetition_penalty = 2.0f;
    sampler_sample(s, l2, &p, NULL, &h, &r);
    assert_int_equal(r.token, 1);
    /* and the scratch is clean afterwards: no penalty -> token 0 again */
    sampling_params_default(&p);
    sampler_sample(s, l2, &p, NULL, NULL, &r);
    assert_int_equal(r.token, 0);
    sampler_destroy(&s);
}

static void logprobs_are_raw_log_softmax_with_sorted_top_n(void **state)
{
    (void)state;
    float l[6] = {0.1f, 3.0f, 3.0f, -2.0f, 1.0f, 2.5f};
    double p[6];
    softmax(l, 6, 1.0f, p);
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(6, &s), DERAS_OK);
    sampling_params sp;
    sampling_params_default(&sp);
    sp.n_logprobs = 4;
    sp.repetition_penalty = 3.0f; /* processors must not change reported logprobs */
    int32_t prompt[1] = {1};
    sample_history h = {prompt, 1, NULL, 0, NULL, 0, NULL};
    sample_result r;
    sampler_sample(s, l, &sp, NULL, &h, &r);
    assert_int_equal(r.token, 2); /* 1 penalised to 1.0 */
    assert_true(fabs(r.logprob - log(p[2])) < 1e-5);
    assert_int_equal(r.n_top, 4);
    const int32_t want[4] = {1, 2, 5, 4};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r.top_ids[i], want[i]);
        assert_true(fabs(r.top_logprobs[i] - log(p[want[i]])) < 1e-5);
    }
    sampler_destroy(&s);
}

static void validate_rejects_out_of_range_and_non_finite(void **state)
{
    (void)state;
    sampling_params p;
    sampling_params_default(&p);
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_OK);
    p.temperature = NAN;
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "temperature"));
    sampling_params_default(&p);
    p.top_p = 0;
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_ERANGE);
    sampling_params_default(&p);
    p.top_k = 101;
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_ERANGE);
    sampling_params_default(&p);
    p.presence_penalty = INFINITY;
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_ERANGE);
    sampling_params_default(&p);
    p.n_logprobs = 21;
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_ERANGE);
    sampling_params_default(&p);
    p.repetition_penalty = 0;
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_ERANGE);
}

/* Degenerate but valid numbers never make a silent token (issue 14): a temperature too
 * small to divide by is greedy, on fresh random logits (with and without repetition
 * penalty, through sampler_sample and sampler_probs' refusal); the smallest allowed
 * repetition penalty keeps every logit finite; NaN or +inf logits and a row where every
 * token is masked are errors, -inf alone is a masked token. */
static void degenerate_values_are_greedy_or_errors(void **state)
{
    (void)state;
    enum { V = 257 };
    float l[V], big[V];
    uint64_t seed = 0x5eedf00dull ^ (uint64_t)time(NULL);
    print_message("degenerate values: seed %llu\n", (unsigned long long)seed);
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(V, &s), DERAS_OK);
    sampling_params p, g;
    sample_result r, rg;
    sampler_rng rng;
    sampler_rng_seed(&rng, 7);
    int32_t prompt[5] = {3, 9, 27, 81, 243};
    sample_history h = {.prompt = prompt, .n_prompt = 5};
    float probs[V];
    const float tiny[] = {1e-38f, 1e-30f, 1e-6f, 9.99e-6f};
    for (int round = 0; round < 40; round++) {
        test_fill_random(l, V, &seed, 8.0f);
        for (int t = 0; t < 4; t++) {
            sampling_params_default(&p);
            p.temperature = tiny[t];
            p.repetition_penalty = round % 2 ? 0.01f : 1.0f;
            p.n_logprobs = 3;
            assert_int_equal(sampling_params_validate(&p, V), DERAS_OK);
            assert_true(sampling_is_greedy(&p));
            g = p;
            g.temperature = 0.0f;
            assert_int_equal(sampler_sample(s, l, &p, &rng, &h, &r), DERAS_OK);
            assert_int_equal(sampler_sample(s, l, &g, NULL, &h, &rg), DERAS_OK);
            assert_int_equal(r.token, rg.token);
            assert_true(isfinite(r.logprob));
            assert_int_equal(sampler_probs(s, l, &p, &h, probs), DERAS_EINVAL);
        }
    }
    sampling_params_default(&p);
    p.temperature = SAMPLING_GREEDY_BELOW; /* the threshold itself samples */
    assert_false(sampling_is_greedy(&p));
    assert_int_equal(sampler_probs(s, l, &p, NULL, probs), DERAS_OK);
    double sum = 0;
    for (int i = 0; i < V; i++) {
        assert_true(isfinite(probs[i]));
        sum += probs[i];
    }
    assert_true(fabs(sum - 1.0) < 1e-5);

    sampling_params_default(&p);
    p.repetition_penalty = 1e-45f;
    assert_int_equal(sampling_params_validate(&p, V), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "repetition_penalty"));
    p.repetition_penalty = 0.01f;
    assert_int_equal(sampling_params_validate(&p, V), DERAS_OK);

    /* logits so large that logit / temperature overflows: an error, not a token */
    for (int i = 0; i < V; i++)
        big[i] = 1e35f * (float)(i % 7);
    sampling_params_default(&p);
    p.temperature = 1e-4f;
    assert_int_equal(sampler_sample(s, big, &p, &rng, NULL, &r), DERAS_ERANGE);
    p.temperature = 0.0f; /* greedy needs no division */
    assert_int_equal(sampler_sample(s, big, &p, NULL, NULL, &r), DERAS_OK);
    assert_int_equal(r.token, 6);

    for (int t = 0; t < 2; t++) {
        sampling_params_default(&p);
        p.temperature = t ? 0.8f : 0.0f;
        test_fill_random(l, V, &seed, 4.0f);
        l[100] = -INFINITY; /* masked: fine */
        assert_int_equal(sampler_sample(s, l, &p, &rng, NULL, &r), DERAS_OK);
        assert_int_not_equal(r.token, 100);
        l[200] = NAN;
        assert_int_equal(sampler_sample(s, l, &p, &rng, NULL, &r), DERAS_EBACKEND);
        assert_non_null(strstr(deras_errmsg(), "NaN"));
        l[200] = INFINITY;
        assert_int_equal(sampler_sample(s, l, &p, &rng, NULL, &r), DERAS_EBACKEND);
        for (int i = 0; i < V; i++)
            l[i] = -INFINITY;
        assert_int_equal(sampler_sample(s, l, &p, &rng, NULL, &r), DERAS_ERANGE);
        assert_non_null(strstr(deras_errmsg(), "excluded"));
    }
    sampler_destroy(&s);
}

/* The logit bias is added to the raw logits before every other processor: it moves greedy
 * and sampled choices exactly as the shifted logits say, -100 in effect bans a token, and
 * the reported logprobs stay the model's. */
static void logit_bias_shifts_logits_before_the_processors(void **state)
{
    (void)state;
    float l[4] = {2.0f, 1.0f, 0.0f, -1.0f};
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(4, &s), DERAS_OK);
    sampling_params p;
    sampling_params_default(&p);
    p.n_logprobs = 2;
    sample_result r;
    assert_int_equal(logit_bias_add(&p.logit_bias, 2, 2.5f), DERAS_OK); /* 0 + 2.5 > 2 */
    sampler_sample(s, l, &p, NULL, NULL, &r);
    assert_int_equal(r.token, 2);
    assert_true(fabs(r.logprob - (0.0 - log(exp(2.0) + exp(1.0) + 1.0 + exp(-1.0)))) < 1e-5);
    assert_int_equal(r.top_ids[0], 0); /* logprobs of the raw distribution */
    assert_int_equal(sampler_greedy(s, l, &p, NULL), 2);
    /* before the repetition penalty: 2 + 2.5 = 4.5 / 3 = 1.5 loses to token 0's 2.0 */
    int32_t prompt[1] = {2};
    sample_history h = {prompt, 1, NULL, 0, NULL, 0, NULL};
    p.repetition_penalty = 3.0f;
    sampler_sample(s, l, &p, NULL, &h, &r);
    assert_int_equal(r.token, 0);
    /* sampling follows the biased softmax: token 0 banned, token 3 raised by 3 */
    sampling_params_default(&p);
    p.temperature = 1.0f;
    assert_int_equal(logit_bias_add(&p.logit_bias, 0, -100.0f), DERAS_OK);
    assert_int_equal(logit_bias_add(&p.logit_bias, 3, 3.0f), DERAS_OK);
    float biased[4] = {2.0f - 100.0f, 1.0f, 0.0f, 2.0f};
    double want[4];
    softmax(biased, 4, 1.0f, want);
    want[0] = 0; /* exp(-98 - 2): never drawn in 40,000 draws */
    sampler_rng rng;
    sampler_rng_seed(&rng, 17);
    int counts[4] = {0};
    for (int i = 0; i < 40000; i++) {
        sampler_sample(s, l, &p, &rng, NULL, &r);
        counts[r.token]++;
    }
    expect_distribution("logit_bias", counts, want, 4, 40000);
    sampler_destroy(&s);
}

/* min_tokens: while the output is shorter, the stop tokens the history names are out of
 * reach, greedy or sampled, whatever their logits and biases; from then on they are back. */
static void min_tokens_holds_stop_tokens_back(void **state)
{
    (void)state;
    float l[4] = {5.0f, 1.0f, 0.5f, 4.0f};
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(4, &s), DERAS_OK);
    sampling_params p;
    sampling_params_default(&p);
    p.min_tokens = 2;
    int32_t stops[2] = {0, 3}, out[2] = {1, 1};
    sample_history h = {NULL, 0, out, 0, stops, 2, NULL};
    sample_result r;
    for (int n = 0; n < 2; n++) {
        h.n_output = n;
        sampler_sample(s, l, &p, NULL, &h, &r);
        assert_int_equal(r.token, 1);
        assert_int_equal(sampler_greedy(s, l, &p, &h), 1);
    }
    h.n_output = 2;
    sampler_sample(s, l, &p, NULL, &h, &r);
    assert_int_equal(r.token, 0);
    /* sampled, with a bias pushing a stop token up: still never drawn */
    h.n_output = 1;
    p.temperature = 1.0f;
    assert_int_equal(logit_bias_add(&p.logit_bias, 3, 100.0f), DERAS_OK);
    float probs[4];
    assert_int_equal(sampler_probs(s, l, &p, &h, probs), DERAS_OK);
    assert_true(probs[0] == 0.0f && probs[3] == 0.0f);
    assert_true(fabsf(probs[1] + probs[2] - 1.0f) < 1e-6f);
    sampler_rng rng;
    sampler_rng_seed(&rng, 3);
    for (int i = 0; i < 2000; i++) {
        sampler_sample(s, l, &p, &rng, &h, &r);
        assert_true(r.token == 1 || r.token == 2);
    }
    /* no history, or no stops named: min_tokens cannot hold anything back */
    sampler_sample(s, l, &p, &rng, NULL, &r);
    assert_int_equal(r.token, 3);
    sampler_destroy(&s);
}

/* A grammar's mask (sample_history.allow): with every processor, greedy or not, only
 * allowed tokens are drawn, and at temperature 1 the draws follow the softmax renormalised
 * over the allowed tokens; logprobs stay the raw distribution's. */
static void grammar_mask_restricts_every_processor(void **state)
{
    (void)state;
    enum { V = 67 };
    sampler_t *s = NULL;
    assert_int_equal(sampler_new(V, &s), DERAS_OK);
    float logits[V];
    uint64_t rng_state = 0x5eed1234;
    for (int i = 0; i < V; i++)
        logits[i] = (float)(test_rng_next(&rng_state) % 2000) / 250.0f - 4.0f;
    uint32_t allow[(V + 31) / 32] = {0};
    int32_t best_allowed = -1;
    for (int i = 0; i < V; i++)
        if (i % 3 == 1 || i == 64) { /* a third of the words' bits, and the last word */
            allow[i >> 5] |= 1u << (i & 31);
            if (best_allowed < 0 || logits[i] > logits[best_allowed])
                best_allowed = i;
        }
    int32_t out_ids[3] = {best_allowed, 4, 7};
    sample_history h = {NULL, 0, out_ids, 3, NULL, 0, allow};
    sampling_params p;
    sampling_params_default(&p);
    sample_result r;
    assert_int_equal(sampler_sample(s, logits, &p, NULL, &h, &r), DERAS_OK);
    assert_int_equal(r.token, best_allowed); /* greedy: the best allowed token */
    sample_result raw;
    sampler_logprobs(s, logits, 0, r.token, &raw);
    assert_float_equal(r.logprob, raw.logprob, 1e-6);
    const struct { float t, top_p, min_p, rep, pres, freq; int top_k; } cfg[] = {
        {1.0f, 1, 0, 1, 0, 0, 0}, {0.7f, 0.9f, 0, 1, 0, 0, 0}, {1.3f, 1, 0.05f, 1, 0, 0, 5},
        {1.0f, 0.5f, 0.1f, 1.3f, 0.5f, 0.3f, 3}, {2.0f, 1, 0, 0.8f, -1, 1, 0},
    };
    sampler_rng rng;
    sampler_rng_seed(&rng, 99);
    float probs[V];
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        p.temperature = cfg[c].t;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        p.top_k = cfg[c].top_k;
        p.repetition_penalty = cfg[c].rep;
        p.presence_penalty = cfg[c].pres;
        p.frequency_penalty = cfg[c].freq;
        for (int d = 0; d < 2000; d++) {
            assert_int_equal(sampler_sample(s, logits, &p, &rng, &h, &r), DERAS_OK);
            if (!((allow[r.token >> 5] >> (r.token & 31)) & 1))
                fail_msg("config %zu drew token %d outside the mask", c, r.token);
        }
        assert_int_equal(sampler_probs(s, logits, &p, &h, probs), DERAS_OK);
        for (int i = 0; i < V; i++)
            if (!((allow[i >> 5] >> (i & 31)) & 1))
                assert_true(probs[i] == 0.0f);
    }
    /* temperature 1, nothing else: the softmax over the allowed tokens */
    sampling_params_default(&p);
    p.temperature = 1.0f;
    sample_history plain = {NULL, 0, NULL, 0, NULL, 0, allow};
    int counts[V] = {0};
    enum { DRAWS = 40000 };
    for (int d = 0; d < DRAWS; d++) {
        assert_int_equal(sampler_sample(s, logits, &p, &rng, &plain, &r), DERAS_OK);
        counts[r.token]++;
    }
    double want[V], z = 0;
    for (int i = 0; i < V; i++)
        z += (allow[i >> 5] >> (i & 31)) & 1 ? exp(logits[i]) : 0;
    for (int i = 0; i < V; i++)
        want[i] = (allow[i >> 5] >> (i & 31)) & 1 ? exp(logits[i]) / z : 0;
    /* compared on the ten most likely allowed tokens and the rest pooled (df <= 10) */
    int top[10], n_top = 0;
    for (int k = 0; k < 10; k++) {
        int b = -1;
        for (int i = 0; i < V; i++) {
            bool used = false;
            for (int j = 0; j < n_top; j++)
                used |= top[j] == i;
            if (want[i] > 0 && !used && (b < 0 || want[i] > want[b]))
                b = i;
        }
        top[n_top++] = b;
    }
    int cnt[11] = {0};
    double pw[11] = {0};
    for (int i = 0; i < V; i++) {
        int slot = 10;
        for (int j = 0; j < 10; j++)
            if (top[j] == i)
                slot = j;
        cnt[slot] += counts[i];
        pw[slot] += want[i];
    }
    expect_distribution("masked softmax", cnt, pw, 11, DRAWS);
    /* nothing allowed: an error, never a silent token */
    uint32_t none[(V + 31) / 32] = {0};
    plain.allow = none;
    assert_int_equal(sampler_sample(s, logits, &p, &rng, &plain, &r), DERAS_ERANGE);
    sampler_destroy(&s);
}

static void logit_bias_is_validated(void **state)
{
    (void)state;
    sampling_params p;
    sampling_params_default(&p);
    logit_bias *b = &p.logit_bias;
    assert_int_equal(logit_bias_add(b, 5, 100.0f), DERAS_OK);
    assert_int_equal(logit_bias_add(b, 6, -100.0f), DERAS_OK);
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_OK);
    assert_int_equal(logit_bias_add(b, 5, 1.0f), DERAS_EINVAL); /* twice */
    assert_int_equal(logit_bias_add(b, -1, 1.0f), DERAS_EINVAL);
    assert_int_equal(logit_bias_add(b, 7, 100.5f), DERAS_ERANGE);
    assert_int_equal(logit_bias_add(b, 7, NAN), DERAS_ERANGE);
    assert_int_equal(b->n, 2);
    assert_int_equal(sampling_params_validate(&p, 6), DERAS_ERANGE); /* id 6 >= vocab */
    assert_non_null(strstr(deras_errmsg(), "logit_bias"));
    b->bias[0] = INFINITY;
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_ERANGE);
    b->bias[0] = 1;
    b->ids[1] = 5; /* duplicate written past logit_bias_add */
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_ERANGE);
    sampling_params_default(&p);
    for (int i = 0; i < SAMPLING_MAX_LOGIT_BIAS; i++)
        assert_int_equal(logit_bias_add(b, i, 1.0f), DERAS_OK);
    assert_int_equal(sampling_params_validate(&p, 1000), DERAS_OK);
    assert_int_equal(logit_bias_add(b, SAMPLING_MAX_LOGIT_BIAS, 1.0f), DERAS_ERANGE); /* full */
    sampling_params_default(&p);
    p.min_tokens = -1;
    assert_int_equal(sampling_params_validate(&p, 100), DERAS_ERANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greedy_takes_argmax_and_lowest_id_on_ties),
        cmocka_unit_test(temperature_sampling_follows_softmax),
        cmocka_unit_test(top_k_top_p_min_p_restrict_and_renormalise),
        cmocka_unit_test(top_p_over_a_flat_large_vocabulary_widens_past_first_slice),
        cmocka_unit_test(same_seed_same_tokens_different_seed_differs),
        cmocka_unit_test(penalties_change_logits_as_specified),
        cmocka_unit_test(logprobs_are_raw_log_softmax_with_sorted_top_n),
        cmocka_unit_test(validate_rejects_out_of_range_and_non_finite),
        cmocka_unit_test(logit_bias_shifts_logits_before_the_processors),
        cmocka_unit_test(min_tokens_holds_stop_tokens_back),
        cmocka_unit_test(logit_bias_is_validated),
        cmocka_unit_test(grammar_mask_restricts_every_processor),
        cmocka_unit_test(degenerate_values_are_greedy_or_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
