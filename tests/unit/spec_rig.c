/* SPDX-License-Identifier: Apache-2.0 */
/* spec_rig.c - the engine rig of test_speculative (see spec_rig.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/base/status.h"
#include "spec_rig.h"
#include "test_kv.h"
#include "test_util.h"

#define NEAR_TIE test_near_tie()

static void on_token(void *ctx, uint64_t id, int index, const sample_result *r)
{
    outputs *o = ctx;
    out_seq *s = &o->s[id % MAX_REQS][index];
    if (s->n < MAX_GEN) {
        s->tokens[s->n] = r->token;
        s->margin[s->n] = r->n_top >= 2 ? r->top_logprobs[0] - r->top_logprobs[1] : INFINITY;
    }
    s->n++;
}

static void on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    outputs *o = ctx;
    out_seq *s = &o->s[id % MAX_REQS][index];
    s->finished++;
    s->why = end->why;
    s->spec = end->spec;
    if (end->n_generated != s->n)
        fail_msg("request %llu sample %d: on_finish says %d tokens, on_token reported %d",
                 (unsigned long long)id, index, end->n_generated, s->n);
}

void rig_open(rig *g, const char *path, int n_kv_blocks, int max_seqs, int max_tokens,
              int k)
{
    memset(g, 0, sizeof *g);
    if (checkpoint_open(path, &g->ck))
        fail_msg("%s", deras_errmsg());
    assert_int_equal(backend_new(test_backend_spec(), 2, &g->be), DERAS_OK);
    test_matmul_mode(g->be);
    model_opts mo = {.max_batch_tokens = max_tokens, .max_seqs = max_seqs,
                     .max_logits = max_seqs * (1 + k), .block_size = 16,
                     .n_kv_blocks = n_kv_blocks, .max_blocks_per_seq = 64, .max_copies = max_seqs,
                     .kv_dtype = test_kv_dtype()};
    if (model_new(g->ck, g->be, &mo, &g->m))
        fail_msg("%s", deras_errmsg());
    g->path = path;
    g->vocab = checkpoint_config(g->ck)->vocab_size;
    g->max_seqs = max_seqs;
    g->max_tokens = max_tokens;
    g->k = k;
}

void rig_close(rig *g)
{
    model_destroy(&g->m);
    backend_destroy(&g->be);
    checkpoint_destroy(&g->ck);
}

/* An engine with proposer `so` (NULL: none); *drafter gets the draft model it needs. */
engine_t *engine_for(rig *g, outputs *o, const spec_opts *so, bool prefix,
                     model_t **drafter)
{
    static const int32_t eog[1] = {2};
    engine_opts eo = {.max_seqs = g->max_seqs, .max_batch_tokens = g->max_tokens,
                      .max_live_seqs = 256, .prefix_caching = prefix, .eog_ids = eog,
                      .n_eog = 1, .cb = {on_token, on_finish, o}};
    *drafter = NULL;
    if (so) {
        eo.spec = *so;
        if ((so->kind == SPEC_SELF || so->kind == SPEC_DRAFT) &&
            spec_drafter_load(so, g->m, g->be, drafter))
            fail_msg("loading the drafter: %s", deras_errmsg());
        eo.drafter = *drafter;
    }
    engine_t *e = NULL;
    if (engine_new(g->m, &eo, &e))
        fail_msg("engine_new: %s", deras_errmsg());
    return e;
}

/* Step until idle, checking the KV accounting after every step. */
void run_to_end(engine_t *e)
{
    int steps = 0;
    while (engine_has_work(e)) {
        int n = 0;
        if (engine_step(e, &n))
            fail_msg("engine_step: %s", deras_errmsg());
        if (n == 0)
            fail_msg("engine made no progress with work queued");
        if (engine_check(e))
            fail_msg("after step %d: %s", steps, deras_errmsg());
        steps++;
    }
    engine_stats st;
    engine_get_stats(e, &st);
    if (st.kv_blocks_used != 0)
        fail_msg("%d KV blocks still used after every request ended, expected 0",
                 st.kv_blocks_used);
}

spec_opts proposer(spec_kind kind, int layers, const char *path, int k)
{
    spec_opts so;
    spec_opts_default(&so);
    so.kind = kind;
    so.self_layers = layers;
    so.draft_path = path;
    so.k = k;
    so.max_batch = 0; /* always speculate: these tests are about exactness */
    return so;
}

