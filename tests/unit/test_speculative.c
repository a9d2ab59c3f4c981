/* SPDX-License-Identifier: Apache-2.0 */
/* test_speculative.c - speculative decoding never changes the output.
 *
 * 1. The rejection rule on explicit distributions: drafts drawn from q and verified
 *    against p give tokens distributed as p (chi-square, statistic and p-value printed),
 *    and the same test rejects a deliberately wrong rule.
 * 2. Greedy through the engine: every proposer (n-gram, a self-draft of 1 layer, a draft
 *    model that is the target itself) gives the tokens of non-speculative decoding, with
 *    block accounting checked after every step. Matrix products of different row counts
 *    round differently (sgemv vs sgemm), so a token may flip where the target's top two
 *    logprobs are within NEAR_TIE: such divergences are counted and printed, as in
 *    test_engine.
 * 3. Sampling through the engine: seeded requests on a tiny model, the first and second
 *    generated tokens against the exact target distribution computed from the model.
 * 4. A random workload (n > 1, aborts, prefix caching, a small cache that preempts) keeps
 *    the KV accounting exact with drafts rolled back every step.
 *
 * Model: tests/data/engine-llama (2 layers, vocabulary 256); `model` runs the greedy
 * comparison on the test model (50 prompts, each proposer; 10 under AddressSanitizer).
 * The engine rig (model, engine with a proposer, greedy runs, comparison) is spec_rig.c,
 * the chi-square test chi_square.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checkpoint/checkpoint.h"
#include "common/base/status.h"
#include "common/tokenizer/tokenizer.h"
#include "chi_square.h"
#include "engine_workload.h"
#include "spec_rig.h"
#include "test_util.h"
#include "engine/engine.h"
#include "engine/spec_draft.h"
#include "engine/spec_ngram.h"

/* ---- 1. the rule on explicit distributions ---- */

#define V8 8

static void random_dist(uint64_t *rs, float *d, int zero_at)
{
    double sum = 0;
    for (int i = 0; i < V8; i++) {
        d[i] = i == zero_at ? 0.0f : 0.05f + (float)(test_rng_next(rs) % 1000) / 1000.0f;
        sum += d[i];
    }
    for (int i = 0; i < V8; i++)
        d[i] = (float)(d[i] / sum);
}

typedef int32_t (*rule_fn)(const float *p, const float *q, int32_t d, sampler_rng *rng);

static int32_t real_rule(const float *p, const float *q, int32_t d, sampler_rng *rng)
{
    bool acc;
    return spec_accept_or_resample(p, q, V8, d, rng, &acc);
}

/* The classic mistake: on rejection, draw from p itself instead of max(0, p - q). */
static int32_t wrong_rule(const float *p, const float *q, int32_t d, sampler_rng *rng)
{
    double qd = q ? q[d] : 1.0;
    if (sampler_rng_uniform(rng) * qd < p[d])
        return d;
    return spec_draw(p, V8, 1.0, sampler_rng_uniform(rng));
}

/* n trials of "draft from q (or the fixed token d0 when q is NULL), verify against p";
 * returns the chi-square p-value of the outputs against p. */
static double rule_trial(rule_fn rule, const float *p, const float *q, int32_t d0, int n,
                         const char *what)
{
    sampler_rng rng;
    sampler_rng_seed(&rng, 12345);
    uint64_t counts[V8] = {0};
    for (int t = 0; t < n; t++) {
        int32_t d = q ? spec_draw(q, V8, 1.0, sampler_rng_uniform(&rng)) : d0;
        counts[rule(p, q, d, &rng)]++;
    }
    double pd[V8];
    for (int i = 0; i < V8; i++)
        pd[i] = p[i];
    int df;
    double stat = chi_square(counts, pd, V8, (uint64_t)n, &df);
    double pv = gamma_q(df / 2.0, stat / 2.0);
    printf("  %s: %d trials, chi-square %.2f with %d degrees of freedom, p-value %.4g\n", what, n,
           stat, df, pv);
    return pv;
}

