/* SPDX-License-Identifier: Apache-2.0 */
/* test_engine_grammar.c - structured output in the engine, on the test model.
 *
 * Grammars (GBNF written here, compiled through the worker's grammar cache over the test
 * model's real vocabulary) constrain greedy and seeded requests; every output's bytes are
 * checked with grammar_match_bytes: a sample that stopped is a complete sentence, one cut
 * by max_tokens a prefix of one. Then the wiring's promises, each against the same requests
 * run alone and unconstrained where that is the reference:
 *   - continuous batching: constrained and free requests in one batch give each the tokens
 *     it gets alone (greedy; a divergence after a near tie of the solo run is tolerated);
 *   - n = 2 at temperature 0.8 with seeds: every sample valid, the same seeds the same
 *     tokens batched and alone;
 *   - speculative decoding (n-gram drafts, k 4) on vs off: identical greedy outputs;
 *   - masks on the helper thread vs inline: identical;
 *   - a cache small enough to preempt: identical;
 *   - ignore_eos ends at the grammar's completion; a grammar of the empty string ends with
 *     no token; a run-time budget (nesting forced by a logit bias past the matcher's depth)
 *     ends the request with PE_GRAMMAR_BUDGET, and the engine keeps serving.
 *
 * Label `model` (skips without the test model). Costs: a few hundred decode steps of the
 * 135M model.
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
#include "common/grammar/grammar.h"
#include "engine/engine.h"
#include "engine/grammar_cache.h"
#include "engine/loader.h"
#include "test_util.h"

#define MAX_REQ 24
#define MAX_GEN 96

typedef struct out_seq {
    int32_t tokens[MAX_GEN];
    float margin[MAX_GEN];
    int n, finished;
    finish_reason why;
    enum proto_error_code error;
} out_seq;

typedef struct outputs {
    out_seq s[MAX_REQ][2];
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
    s->error = end->error;
    assert_int_equal(end->n_generated, s->n);
}

static loader_t *ld;
static const tokenizer_t *tok;
static gcache_t *cache;

/* The grammars. Prompts ask for what the grammar holds, so greedy text is plausible. */
static const char *const g_date = "root ::= [0-9]{4} \"-\" [0-1] [0-9] \"-\" [0-3] [0-9]";
static const char *const g_person =
    "root ::= \"{\" ws \"\\\"name\\\":\" ws str \",\" ws \"\\\"age\\\":\" ws int ws \"}\"\n"
    "str ::= \"\\\"\" [a-zA-Z ]{1,20} \"\\\"\"\n"
    "int ::= [1-9] [0-9]?\n"
    "ws ::= [ ]?\n";
static const char *const g_list = /* recursive: nested arrays of numbers (uncertain tokens) */
    "root ::= arr\n"
    "arr ::= \"[\" (val (\", \" val)*)? \"]\"\n"
    "val ::= [0-9]+ | arr\n";
static const char *const g_answer = "root ::= (\"yes\" | \"no\") \".\"";
static const char *const g_nest = "root ::= \"(\" root \")\" | \"x\"";

static token_grammar_t *grammar(const char *gbnf)
{
    token_grammar_t *tg;
    if (gcache_get(cache, gbnf, strlen(gbnf), &tg))
        fail_msg("grammar: %s", deras_errmsg());
    return token_grammar_retain(tg);
}

static int encode(const char *text, int32_t *ids, int cap)
{
    size_t n;
    if (tokenizer_encode(tok, text, strlen(text), true, true, ids, (size_t)cap, &n))
        fail_msg("encode: %s", deras_errmsg());
    return (int)n;
}

