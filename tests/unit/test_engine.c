/* SPDX-License-Identifier: Apache-2.0 */
/* test_engine.c - continuous batching: many sequences at once give each one's own output.
 *
 * The reference for a request is the same engine running that request alone. Batched,
 * the same request shares steps with up to 63 others, its prompt is chunked differently,
 * it may be preempted and recomputed, or start from cached prefix blocks; under greedy
 * sampling its tokens must not change. Matrix products of different batch sizes round
 * differently, so a token may legitimately flip where the top two logits are within
 * rounding of each other: such a difference is accepted only if the solo run's top-2
 * margin at that token is below NEAR_TIE, and the count is printed.
 *
 * Model: tests/data/engine-llama (random weights, 4,096-token context: made by
 * tests/ref/make_engine_model.py) for the large workloads; the test model for a smaller
 * workload with real text statistics (label `model`, run as test_engine_model).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checkpoint/checkpoint.h"
#include "common/base/status.h"
#include "engine_workload.h"
#include "test_kv.h"
#include "test_util.h"
#include "engine/engine.h"

#define NEAR_TIE test_near_tie()
#define MAX_REQS 96
#define MAX_GEN 320

typedef struct out_seq {
    int32_t tokens[MAX_GEN];
    float margin[MAX_GEN]; /* top-1 minus top-2 logprob at each token */
    int n;
    int finished;          /* times on_finish was called */
    finish_reason why;
} out_seq;

typedef struct outputs {
    out_seq s[MAX_REQS][4];
} outputs;

static void on_token(void *ctx, uint64_t id, int index, const sample_result *r)
{
    outputs *o = ctx;
    out_seq *s = &o->s[id][index];
    if (s->n < MAX_GEN) {
        s->tokens[s->n] = r->token;
        s->margin[s->n] = r->n_top >= 2 ? r->top_logprobs[0] - r->top_logprobs[1] : INFINITY;
    }
    s->n++;
}

static void on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    outputs *o = ctx;
    out_seq *s = &o->s[id][index];
    s->finished++;
    s->why = end->why;
    assert_int_equal(end->n_generated, s->n);
    assert_true(end->spec.proposed == 0 && end->spec.verifications == 0); /* no proposer */
}

typedef struct workload {
    int n;
    int32_t *prompts[MAX_REQS];
    engine_request req[MAX_REQS];
} workload;

static uint64_t rng_state;

static int rnd(int lo, int hi)
{
    return lo + (int)(test_rng_next(&rng_state) % (uint64_t)(hi - lo + 1));
}

/* n requests, prompt lengths in [1, max_prompt] (a few at the extremes), outputs in
 * [1, max_out]; prompts share a common prefix of `shared` tokens when shared > 0. */
static void make_workload(workload *w, int n, int max_prompt, int max_out, int vocab,
                          int shared, uint64_t seed)
{
    rng_state = seed;
    w->n = n;
    int32_t *prefix = malloc((size_t)(shared + 1) * sizeof(int32_t));
    for (int i = 0; i < shared; i++)
        prefix[i] = rnd(3, vocab - 1);
    for (int r = 0; r < n; r++) {
        int len = shared ? shared + rnd(1, 40) : r == 0 ? 1 : r == 1 ? max_prompt : rnd(1, max_prompt);
        int out = r == 2 ? 1 : r == 3 ? max_out : rnd(1, max_out);
        w->prompts[r] = malloc((size_t)len * sizeof(int32_t));
        for (int i = 0; i < len; i++)
            w->prompts[r][i] = i < shared ? prefix[i] : rnd(3, vocab - 1);
        engine_request *q = &w->req[r];
        memset(q, 0, sizeof *q);
        q->id = (uint64_t)r;
        q->prompt = w->prompts[r];
        q->n_prompt = len;
        sampling_params_default(&q->params.sp);
        q->params.sp.n_logprobs = 2;
        q->params.max_tokens = out;
        q->params.n = 1;
    }
    free(prefix);
}

static void free_workload(workload *w)
{
    for (int r = 0; r < w->n; r++)
        free(w->prompts[r]);
}

typedef struct rig {
    checkpoint_t *ck;
    backend_t *be;
    model_t *m;
    int vocab, max_tokens;
} rig;