static void rejection_rule_gives_the_target_distribution(void **state)
{
    (void)state;
    uint64_t rs = 99;
    float p[V8], q[V8];
    random_dist(&rs, p, 2); /* p(2) = 0: the draft proposes what the target never emits */
    random_dist(&rs, q, 5); /* q(5) = 0: only the residual can produce token 5 */
    double pv = rule_trial(real_rule, p, q, 0, 400000, "draft q vs target p");
    if (pv < 1e-4)
        fail_msg("the rejection rule's outputs are not distributed as p: p-value %.3g, expected "
                 ">= 1e-4", pv);
    pv = rule_trial(real_rule, p, NULL, 6, 400000, "point-mass draft (n-gram) vs target p");
    if (pv < 1e-4)
        fail_msg("point-mass drafts: p-value %.3g, expected >= 1e-4", pv);
}

static void a_wrong_acceptance_rule_fails_the_same_test(void **state)
{
    (void)state;
    uint64_t rs = 99;
    float p[V8], q[V8];
    random_dist(&rs, p, 2);
    random_dist(&rs, q, 5);
    double pv = rule_trial(wrong_rule, p, q, 0, 400000, "WRONG rule (resample from p)");
    if (pv > 1e-6)
        fail_msg("the chi-square test did not catch a wrong rule: p-value %.3g, expected < 1e-6",
                 pv);
}

static void ngram_copies_what_followed_the_latest_match(void **state)
{
    (void)state;
    int32_t t[] = {1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3};
    int32_t d[4];
    /* last 3 tokens (1 2 3) occur at 0 and 5: the latest (5) is followed by 7 8 5 1 */
    int n = spec_ngram_propose(t, 14, 1, 3, 4, d);
    assert_int_equal(n, 4);
    assert_int_equal(d[0], 7);
    assert_int_equal(d[3], 1);
    /* no earlier 42: nothing */
    int32_t u[] = {1, 2, 3, 42};
    assert_int_equal(spec_ngram_propose(u, 4, 1, 3, 4, d), 0);
    /* only a 1-gram matches: 3 at index 1 is followed by 4 5 */
    int32_t v[] = {9, 3, 4, 5, 8, 3};
    n = spec_ngram_propose(v, 6, 1, 3, 8, d);
    assert_int_equal(n, 4);
    assert_int_equal(d[0], 4);
    assert_int_equal(d[3], 3);
    assert_int_equal(spec_ngram_propose(v, 6, 0, 3, 8, d), 0); /* bad range */
}

/* ---- 2. greedy identity ---- */

static uint64_t rng_state;

static int rnd(int lo, int hi)
{
    return lo + (int)(test_rng_next(&rng_state) % (uint64_t)(hi - lo + 1));
}

/* Prompts on a small alphabet with a repeated stretch (something for n-gram lookup),
 * lengths 4..150. */
static void tiny_prompts(prompts *pr, int n, uint64_t seed)
{
    rng_state = seed;
    pr->n = n;
    for (int r = 0; r < n; r++) {
        int len = rnd(4, 100), alpha = rnd(6, 60);
        for (int i = 0; i < len; i++)
            pr->tok[r][i] = 3 + rnd(0, alpha);
        int rep = rnd(0, len / 2); /* quote the start again */
        for (int i = 0; i < rep && len < 150; i++)
            pr->tok[r][len++] = pr->tok[r][i];
        pr->len[r] = len;
    }
}

static void greedy_is_token_identical_for_every_proposer(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 1200, 16, 256, 4);
    prompts *pr = malloc(sizeof *pr);
    tiny_prompts(pr, 60, 0x5bec);
    outputs *ref = malloc(sizeof *ref), *got = malloc(sizeof *got);
    engine_stats st;
    run_greedy(&g, pr, NULL, 48, ref, &st);
    struct {
        const char *what;
        spec_opts so;
        double min_rate;
    } cases[] = {
        {"n-gram (k 4)", proposer(SPEC_NGRAM, 0, NULL, 4), 0.0},
        {"self-draft 1 of 2 layers", proposer(SPEC_SELF, 1, NULL, 4), 0.0},
        {"draft model = the target", proposer(SPEC_DRAFT, 0, g.path, 4), 0.95},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run_greedy(&g, pr, &cases[c].so, 48, got, &st);
        int near = compare(pr, ref, got, cases[c].what);
        report(cases[c].what, &st, pr->n, near);
        if (st.spec.proposed == 0)
            fail_msg("%s proposed no drafts in %d prompts", cases[c].what, pr->n);
        double rate = (double)st.spec.accepted / (double)st.spec.proposed;
        if (rate < cases[c].min_rate)
            fail_msg("%s: acceptance %.3f, expected >= %.2f", cases[c].what, rate,
                     cases[c].min_rate);
        if (near > test_near_tie_budget(pr->n))
            fail_msg("%s: %d near-tie divergences in %d prompts, expected at most %d",
                     cases[c].what, near, pr->n, test_near_tie_budget(pr->n));
    }
    free(pr), free(ref), free(got);
    rig_close(&g);
}