static engine_t *engine_with(outputs *o, bool spec, bool inline_masks, int max_seqs)
{
    engine_opts eo;
    assert_int_equal(loader_engine_opts(ld, &eo), DERAS_OK);
    eo.cb = (engine_callbacks){on_token, on_finish, o};
    eo.inline_masks = inline_masks;
    eo.max_seqs = max_seqs;
    if (spec) {
        spec_opts_default(&eo.spec);
        eo.spec.kind = SPEC_NGRAM;
        eo.spec.k = 4;
        eo.spec.max_batch = 0;
    }
    engine_t *e = NULL;
    if (engine_new(loader_model(ld), &eo, &e))
        fail_msg("engine_new: %s", deras_errmsg());
    return e;
}

static void run(engine_t *e)
{
    while (engine_has_work(e)) {
        int n;
        if (engine_step(e, &n))
            fail_msg("engine_step: %s", deras_errmsg());
        if (engine_check(e))
            fail_msg("engine_check: %s", deras_errmsg());
    }
}

typedef struct req {
    const char *prompt, *gbnf;  /* gbnf NULL: free */
    int max_tokens, n;
    float temperature;
    uint64_t seed;
    bool ignore_eos;
} req;

static const req reqs[] = {
    {"The date of the first moon landing, in ISO format, was ", g_date, 16, 1, 0, 0, false},
    {"Write a JSON object describing a person named Alice who is 31:\n", g_person, 48, 1, 0, 0,
     false},
    {"A list of lists of small numbers in JSON: ", g_list, 40, 1, 0, 0, false},
    {"Is the sky blue? Answer: ", g_answer, 8, 1, 0, 0, false},
    {"Once upon a time", NULL, 24, 1, 0, 0, false},
    {"Write a JSON object describing a person named Bob who is 40:\n", g_person, 48, 2, 0.8f,
     7, false},
    {"A list of lists of small numbers in JSON: ", g_list, 40, 2, 0.8f, 11, false},
    {"The capital of France is", NULL, 24, 2, 0.8f, 5, false},
    {"Is water wet? Answer: ", g_answer, 8, 1, 0, 0, true},
};
#define N_REQS (int)(sizeof reqs / sizeof reqs[0])

static void add(engine_t *e, int id, const req *q)
{
    int32_t prompt[256];
    engine_request r = {.id = (uint64_t)id, .prompt = prompt,
                        .n_prompt = encode(q->prompt, prompt, 256)};
    req_params_init(&r.params);
    sampling_params_default(&r.params.sp);
    r.params.sp.temperature = q->temperature;
    r.params.sp.n_logprobs = 2;
    r.params.max_tokens = q->max_tokens;
    r.params.n = q->n;
    r.params.seed = q->seed;
    r.params.ignore_eos = q->ignore_eos;
    r.grammar = q->gbnf ? grammar(q->gbnf) : NULL;
    if (engine_add(e, &r))
        fail_msg("engine_add %d: %s", id, deras_errmsg());
    token_grammar_destroy(&r.grammar); /* the engine holds its own */
}

/* The sample's bytes against its grammar: complete when it stopped, a prefix otherwise. */
static void check_output(const req *q, const out_seq *s, int id, int k)
{
    assert_int_equal(s->finished, 1);
    assert_int_equal(s->error, PE_NONE);
    if (!q->gbnf)
        return;
    char text[MAX_GEN * 64];
    size_t len = 0;
    for (int i = 0; i < s->n && i < MAX_GEN; i++) {
        if (tokenizer_is_special(tok, s->tokens[i]))
            continue;
        size_t n;
        const char *b = tokenizer_token_bytes(tok, s->tokens[i], &n);
        memcpy(text + len, b, n);
        len += n;
    }
    grammar_t *g;
    assert_int_equal(grammar_from_gbnf(q->gbnf, strlen(q->gbnf), NULL, &g), DERAS_OK);
    bool prefix, complete;
    assert_int_equal(grammar_match_bytes(g, text, len, &prefix, &complete), DERAS_OK);
    grammar_destroy(&g);
    printf("  request %d.%d (%s, %d tokens): %.*s\n", id, k, finish_reason_name(s->why), s->n,
           (int)len, text);
    if (s->why == FINISH_STOP && !complete)
        fail_msg("request %d.%d stopped with an incomplete sentence: '%.*s'", id, k, (int)len,
                 text);
    if (!prefix)
        fail_msg("request %d.%d left its grammar: '%.*s'", id, k, (int)len, text);
}