static void rig_open(rig *g, const char *path, int n_kv_blocks, int max_seqs, int max_tokens)
{
    memset(g, 0, sizeof *g);
    if (checkpoint_open(path, &g->ck))
        fail_msg("%s", deras_errmsg());
    assert_int_equal(backend_new(test_backend_spec(), 2, &g->be), DERAS_OK);
    test_matmul_mode(g->be);
    model_opts mo = {.max_batch_tokens = max_tokens, .max_seqs = max_seqs, .max_logits = max_seqs,
                     .block_size = 16, .n_kv_blocks = n_kv_blocks, .max_blocks_per_seq = 96,
                     .max_copies = max_seqs, .kv_dtype = test_kv_dtype()};
    if (model_new(g->ck, g->be, &mo, &g->m))
        fail_msg("%s", deras_errmsg());
    g->vocab = checkpoint_config(g->ck)->vocab_size;
    g->max_tokens = max_tokens;
}

static void rig_close(rig *g)
{
    model_destroy(&g->m);
    backend_destroy(&g->be);
    checkpoint_destroy(&g->ck);
}

static engine_t *engine_for(rig *g, outputs *o, int max_seqs, int max_tokens, bool prefix, bool stat)
{
    static const int32_t eog[1] = {2};
    engine_opts eo = {.max_seqs = max_seqs, .max_batch_tokens = max_tokens, .max_live_seqs = 256,
                      .prefix_caching = prefix, .static_batching = stat, .eog_ids = eog,
                      .n_eog = 1, .cb = {on_token, on_finish, o}};
    engine_t *e = NULL;
    if (engine_new(g->m, &eo, &e))
        fail_msg("engine_new: %s", deras_errmsg());
    return e;
}

typedef struct run_stats {
    int steps, max_running;
    uint64_t preemptions, hits, queries, cow;
    double max_waste_frac;
} run_stats;

/* Step until idle, checking invariants and the one-partial-block rule after each step. */
static void run_to_end(engine_t *e, run_stats *rs, int block_size)
{
    memset(rs, 0, sizeof *rs);
    while (engine_has_work(e)) {
        int n = 0;
        if (engine_step(e, &n))
            fail_msg("engine_step: %s", deras_errmsg());
        if (n == 0)
            fail_msg("engine made no progress with work queued (deadlock)");
        if (engine_check(e))
            fail_msg("after step %d: %s", rs->steps, deras_errmsg());
        engine_stats st;
        engine_get_stats(e, &st);
        if (st.kv_waste_tokens > st.n_running * (block_size - 1))
            fail_msg("waste %d tokens for %d running sequences: more than one partial block each",
                     st.kv_waste_tokens, st.n_running);
        if (st.kv_running_tokens > 0) {
            double f = (double)st.kv_waste_tokens / (st.kv_running_tokens + st.kv_waste_tokens);
            rs->max_waste_frac = f > rs->max_waste_frac ? f : rs->max_waste_frac;
        }
        rs->max_running = st.n_running > rs->max_running ? st.n_running : rs->max_running;
        rs->steps++;
    }
    engine_stats st;
    engine_get_stats(e, &st);
    rs->preemptions = st.preemptions;
    rs->hits = st.prefix_hit_tokens;
    rs->queries = st.prefix_query_tokens;
    rs->cow = st.cow_copies;
    assert_int_equal(st.kv_blocks_used, 0); /* everything given back */
}

/* Each request alone, one after another. */
static void run_solo(rig *g, const workload *w, outputs *solo)
{
    memset(solo, 0, sizeof *solo);
    engine_t *e = engine_for(g, solo, 1, g->max_tokens, false, false);
    run_stats rs;
    for (int r = 0; r < w->n; r++) {
        assert_int_equal(engine_add(e, &w->req[r]), DERAS_OK);
        run_to_end(e, &rs, 16);
    }
    engine_destroy(&e);
}