/* ---- 3. sampling: the exact target distribution ---- */

/* Raw next-token logits after tokens[0..n) (the rig's model, blocks 1.. as a scratch). */
static void target_logits(rig *g, const int32_t *tokens, int n, float *logits)
{
    int32_t table[64] = {0}, q_start[2] = {0, n}, ctx[1] = {n}, row[1] = {n - 1};
    for (int i = 0; i < 64; i++)
        table[i] = i + 1;
    model_batch b = {.n_tokens = n, .tokens = tokens, .n_seqs = 1, .q_start = q_start,
                     .ctx_len = ctx, .block_tables = table, .n_logits = 1, .logits_rows = row};
    if (model_forward(g->m, &b, logits))
        fail_msg("forward: %s", deras_errmsg());
}

#define E2E_N 4000
#define E2E_LEN 253
#define E2E_SHORT 24
#define E2E_NGRAM 96

static void sampled_tokens_follow_the_target_distribution(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 1200, 64, 512, 3);
    /* distinct tokens (a suffix of a permutation of 3..255): n-gram lookup matches whenever
     * the first token is one of the prompt's; the self-draft catches up on the whole prompt
     * per request, so it gets a shorter one */
    int32_t prompt_all[E2E_LEN];
    rng_state = 4242;
    for (int i = 0; i < E2E_LEN; i++)
        prompt_all[i] = 3 + i;
    for (int i = E2E_LEN - 1; i > 0; i--) {
        int j = rnd(0, i);
        int32_t t = prompt_all[i];
        prompt_all[i] = prompt_all[j];
        prompt_all[j] = t;
    }
    sampling_params sp;
    sampling_params_default(&sp);
    sp.temperature = 0.8f;
    sp.top_k = 12;
    sp.repetition_penalty = 1.2f; /* penalties apply to p and q alike, drafts in the history */
    const int V = g.vocab;
    sampler_t *smp = NULL;
    assert_int_equal(sampler_new(V, &smp), DERAS_OK);
    float *lg = malloc((size_t)V * sizeof(float)), *pf = malloc((size_t)V * sizeof(float));
    double *p1 = malloc((size_t)V * sizeof(double)), *p2 = malloc((size_t)V * sizeof(double));
    uint64_t *c1 = malloc((size_t)V * sizeof(uint64_t)), *c2 = malloc((size_t)V * sizeof(uint64_t));
    outputs *o = malloc(sizeof *o);
    int32_t (*first)[3] = malloc(E2E_N * sizeof *first);

    spec_opts cases[] = {proposer(SPEC_SELF, 1, NULL, 3), proposer(SPEC_NGRAM, 0, NULL, 3)};
    const char *names[] = {"self-draft 1 layer", "n-gram"};
    for (int c = 0; c < 2; c++) {
        const int n_prompt = c == 0 ? E2E_SHORT : E2E_NGRAM;
        const int32_t *prompt = prompt_all + E2E_LEN - n_prompt;
        model_t *drafter;
        memset(o, 0, sizeof *o);
        engine_t *e = engine_for(&g, o, &cases[c], true, &drafter);
        /* E2E_N requests, MAX_REQS at a time; each keeps its first three tokens */
        for (int base = 0; base < E2E_N; base += MAX_REQS) {
            memset(o, 0, sizeof *o);
            for (int r = base; r < base + MAX_REQS && r < E2E_N; r++) {
                engine_request q = {.id = (uint64_t)r, .prompt = prompt, .n_prompt = n_prompt,
                                    .params.max_tokens = 4, .params.n = 1,
                                    .params.seed = 1000003ull * (uint64_t)r,
                                    .params.sp = sp, .params.ignore_eos = true};
                if (engine_add(e, &q))
                    fail_msg("engine_add: %s", deras_errmsg());
            }
            run_to_end(e);
            for (int r = base; r < base + MAX_REQS && r < E2E_N; r++)
                for (int t = 0; t < 3; t++)
                    first[r][t] = o->s[r % MAX_REQS][0].tokens[t];
        }
        engine_stats st;
        engine_get_stats(e, &st);
        engine_destroy(&e);
        model_destroy(&drafter);

        /* token 1 against p(. | prompt) */
        sample_history h = {prompt, n_prompt, NULL, 0, NULL, 0, NULL};
        target_logits(&g, prompt, n_prompt, lg);
        assert_int_equal(sampler_probs(smp, lg, &sp, &h, pf), DERAS_OK);
        memset(c1, 0, (size_t)V * sizeof(uint64_t));
        for (int i = 0; i < V; i++)
            p1[i] = pf[i];
        for (int r = 0; r < E2E_N; r++)
            c1[first[r][0]]++;
        int mode = 0;
        for (int i = 1; i < V; i++)
            mode = c1[i] > c1[mode] ? i : mode;
        int df1, df2;
        double s1 = chi_square(c1, p1, V, E2E_N, &df1), pv1 = gamma_q(df1 / 2.0, s1 / 2.0);

        /* token 2 (verified against a draft) given token 1 = the mode */
        int32_t ext[E2E_LEN + 1];
        memcpy(ext, prompt, (size_t)n_prompt * sizeof(int32_t));
        ext[n_prompt] = mode;
        sample_history h2 = {prompt, n_prompt, ext + n_prompt, 1, NULL, 0, NULL};
        target_logits(&g, ext, n_prompt + 1, lg);
        assert_int_equal(sampler_probs(smp, lg, &sp, &h2, pf), DERAS_OK);
        memset(c2, 0, (size_t)V * sizeof(uint64_t));
        uint64_t n2 = 0;
        for (int i = 0; i < V; i++)
            p2[i] = pf[i];
        for (int r = 0; r < E2E_N; r++)
            if (first[r][0] == mode) {
                c2[first[r][1]]++;
                n2++;
            }
        double s2 = chi_square(c2, p2, V, n2, &df2), pv2 = gamma_q(df2 / 2.0, s2 / 2.0);
        printf("  %s, %d seeded requests (temperature 0.8, top_k 12, repetition penalty 1.2): "
               "acceptance %.1f%% of %llu drafts\n"
               "    token 1: chi-square %.2f, %d df, p-value %.4g\n"
               "    token 2 given token 1 = %d (%llu samples): chi-square %.2f, %d df, p-value "
               "%.4g\n",
               names[c], E2E_N,
               st.spec.proposed ? 100.0 * (double)st.spec.accepted / (double)st.spec.proposed : 0.0,
               (unsigned long long)st.spec.proposed, s1, df1, pv1, mode, (unsigned long long)n2,
               s2, df2, pv2);
        if (st.spec.proposed < E2E_N / 8)
            fail_msg("%s proposed %llu drafts for %d requests: too few to test the rule",
                     names[c], (unsigned long long)st.spec.proposed, E2E_N);
        if (pv1 < 1e-4 || pv2 < 1e-4)
            fail_msg("%s: sampled tokens are not distributed as the target's: p-values %.3g and "
                     "%.3g, expected >= 1e-4", names[c], pv1, pv2);
    }
    free(first), free(o), free(c1), free(c2), free(p1), free(p2), free(lg), free(pf);
    sampler_destroy(&smp);
    rig_close(&g);
}