/* got against ref, sample by sample: equal, or apart only after a near tie of ref.
 * greedy_only: seeded samples are left out (speculation keeps their law, not their draws). */
static void same(const outputs *ref, const outputs *got, const char *what, bool greedy_only)
{
    for (int id = 0; id < N_REQS; id++)
        for (int k = 0; k < reqs[id].n && !(greedy_only && reqs[id].temperature > 0); k++) {
            const out_seq *a = &ref->s[id][k], *b = &got->s[id][k];
            int i = 0;
            while (i < a->n && i < b->n && a->tokens[i] == b->tokens[i])
                i++;
            if (i == a->n && i == b->n && a->why == b->why)
                continue;
            if (reqs[id].temperature == 0 && i < a->n && i < b->n &&
                a->margin[i] < test_near_tie()) {
                printf("  %s: request %d diverges at token %d after a near tie\n", what, id, i);
                continue;
            }
            fail_msg("%s: request %d.%d differs at token %d (%d vs %d tokens, %s vs %s)", what,
                     id, k, i, b->n, a->n, finish_reason_name(b->why), finish_reason_name(a->why));
        }
}

static void run_alone(outputs *o)
{
    memset(o, 0, sizeof *o);
    engine_t *e = engine_with(o, false, false, 4);
    for (int i = 0; i < N_REQS; i++) {
        add(e, i, &reqs[i]);
        run(e);
    }
    engine_destroy(&e);
}

static void run_batched(outputs *o, bool spec, bool inline_masks)
{
    memset(o, 0, sizeof *o);
    engine_t *e = engine_with(o, spec, inline_masks, 8);
    for (int i = 0; i < N_REQS; i++)
        add(e, i, &reqs[i]);
    run(e);
    engine_destroy(&e);
}

static outputs alone, got;

static void test_alone_valid(void **state)
{
    (void)state;
    run_alone(&alone);
    for (int id = 0; id < N_REQS; id++)
        for (int k = 0; k < reqs[id].n; k++)
            check_output(&reqs[id], &alone.s[id][k], id, k);
    /* ignore_eos: the grammar's completion still ends it */
    assert_int_equal(alone.s[N_REQS - 1][0].why, FINISH_STOP);
}

static void test_batched_same(void **state)
{
    (void)state;
    run_batched(&got, false, false);
    same(&alone, &got, "batched", false);
    for (int id = 0; id < N_REQS; id++)
        for (int k = 0; k < reqs[id].n; k++)
            check_output(&reqs[id], &got.s[id][k], id, k);
}

static void test_inline_same(void **state)
{
    (void)state;
    run_batched(&got, false, true);
    same(&alone, &got, "inline masks", false);
}

static void test_speculative_same(void **state)
{
    (void)state;
    run_batched(&got, true, false);
    same(&alone, &got, "speculative", true);
    for (int id = 0; id < N_REQS; id++)
        for (int k = 0; k < reqs[id].n; k++)
            check_output(&reqs[id], &got.s[id][k], id, k);
}

/* The greedy requests in a batch of 8 over a cache of 12 blocks: preemptions happen. */
static void test_preemption_same(void **state)
{
    (void)state;
    memset(&got, 0, sizeof got);
    loader_t *small = NULL;
    loader_opts lo = {.model = test_model_path(), .device = test_backend_spec(), .threads = 2,
                      .max_seqs = 8, .max_batch_tokens = 256, .max_live_seqs = 32,
                      .model_only = false};
    if (loader_open(&lo, &small) || loader_size_seqs(small, 1, 12 * 16 - 16) ||
        loader_build_model(small))
        fail_msg("loader: %s", deras_errmsg());
    loader_t *keep = ld;
    ld = small;
    engine_t *e = engine_with(&got, false, false, 8);
    for (int i = 0; i < N_REQS; i++)
        add(e, i, &reqs[i]);
    run(e);
    engine_stats st;
    engine_get_stats(e, &st);
    printf("  preemptions: %llu\n", (unsigned long long)st.preemptions);
    engine_destroy(&e);
    ld = keep;
    loader_destroy(&small);
    same(&alone, &got, "preempted", false);
}