/* Greedy requests for every prompt, run through the engine with `so`; outputs and stats. */
void run_greedy(rig *g, const prompts *pr, const spec_opts *so, int max_out, outputs *o,
                engine_stats *st)
{
    memset(o, 0, sizeof *o);
    model_t *drafter;
    engine_t *e = engine_for(g, o, so, true, &drafter);
    for (int r = 0; r < pr->n; r++) {
        engine_request q = {.id = (uint64_t)r, .prompt = pr->tok[r], .n_prompt = pr->len[r],
                            .params.max_tokens = max_out, .params.n = 1};
        sampling_params_default(&q.params.sp);
        q.params.sp.n_logprobs = 2;
        if (engine_add(e, &q))
            fail_msg("engine_add: %s", deras_errmsg());
    }
    run_to_end(e);
    engine_get_stats(e, st);
    engine_destroy(&e);
    model_destroy(&drafter);
    /* each sample's own counters (on_finish) add up to the engine's */
    spec_counters sum = {0};
    for (int r = 0; r < pr->n; r++) {
        sum.proposed += o->s[r][0].spec.proposed;
        sum.accepted += o->s[r][0].spec.accepted;
        sum.verifications += o->s[r][0].spec.verifications;
    }
    if (sum.proposed != st->spec.proposed || sum.accepted != st->spec.accepted ||
        sum.verifications != st->spec.verifications)
        fail_msg("per-sample speculation counters add up to %llu/%llu/%llu, the engine's are "
                 "%llu/%llu/%llu", (unsigned long long)sum.proposed,
                 (unsigned long long)sum.accepted, (unsigned long long)sum.verifications,
                 (unsigned long long)st->spec.proposed, (unsigned long long)st->spec.accepted,
                 (unsigned long long)st->spec.verifications);
}

/* Compare with the reference; returns near-tie divergences, fails on any other. */
int compare(const prompts *pr, const outputs *ref, const outputs *got, const char *what)
{
    int near = 0;
    for (int r = 0; r < pr->n; r++) {
        const out_seq *a = &ref->s[r][0], *b = &got->s[r][0];
        if (b->finished != 1)
            fail_msg("%s: request %d finished %d times, expected once", what, r, b->finished);
        int k = 0;
        while (k < a->n && k < b->n && k < MAX_GEN && a->tokens[k] == b->tokens[k])
            k++;
        if (k == a->n && k == b->n) {
            if (a->why != b->why)
                fail_msg("%s: request %d: finish %s, without speculation %s", what, r,
                         finish_reason_name(b->why), finish_reason_name(a->why));
            continue;
        }
        if (k < a->n && k < b->n && a->margin[k] < NEAR_TIE) {
            near++;
            printf("  %s: request %d diverges at token %d after a near-tie (top-2 margin %.2e)\n",
                   what, r, k, a->margin[k]);
            continue;
        }
        fail_msg("%s: request %d (prompt %d tokens): token %d is %d, without speculation %d "
                 "(top-2 margin %.3g); lengths %d vs %d", what, r, pr->len[r], k,
                 k < b->n ? b->tokens[k] : -1, k < a->n ? a->tokens[k] : -1,
                 k < a->n ? a->margin[k] : 0.0, b->n, a->n);
    }
    return near;
}

void report(const char *what, const engine_stats *st, int n_prompts, int near)
{
    const spec_counters *s = &st->spec;
    printf("  %-28s %d prompts: identical to non-speculative greedy (%d near-tie divergences); "
           "%llu drafts proposed, %llu accepted (acceptance %.1f%%), %llu verifications, "
           "mean accepted length %.2f, %llu steps\n",
           what, n_prompts, near, (unsigned long long)s->proposed, (unsigned long long)s->accepted,
           s->proposed ? 100.0 * (double)s->accepted / (double)s->proposed : 0.0,
           (unsigned long long)s->verifications,
           s->verifications ? (double)s->accepted / (double)s->verifications : 0.0,
           (unsigned long long)st->steps);
}

const char *engine_model(void)
{
    static char *p;
    if (!p)
        p = test_data_path("engine-llama");
    return p;
}