/* ---- 4. accounting under a random workload ---- */

static void random_workload_keeps_accounting_exact_with_rollbacks(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 97, 16, 128, 4);
    spec_opts cases[] = {proposer(SPEC_NGRAM, 0, NULL, 4), proposer(SPEC_SELF, 1, NULL, 4)};
    for (int c = 0; c < 2; c++) {
        outputs *o = calloc(1, sizeof *o);
        model_t *drafter;
        engine_t *e = engine_for(&g, o, &cases[c], true, &drafter);
        ew_result w;
        /* repeats in the prompts give the n-gram proposer matches */
        ew_shape shape = {.max_prompt = 200, .alphabet_hi = 8, .seed_per_request = true,
                          .random_spec_k = true};
        ew_run(e, MAX_REQS, 31 + (uint64_t)c, ew_make_request, &shape,
               spec_kind_name(cases[c].kind), &w);
        for (int r = 0; r < w.added; r++)
            for (int i = 0; i < 4; i++)
                if (o->s[r][i].n > 0 && o->s[r][i].finished != 1)
                    fail_msg("request %d sample %d finished %d times, expected once", r, i,
                             o->s[r][i].finished);
        engine_stats st;
        engine_get_stats(e, &st);
        printf("  %s: %d requests (n up to 4), %d aborts, %d steps, %llu preemptions, %llu "
               "drafts (%llu accepted); accounting exact after every step, all blocks "
               "returned\n", spec_kind_name(cases[c].kind), w.added, w.aborts, w.steps,
               (unsigned long long)st.preemptions, (unsigned long long)st.spec.proposed,
               (unsigned long long)st.spec.accepted);
        assert_int_equal(st.kv_blocks_used, 0);
        assert_true(st.spec.proposed > 0);
        engine_destroy(&e);
        model_destroy(&drafter);
        free(o);
    }
    rig_close(&g);
}