/* Compare batched outputs with solo ones; returns the count of near-tie differences. */
static int compare(const workload *w, const outputs *solo, const outputs *got, const char *what)
{
    int near_ties = 0;
    for (int r = 0; r < w->n; r++) {
        const out_seq *a = &solo->s[r][0], *b = &got->s[r][0];
        if (b->finished != 1)
            fail_msg("%s: request %d finished %d times", what, r, b->finished);
        int k = 0;
        while (k < a->n && k < b->n && a->tokens[k] == b->tokens[k])
            k++;
        if (k == a->n && k == b->n) {
            if (a->why != b->why)
                fail_msg("%s: request %d: finish %s vs %s alone", what, r,
                         finish_reason_name(b->why), finish_reason_name(a->why));
            continue;
        }
        if (k < a->n && k < b->n && a->margin[k] < NEAR_TIE) {
            near_ties++;
            printf("  %s: request %d diverges at token %d after a near-tie (solo top-2 margin "
                   "%.2e)\n", what, r, k, a->margin[k]);
            continue;
        }
        fail_msg("%s: request %d (prompt %d, max_tokens %d): token %d is %d, alone %d (solo "
                 "top-2 margin %.3g); lengths %d vs %d",
                 what, r, w->req[r].n_prompt, w->req[r].params.max_tokens, k,
                 k < b->n ? b->tokens[k] : -1, k < a->n ? a->tokens[k] : -1,
                 k < a->n ? a->margin[k] : 0.0, b->n, a->n);
    }
    return near_ties;
}

static const char *engine_model(void)
{
    static char *p;
    if (!p)
        p = test_data_path("engine-llama");
    return p;
}

/* A workload run alone request by request, then all together, compared. */
typedef struct scenario {
    const char *model;
    int n_blocks, max_seqs, max_tokens;  /* KV cache and step limits */
    int n, max_prompt, max_out, shared;  /* workload (see make_workload) */
    uint64_t seed;
    bool prefix_caching, warm_first;     /* warm_first: request 0 runs before the rest arrive */
} scenario;

typedef struct scenario_result {
    run_stats rs;
    int near_ties, tokens, stops;
} scenario_result;

static void run_scenario(const scenario *sc, const char *what, scenario_result *res)
{
    rig g;
    rig_open(&g, sc->model, sc->n_blocks, sc->max_seqs, sc->max_tokens);
    workload w;
    make_workload(&w, sc->n, sc->max_prompt, sc->max_out, g.vocab, sc->shared, sc->seed);
    outputs *solo = calloc(1, sizeof *solo), *got = calloc(1, sizeof *got);
    run_solo(&g, &w, solo);
    engine_t *e = engine_for(&g, got, sc->max_seqs, sc->max_tokens, sc->prefix_caching, false);
    int first = 0;
    if (sc->warm_first) {
        assert_int_equal(engine_add(e, &w.req[0]), DERAS_OK);
        run_to_end(e, &res->rs, 16);
        first = 1;
    }
    for (int r = first; r < w.n; r++)
        assert_int_equal(engine_add(e, &w.req[r]), DERAS_OK);
    run_to_end(e, &res->rs, 16);
    res->near_ties = compare(&w, solo, got, what);
    res->tokens = res->stops = 0;
    for (int r = 0; r < w.n; r++) {
        res->tokens += got->s[r][0].n;
        res->stops += got->s[r][0].why == FINISH_STOP;
    }
    engine_destroy(&e);
    free(solo), free(got);
    free_workload(&w);
    rig_close(&g);
}

static void sixty_four_mixed_requests_match_each_run_alone(void **state)
{
    (void)state;
    /* 2,800 blocks: room for all 64 at their longest, so nothing is preempted here */
    scenario sc = {.model = engine_model(), .n_blocks = 2800, .max_seqs = 64, .max_tokens = 512,
                   .n = 64, .max_prompt = 1000, .max_out = 300, .seed = 0xBA7C4ull};
    scenario_result r;
    run_scenario(&sc, "batched", &r);
    printf("64 requests (prompts 1..1000, outputs 1..300): %d tokens generated in %d steps, up "
           "to %d running; %d finished by stop, %d by length; identical to solo runs except "
           "%d near-tie divergences; max KV waste %.1f%% (at most one partial block per "
           "sequence, checked every step)\n",
           r.tokens, r.rs.steps, r.rs.max_running, r.stops, sc.n - r.stops, r.near_ties,
           100 * r.rs.max_waste_frac);
    assert_true(r.rs.max_running > 32);
}