/* The empty sentence: ends with no token, without a pass. A forced nesting past the
 * matcher's depth: PE_GRAMMAR_BUDGET for both samples, and the engine serves on. */
static void test_edges(void **state)
{
    (void)state;
    outputs *o = calloc(1, sizeof *o);
    engine_t *e = engine_with(o, false, false, 4);
    int32_t prompt[64];
    engine_request r = {.id = 0, .prompt = prompt, .n_prompt = encode("Hello", prompt, 64)};
    req_params_init(&r.params);
    sampling_params_default(&r.params.sp);
    r.params.max_tokens = 8;
    r.grammar = grammar("root ::= \"\"");
    assert_int_equal(engine_add(e, &r), DERAS_OK);
    token_grammar_destroy(&r.grammar);
    run(e);
    assert_int_equal(o->s[0][0].finished, 1);
    assert_int_equal(o->s[0][0].n, 0);
    assert_int_equal(o->s[0][0].why, FINISH_STOP);

    r.id = 1;
    r.params.max_tokens = 400;
    r.params.n = 2;
    int32_t open = tokenizer_find(tok, "(");
    assert_true(open >= 0);
    assert_int_equal(logit_bias_add(&r.params.sp.logit_bias, open, 100.0f), DERAS_OK);
    r.grammar = grammar(g_nest);
    assert_int_equal(engine_add(e, &r), DERAS_OK);
    token_grammar_destroy(&r.grammar);
    r.id = 2; /* a free request alongside */
    r.params.n = 1;
    r.params.max_tokens = 8;
    r.params.sp.logit_bias.n = 0;
    assert_int_equal(engine_add(e, &r), DERAS_OK);
    run(e);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(o->s[1][k].finished, 1);
        assert_int_equal(o->s[1][k].why, FINISH_ABORT);
        assert_int_equal(o->s[1][k].error, PE_GRAMMAR_BUDGET);
    }
    printf("  nesting ended after %d tokens: %s\n", o->s[1][0].n, deras_errmsg());
    assert_int_equal(o->s[2][0].finished, 1);
    assert_int_equal(o->s[2][0].error, PE_NONE);
    engine_destroy(&e);
    free(o);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    loader_opts lo = {.model = test_model_path(), .device = test_backend_spec(), .threads = 2,
                      .max_seqs = 8, .max_batch_tokens = 256, .max_live_seqs = 32};
    spec_opts_default(&lo.spec);
    lo.spec.kind = SPEC_NGRAM; /* logits rows for drafts */
    lo.spec.k = 4;
    if (loader_open(&lo, &ld) || loader_size_seqs(ld, 16, 512) || loader_build_model(ld) ||
        loader_tokenizer(ld, &tok)) {
        fprintf(stderr, "loader: %s\n", deras_errmsg());
        return 1;
    }
    engine_opts eo;
    loader_engine_opts(ld, &eo);
    if (gcache_new(tok, model_get_config(loader_model(ld))->vocab_size, eo.eog_ids, eo.n_eog, 0,
                   &cache)) {
        fprintf(stderr, "gcache: %s\n", deras_errmsg());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alone_valid),      cmocka_unit_test(test_batched_same),
        cmocka_unit_test(test_inline_same),      cmocka_unit_test(test_speculative_same),
        cmocka_unit_test(test_preemption_same),  cmocka_unit_test(test_edges),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    gcache_destroy(&cache);
    loader_destroy(&ld);
    return rc;
}