/* Adaptive k: drafts that stand grow k to its maximum; a run of rejections pauses the
 * sequence for SPEC_PAUSE_STEPS steps, then it probes with one draft (and pauses again if
 * that fails too); a fresh start is optimistic. */
static void adaptive_k_grows_on_acceptance_and_pauses_on_rejections(void **state)
{
    (void)state;
    spec_adapt a;
    spec_adapt_reset(&a);
    int k = spec_adapt_k(&a, 4);
    assert_true(k >= 1 && k <= 4);
    for (int i = 0; i < 8; i++) {
        k = spec_adapt_k(&a, 4);
        spec_adapt_update(&a, k, k); /* every draft stood */
    }
    assert_int_equal(spec_adapt_k(&a, 4), 4);
    assert_int_equal(spec_adapt_k(&a, 16), 16);
    /* now every first draft is rejected: within a few verifications it pauses */
    int verifications = 0;
    while ((k = spec_adapt_k(&a, 4)) > 0) {
        spec_adapt_update(&a, k, 0);
        if (++verifications > 12)
            fail_msg("still asking for %d drafts after %d verifications that all failed", k,
                     verifications);
    }
    for (int i = 1; i < SPEC_PAUSE_STEPS; i++)
        if ((k = spec_adapt_k(&a, 4)) != 0)
            fail_msg("paused step %d asked for %d drafts", i, k);
    assert_int_equal(spec_adapt_k(&a, 4), 1); /* the probe */
    spec_adapt_update(&a, 1, 0);
    assert_int_equal(spec_adapt_k(&a, 4), 0); /* it failed: paused again */
    printf("adaptive k: grows to k_max on accepted drafts, pauses after %d verifications "
           "that all failed, probes with 1 draft after %d steps\n", verifications,
           SPEC_PAUSE_STEPS);
}

static void bad_speculation_settings_get_clear_errors(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 100, 4, 64, 4);
    spec_opts so;
    spec_opts_default(&so);
    assert_int_equal(spec_opts_parse_proposer("self:x", &so), DERAS_EINVAL);
    assert_int_equal(spec_opts_parse_proposer("tree", &so), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "ngram"));
    assert_int_equal(spec_opts_parse_proposer("self:2", &so), DERAS_OK);
    model_t *d = NULL;
    assert_int_equal(spec_drafter_load(&so, g.m, g.be, &d), DERAS_EINVAL); /* 2 of 2 layers */
    assert_non_null(strstr(deras_errmsg(), "layers"));
    so = proposer(SPEC_NGRAM, 0, NULL, SPEC_MAX_K + 1);
    assert_int_equal(spec_opts_check(&so), DERAS_EINVAL);
    /* k 8 needs 4 x 9 logit rows; the model has 4 x 5 */
    static const int32_t eog[1] = {2};
    engine_opts eo = {.max_seqs = 4, .max_batch_tokens = 64, .max_live_seqs = 8, .eog_ids = eog,
                      .n_eog = 1, .spec = proposer(SPEC_NGRAM, 0, NULL, 8)};
    engine_t *e = NULL;
    assert_int_equal(engine_new(g.m, &eo, &e), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "logit rows"));
    eo.spec = proposer(SPEC_SELF, 1, NULL, 4); /* a model proposer without its model */
    assert_int_equal(engine_new(g.m, &eo, &e), DERAS_EINVAL);
    eo.spec = proposer(SPEC_NGRAM, 0, NULL, 4);
    assert_int_equal(engine_new(g.m, &eo, &e), DERAS_OK);
    int32_t p[3] = {3, 4, 5};
    engine_request q = {.id = 1, .prompt = p, .n_prompt = 3, .params.max_tokens = 4, .params.n = 1,
                        .params.spec_tokens = SPEC_MAX_K + 1};
    sampling_params_default(&q.params.sp);
    assert_int_equal(engine_add(e, &q), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "num_speculative_tokens"));
    engine_destroy(&e);
    rig_close(&g);
}