static void small_kv_budget_preempts_and_still_completes_every_request(void **state)
{
    (void)state;
    /* 160 usable blocks = 2,560 tokens for a running set that wants ~20,000 */
    scenario sc = {.model = engine_model(), .n_blocks = 161, .max_seqs = 64, .max_tokens = 512,
                   .n = 48, .max_prompt = 600, .max_out = 200, .seed = 0x9EE4Full};
    scenario_result r;
    run_scenario(&sc, "preempted", &r);
    printf("48 requests in a 160-block KV cache: %llu preemptions, %d steps, outputs identical "
           "to solo runs except %d near-tie divergences\n",
           (unsigned long long)r.rs.preemptions, r.rs.steps, r.near_ties);
    assert_true(r.rs.preemptions > 0);
}

static void shared_prefix_hits_the_cache_and_keeps_outputs(void **state)
{
    (void)state;
    scenario sc = {.model = engine_model(), .n_blocks = 1200, .max_seqs = 32, .max_tokens = 512,
                   .n = 24, .max_out = 60, .shared = 640, .seed = 0x5EEDull,
                   .prefix_caching = true, .warm_first = true};
    scenario_result r;
    run_scenario(&sc, "prefix-cached", &r);
    double rate = r.rs.queries ? (double)r.rs.hits / (double)r.rs.queries : 0;
    printf("24 requests sharing a 640-token prefix: prefix-cache hit rate %.1f%% (%llu of %llu "
           "prompt tokens), outputs identical to uncached solo runs except %d near-ties\n",
           100 * rate, (unsigned long long)r.rs.hits, (unsigned long long)r.rs.queries,
           r.near_ties);
    assert_true(rate > 0.8);
}

static void n_samples_share_the_prompt_and_equal_independent_requests(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 600, 16, 256);
    int32_t prompt[45];
    rng_state = 77;
    for (int i = 0; i < 45; i++) /* 45 tokens: a partly filled last block to copy on write */
        prompt[i] = rnd(3, g.vocab - 1);
    engine_request q = {.id = 0, .prompt = prompt, .n_prompt = 45, .params.seed = 1000,
                        .params.max_tokens = 30, .params.n = 4};
    sampling_params_default(&q.params.sp);
    q.params.sp.temperature = 0.9f;
    q.params.sp.top_p = 0.95f;
    outputs *forked = calloc(1, sizeof *forked), *indep = calloc(1, sizeof *indep);
    engine_t *e = engine_for(&g, forked, 16, 256, true, false);
    assert_int_equal(engine_add(e, &q), DERAS_OK);
    run_stats rs;
    run_to_end(e, &rs, 16);
    engine_destroy(&e);
    e = engine_for(&g, indep, 1, 256, false, false);
    for (int i = 0; i < 4; i++) {
        engine_request one = q;
        one.id = (uint64_t)i;
        one.params.n = 1;
        one.params.seed = q.params.seed + (uint64_t)i;
        assert_int_equal(engine_add(e, &one), DERAS_OK);
        run_stats r2;
        run_to_end(e, &r2, 16);
        const out_seq *a = &indep->s[i][0], *b = &forked->s[0][i];
        assert_int_equal(b->finished, 1);
        if (a->n != b->n || memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t)))
            fail_msg("sample %d of an n=4 request differs from an independent request with seed "
                     "%llu", i, (unsigned long long)one.params.seed);
    }
    printf("n=4 request: prompt computed once, %llu copy-on-write block copies, each sample "
           "equals an independent request with its seed\n", (unsigned long long)rs.cow);
    assert_true(rs.cow >= 3);
    engine_destroy(&e);
    free(forked), free(indep);
    rig_close(&g);
}