/* ---- the test model ---- */

static const char *const texts[] = {
    "The quick brown fox jumps over the lazy dog near the quiet river bank.",
    "In 1969, astronauts first walked on the Moon, watched by millions on television.",
    "Water boils at 100 degrees Celsius at sea level and freezes at 0 degrees.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "A function that calls itself is called recursive; it needs a base case.",
    "The library opens at nine in the morning and closes at six in the evening.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen.",
    "She packed her bags, locked the door, and walked to the train station.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Prime numbers: 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37.",
};
static const char *const tasks[] = {
    "Repeat the following text exactly: ",
    "Summarise in one sentence: ",
    "Translate to French: ",
    "Continue the story: ",
    "Quote this line, then explain it: ",
};

static void test_model_greedy_is_token_identical(void **state)
{
    (void)state;
    const char *path = test_model_path();
    rig g;
    rig_open(&g, path, 320, 16, 512, 4);
    const gguf_t *gg = checkpoint_gguf(g.ck);
    tokenizer_t *tok = NULL;
    if (!gg || tokenizer_from_gguf(gg, &tok))
        fail_msg("tokenizer: %s", deras_errmsg());
    prompts *pr = malloc(sizeof *pr);
#if defined(__SANITIZE_ADDRESS__)
    /* under the sanitizers (several times slower) the same paths on 10 prompts: the
     * 50-prompt figures come from the release run */
    pr->n = 10;
#else
    pr->n = 50;
#endif
    for (int r = 0; r < pr->n; r++) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s%s", tasks[r % 5], texts[r / 5]);
        size_t n = 0;
        if (tokenizer_encode(tok, buf, strlen(buf), false, false, pr->tok[r], 160, &n))
            fail_msg("encode: %s", deras_errmsg());
        pr->len[r] = (int)n;
    }
    tokenizer_destroy(&tok);
    outputs *ref = malloc(sizeof *ref), *got = malloc(sizeof *got);
    engine_stats st;
    run_greedy(&g, pr, NULL, 24, ref, &st);
    struct {
        const char *what;
        spec_opts so;
        double min_rate, max_rate;
    } cases[] = {
        {"n-gram", proposer(SPEC_NGRAM, 0, NULL, 4), 0.0, 1.0},
        {"self-draft 8 of 30 layers", proposer(SPEC_SELF, 8, NULL, 4), 0.01, 0.95},
        {"draft model = the target", proposer(SPEC_DRAFT, 0, path, 4), 0.95, 1.0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        run_greedy(&g, pr, &cases[c].so, 24, got, &st);
        int near = compare(pr, ref, got, cases[c].what);
        report(cases[c].what, &st, pr->n, near);
        double rate = st.spec.proposed ? (double)st.spec.accepted / (double)st.spec.proposed : 0;
        if (st.spec.proposed == 0 || rate < cases[c].min_rate || rate > cases[c].max_rate)
            fail_msg("%s: acceptance %.3f of %llu drafts, expected in [%.2f, %.2f]",
                     cases[c].what, rate, (unsigned long long)st.spec.proposed,
                     cases[c].min_rate, cases[c].max_rate);
        if (near > test_near_tie_budget(pr->n))
            fail_msg("%s: %d near-tie divergences in %d prompts, expected at most %d",
                     cases[c].what, near, pr->n, test_near_tie_budget(pr->n));
    }
    free(pr), free(ref), free(got);
    rig_close(&g);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ngram_copies_what_followed_the_latest_match),
        cmocka_unit_test(rejection_rule_gives_the_target_distribution),
        cmocka_unit_test(a_wrong_acceptance_rule_fails_the_same_test),
        cmocka_unit_test(adaptive_k_grows_on_acceptance_and_pauses_on_rejections),
        cmocka_unit_test(bad_speculation_settings_get_clear_errors),
        cmocka_unit_test(greedy_is_token_identical_for_every_proposer),
        cmocka_unit_test(sampled_tokens_follow_the_target_distribution),
        cmocka_unit_test(random_workload_keeps_accounting_exact_with_rollbacks),
    };
    const struct CMUnitTest model_tests[] = {
        cmocka_unit_test(test_model_greedy_is_token_identical),
    };
    if (argc > 1 && !strcmp(argv[1], "model")) {
        test_model_path();
        return cmocka_run_group_tests(model_tests, NULL, NULL);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