static void decodes_progress_every_step_while_a_long_prompt_prefills(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 600, 8, 64);
    outputs *o = calloc(1, sizeof *o);
    engine_t *e = engine_for(&g, o, 8, 64, false, false);
    int32_t shortp[4] = {5, 6, 7, 8}, longp[1000];
    for (int i = 0; i < 1000; i++)
        longp[i] = 3 + i % 200;
    engine_request a = {.id = 0, .prompt = shortp, .n_prompt = 4, .params.max_tokens = 40,
                        .params.n = 1, .params.ignore_eos = true};
    engine_request b = {.id = 1, .prompt = longp, .n_prompt = 1000, .params.max_tokens = 2,
                        .params.n = 1, .params.ignore_eos = true};
    sampling_params_default(&a.params.sp);
    sampling_params_default(&b.params.sp);
    assert_int_equal(engine_add(e, &a), DERAS_OK);
    assert_int_equal(engine_step(e, NULL), DERAS_OK);
    assert_int_equal(engine_add(e, &b), DERAS_OK);
    /* the 1,000-token prompt needs ~16 steps of 63 tokens; request 0 gets a token in each */
    for (int step = 0; step < 16; step++) {
        int before = o->s[0][0].n;
        assert_int_equal(engine_step(e, NULL), DERAS_OK);
        if (o->s[0][0].n != before + 1)
            fail_msg("step %d: the decoding request got %d tokens while the prompt prefilled",
                     step, o->s[0][0].n - before);
    }
    engine_destroy(&e);
    free(o);
    rig_close(&g);
}

static void abort_frees_blocks_at_once_and_finishes_once(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 600, 8, 256);
    outputs *o = calloc(1, sizeof *o);
    engine_t *e = engine_for(&g, o, 8, 256, false, false);
    int32_t p[100];
    for (int i = 0; i < 100; i++)
        p[i] = 3 + i;
    engine_request q = {.id = 5, .prompt = p, .n_prompt = 100, .params.max_tokens = 50,
                        .params.n = 2, .params.ignore_eos = true};
    sampling_params_default(&q.params.sp);
    assert_int_equal(engine_add(e, &q), DERAS_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(engine_step(e, NULL), DERAS_OK);
    engine_stats st;
    engine_get_stats(e, &st);
    assert_true(st.kv_blocks_used > 0);
    assert_int_equal(engine_abort(e, 5), DERAS_OK);
    engine_get_stats(e, &st);
    assert_int_equal(st.kv_blocks_used, 0);
    assert_int_equal(o->s[5][0].finished, 1);
    assert_int_equal(o->s[5][1].finished, 1);
    assert_int_equal(o->s[5][0].why, FINISH_ABORT);
    assert_int_equal(engine_abort(e, 5), DERAS_ENOTFOUND);
    assert_false(engine_has_work(e));
    assert_int_equal(engine_check(e), DERAS_OK);
    engine_destroy(&e);
    free(o);
    rig_close(&g);
}

static void bad_requests_get_clear_errors(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 100, 4, 64);
    outputs *o = calloc(1, sizeof *o);
    engine_t *e = engine_for(&g, o, 4, 64, false, false);
    int32_t p[3] = {1, 2, 3}, bad[2] = {1, 256};
    engine_request q = {.id = 1, .prompt = p, .n_prompt = 3, .params.max_tokens = 5000,
                        .params.n = 1};
    sampling_params_default(&q.params.sp);
    assert_int_equal(engine_add(e, &q), DERAS_ECONTEXT);
    assert_non_null(strstr(deras_errmsg(), "context_length_exceeded"));
    q.params.max_tokens = 4;
    q.prompt = bad;
    q.n_prompt = 2;
    assert_int_equal(engine_add(e, &q), DERAS_ERANGE);
    q.prompt = p;
    q.n_prompt = 3;
    q.params.sp.temperature = -1;
    assert_int_equal(engine_add(e, &q), DERAS_ERANGE);
    sampling_params_default(&q.params.sp);
    q.params.n = 0;
    assert_int_equal(engine_add(e, &q), DERAS_ERANGE);
    q.params.n = 1;
    assert_int_equal(engine_add(e, &q), DERAS_OK);
    assert_int_equal(engine_add(e, &q), DERAS_EINVAL); /* same id live */
    engine_destroy(&e);
    free(o);
    rig_close(&g);
}

/* min_tokens and logit_bias through the engine: a +100 bias makes token X every greedy
 * choice; with X a stop token a sample ends at its first token, with min_tokens 3 at its
 * fourth (the first three are neither X nor end of generation), with min_tokens =
 * max_tokens never by a stop; the rules across fields are refused at engine_add. */
static void min_tokens_and_logit_bias_through_the_engine(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 100, 4, 64);
    outputs *o = calloc(1, sizeof *o);
    engine_t *e = engine_for(&g, o, 4, 64, false, false);
    int32_t p[3] = {1, 5, 9};
    const int32_t X = 7;
    engine_request q = {.id = 1, .prompt = p, .n_prompt = 3, .params.max_tokens = 10,
                        .params.n = 1, .params.n_stop_ids = 1, .params.stop_ids = {X}};
    sampling_params_default(&q.params.sp);
    assert_int_equal(logit_bias_add(&q.params.sp.logit_bias, X, 100.0f), DERAS_OK);
    static const int min_tokens[3] = {0, 3, 10};
    run_stats rs;
    for (int i = 0; i < 3; i++) {
        q.id = (uint64_t)(1 + i);
        q.params.sp.min_tokens = min_tokens[i];
        assert_int_equal(engine_add(e, &q), DERAS_OK);
        run_to_end(e, &rs, 16);
        const out_seq *s = &o->s[1 + i][0];
        assert_int_equal(s->finished, 1);
        assert_int_equal(s->n, i < 2 ? min_tokens[i] + 1 : 10);
        for (int k = 0; k < s->n; k++) {
            bool stop_token = s->tokens[k] == X || s->tokens[k] == 2; /* 2: end of generation */
            if (stop_token != (k == min_tokens[i]))
                fail_msg("min_tokens %d: token %d is %d", min_tokens[i], k, s->tokens[k]);
        }
        assert_int_equal(s->why, i < 2 ? FINISH_STOP : FINISH_LENGTH);
    }
    q.id = 9;
    q.params.sp.min_tokens = 11; /* above max_tokens */
    assert_int_equal(engine_add(e, &q), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "min_tokens"));
    q.params.sp.min_tokens = 0;
    assert_int_equal(logit_bias_add(&q.params.sp.logit_bias, g.vocab, 1.0f), DERAS_OK);
    assert_int_equal(engine_add(e, &q), DERAS_ERANGE); /* a bias id outside the vocabulary */
    assert_non_null(strstr(deras_errmsg(), "logit_bias"));
    assert_false(engine_has_work(e));
    engine_destroy(&e);
    free(o);
    rig_close(&g);
}

static void static_batching_admits_only_when_the_batch_drains(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 600, 8, 256);
    outputs *o = calloc(1, sizeof *o);
    engine_t *e = engine_for(&g, o, 8, 256, false, true);
    int32_t p[8] = {4, 5, 6, 7, 8, 9, 10, 11};
    engine_request a = {.id = 0, .prompt = p, .n_prompt = 8, .params.max_tokens = 10, .params.n = 1,
                        .params.ignore_eos = true};
    engine_request b = a;
    b.id = 1;
    b.params.max_tokens = 3;
    sampling_params_default(&a.params.sp);
    b.params.sp = a.params.sp;
    assert_int_equal(engine_add(e, &a), DERAS_OK);
    assert_int_equal(engine_step(e, NULL), DERAS_OK);
    assert_int_equal(engine_add(e, &b), DERAS_OK);
    while (o->s[0][0].finished == 0) {
        assert_int_equal(o->s[1][0].n, 0); /* b waits while a runs */
        assert_int_equal(engine_step(e, NULL), DERAS_OK);
    }
    run_stats rs;
    run_to_end(e, &rs, 16);
    assert_int_equal(o->s[1][0].n, 3);
    engine_destroy(&e);
    free(o);
    rig_close(&g);
}

/* Random adds (n up to 4), aborts and finishes against a small cache, with every
 * invariant checked after every step and exact-once finish accounting at the end. */
static void random_add_abort_fork_finish_keeps_accounting_exact(void **state)
{
    (void)state;
    rig g;
    rig_open(&g, engine_model(), 97, 16, 128);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        outputs *o = calloc(1, sizeof *o);
        engine_t *e = engine_for(&g, o, 16, 128, seed != 2, false);
        ew_result w;
        char what[32];
        snprintf(what, sizeof what, "seed %llu", (unsigned long long)seed);
        ew_shape shape = {.max_prompt = 280, .alphabet_hi = 12, .seed = seed};
        ew_run(e, MAX_REQS, seed * 7919, ew_make_request, &shape, what, &w);
        for (int r = 0; r < w.added; r++)
            for (int i = 0; i < 4; i++)
                if (o->s[r][i].n > 0 && o->s[r][i].finished != 1)
                    fail_msg("request %d sample %d finished %d times", r, i, o->s[r][i].finished);
        engine_stats st;
        engine_get_stats(e, &st);
        printf("stress seed %llu: %d requests, %d aborts, %d steps, %llu preemptions, %llu "
               "copy-on-write copies, %llu prefix-hit tokens; blocks all returned\n",
               (unsigned long long)seed, w.added, w.aborts, w.steps,
               (unsigned long long)st.preemptions,
               (unsigned long long)st.cow_copies, (unsigned long long)st.prefix_hit_tokens);
        assert_int_equal(st.kv_blocks_used, 0);
        engine_destroy(&e);
        free(o);
    }
    rig_close(&g);
}

static int env_int(const char *name, int dflt, int lo, int hi)
{
    const char *v = getenv(name);
    int x = v ? atoi(v) : dflt;
    return x < lo ? lo : x > hi ? hi : x;
}

/* The test model: 16 requests by default (CI; 8 under AddressSanitizer, several times
 * slower, where the point is the memory checks); DERAS_ENGINE_REQUESTS / _MAX_PROMPT /
 * _MAX_OUTPUT scale it up to the full 64 x 1..1000 x 1..300 workload by hand. */
#if defined(__SANITIZE_ADDRESS__)
#define MODEL_REQUESTS 8
#else
#define MODEL_REQUESTS 16
#endif
static void test_model_batched_matches_alone(void **state)
{
    (void)state;
    scenario sc = {.model = test_model_path(),
                   .max_seqs = env_int("DERAS_ENGINE_REQUESTS", MODEL_REQUESTS, 4, 64),
                   .max_tokens = 256, .max_prompt = env_int("DERAS_ENGINE_MAX_PROMPT", 300, 4, 1000),
                   .max_out = env_int("DERAS_ENGINE_MAX_OUTPUT", 48, 4, 300), .seed = 0x5A011ull,
                   .prefix_caching = true};
    sc.n = sc.max_seqs;
    sc.n_blocks = sc.n * ((sc.max_prompt + sc.max_out + 15) / 16) + 1;
    scenario_result r;
    run_scenario(&sc, "test model batched", &r);
    printf("test model, %d requests (prompts 1..%d, outputs 1..%d): %d tokens, identical to solo "
           "runs except %d near-tie divergences; %d steps, up to %d running, max KV waste %.1f%%\n",
           sc.n, sc.max_prompt, sc.max_out, r.tokens, r.near_ties, r.rs.steps, r.rs.max_running,
           100 * r.rs.max_waste_frac);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_requests_get_clear_errors),
        cmocka_unit_test(min_tokens_and_logit_bias_through_the_engine),
        cmocka_unit_test(abort_frees_blocks_at_once_and_finishes_once),
        cmocka_unit_test(decodes_progress_every_step_while_a_long_prompt_prefills),
        cmocka_unit_test(static_batching_admits_only_when_the_batch_drains),
        cmocka_unit_test(n_samples_share_the_prompt_and_equal_independent_requests),
        cmocka_unit_test(shared_prefix_hits_the_cache_and_keeps_outputs),
        cmocka_unit_test(small_kv_budget_preempts_and_still_completes_every_request),
        cmocka_unit_test(random_add_abort_fork_finish_keeps_accounting_exact),
        cmocka_unit_test(sixty_four_mixed_requests_match_each_run_alone),
    };
    const struct CMUnitTest model_tests[] = {
        cmocka_unit_test(test_model_batched_matches_alone),
    };
    if (argc > 1 && !strcmp(argv[1], "model")) {
        test_model_path();
        return cmocka_run_group_tests(model_tests, NULL, NULL);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
