/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda_model.c - the whole forward pass on the CUDA backend (engine/model.c unchanged)
 * against Hugging Face transformers' logits for the tiny reference models in tests/data/tiny
 * (GQA, MQA, MHA, llama3 and linear RoPE scaling, Qwen2 biases, Mistral sliding window,
 * tied and separate heads, F32/BF16/F16 safetensors, GGUF F32/Q8_0/Q4_1).
 *
 * Per model and element type: one-shot prefill (logits at every position), then the same
 * sequence as chunked prefill (5, 1, 7 tokens) followed by single-token decode steps, each
 * against transformers; then the greedy continuation, compared token by token while the
 * reference's margin between its first and second choice is at least 0.5 (beyond a close
 * call, bf16 rounding may legitimately pick the other token, and later tokens diverge).
 *
 * Tolerance: relative L2 of a position's logits 1e-2 for fp16 and 8 times that, 8e-2, for
 * bf16, which keeps 3 fewer mantissa bits. The GPU keeps weights and every activation in
 * bf16/fp16 (2^-9 / 2^-12 relative per rounding, a dozen roundings per layer, two or three
 * layers, amplified by the final norm and LM head); the CPU reference path is f32 and
 * matches transformers to 1e-4. First H100 run (2026-11-25), worst position over 12 models:
 * fp16 7.1e-3 (median 2e-3), bf16 5.8e-2 (median 1.7e-2): the bf16 errors are 8-12 times
 * the fp16 ones model by model, as pure rounding predicts, while a wrong op, index or mask
 * gives errors of order 1 in both.
 *
 * These tiny models have head dims 8 and 16, so attention runs the generic kernel; the
 * tensor-core kernels are covered by test_cuda_attention.
 *
 * The test model (SmolLM2-135M Q4_1, head dim 64, 30 layers; `$DERAS_TEST_MODEL`, skipped
 * when absent) against transformers' f32 reference (tests/data/smollm2): last-position
 * logits of every reference prompt within relative L2 0.1 (bf16) / 0.02 (fp16): thirty
 * layers of the same per-rounding error as above; and the 32-token greedy continuation
 * token for token up to the first step where the reference's top-2 margin is under
 * SMOLLM2_NEAR_TIE (after a near-tie, bf16 may legitimately take the other branch; such
 * stops are counted and printed, never hidden).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>

#include "common/checkpoint/checkpoint.h"
#include "gpu_test.h"
#include "ref_json.h"
#include "engine/model.h"

typedef struct runner {
    checkpoint_t *ck;
    model_t *m;
    int32_t *table;
    int vocab;
} runner;

static void step(runner *r, const int32_t *tokens, int start, int n, float *out)
{
    int32_t q_start[2] = {0, n}, ctx = start + n;
    int32_t *rows = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++)
        rows[i] = i;
    model_batch bt = {n, tokens + start, 1, q_start, &ctx, r->table, n, rows, 0, NULL};
    if (model_forward(r->m, &bt, out))
        fail_msg("model_forward: %s", deras_errmsg());
    free(rows);
}

static int n_failed; /* checks over their bound; the test fails at its end, after every model */

/* Checks every position and prints the worst and the median error, so a run shows how far
 * inside (or outside) the bound each model lands; a miss is counted, not fatal, so one run
 * shows every model. */
static void expect_logits(const char *what, int dt, const float *got, const float *want, int n,
                          int vocab)
{
    const double tol = dt == CUDA_DTYPE_FP16 ? 1e-2 : 8e-2;
    double *e = calloc((size_t)n + 1, sizeof(double)), worst = 0;
    int at = 0;
    for (int p = 0; p < n; p++) {
        e[p] = test_rel_l2(got + (size_t)p * vocab, want + (size_t)p * vocab, (size_t)vocab);
        if (!(e[p] <= worst))
            worst = e[p], at = p;
    }
    for (int i = 1; i < n; i++) /* insertion sort for the median: n is a few dozen */
        for (int j = i; j > 0 && e[j - 1] > e[j]; j--) {
            double t = e[j];
            e[j] = e[j - 1], e[j - 1] = t;
        }
    printf("    %-40s %s: relative L2 worst %.3g (position %d), median %.3g, bound %.3g\n", what,
           gpu_dtype_name(dt), worst, at, e[n / 2], tol);
    free(e);
    if (!(worst <= tol)) {
        printf("FAILED: %s (%s): position %d: logits relative L2 %.3g against transformers, "
               "expected <= %.3g\n",
               what, gpu_dtype_name(dt), at, worst, tol);
        n_failed++;
    }
}

static void tiny_models_on_cuda_match_transformers(void **state)
{
    char *dir = test_data_path("tiny");
    char path[4096];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref = ref_json_load(path), *models = json_object_get(ref, "models");
    assert_true(json_array_size(models) >= 5);
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = NULL;
        GPU_OK(backend_new(gpu_spec(dt), 0, &g));
        size_t i;
        json_t *mj;
        json_array_foreach(models, i, mj) {
            const char *name = json_string_value(json_object_get(mj, "name"));
            int n, n_greedy, vocab = (int)json_integer_value(json_object_get(mj, "vocab_size"));
            int32_t *ids = ref_json_ids(json_object_get(mj, "input_ids"), &n);
            int32_t *greedy = ref_json_ids(json_object_get(mj, "greedy"), &n_greedy);
            json_t *margins = json_object_get(mj, "greedy_margins");
            snprintf(path, sizeof path, "%s/%s", dir,
                     json_string_value(json_object_get(mj, "logits_file")));
            size_t len = 0;
            float *want = (float *)test_read_file(path, &len);
            if (!want || len != (size_t)n * vocab * sizeof(float))
                fail_msg("%s: expected %zu bytes of logits", path, (size_t)n * vocab * sizeof(float));
            snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(mj, "path")));

            runner r = {0};
            const int cap = n + n_greedy, bs = 4, nb = (cap + bs - 1) / bs;
            if (checkpoint_open(path, &r.ck))
                fail_msg("checkpoint_open(%s): %s", path, deras_errmsg());
            model_opts mo = {.max_batch_tokens = cap, .max_seqs = 1, .max_logits = cap,
                             .block_size = bs, .n_kv_blocks = nb, .max_blocks_per_seq = nb,
                             .kv_dtype = gpu_kv_dtype(dt)};
            if (model_new(r.ck, g, &mo, &r.m))
                fail_msg("model_new(%s) on %s: %s", path, backend_name(g), deras_errmsg());
            r.table = malloc((size_t)nb * sizeof(int32_t));
            for (int b = 0; b < nb; b++)
                r.table[b] = nb - 1 - b;
            r.vocab = vocab;
            printf("  %s (%s)\n", name, gpu_dtype_name(dt));

            float *got = malloc((size_t)cap * vocab * sizeof(float));
            step(&r, ids, 0, n, got);
            char what[160];
            snprintf(what, sizeof what, "%s one-shot prefill", name);
            expect_logits(what, dt, got, want, n, vocab);

            /* chunked prefill 5, 1, 7, then one token per step to the end */
            int start = 0;
            const int chunks[3] = {5, 1, 7};
            for (int c = 0; c < 3 && start < n; c++) {
                int m = chunks[c] < n - start ? chunks[c] : n - start;
                step(&r, ids, start, m, got + (size_t)start * vocab);
                start += m;
            }
            for (; start < n; start++)
                step(&r, ids, start, 1, got + (size_t)start * vocab);
            snprintf(what, sizeof what, "%s chunked prefill + decode steps", name);
            expect_logits(what, dt, got, want, n, vocab);

            /* greedy continuation while the reference's choice is clear */
            int32_t *seq = malloc((size_t)cap * sizeof(int32_t));
            memcpy(seq, ids, (size_t)n * sizeof(int32_t));
            float *last = got + (size_t)(n - 1) * vocab;
            for (int k = 0; k < n_greedy; k++) {
                int32_t best = 0;
                for (int v = 1; v < vocab; v++)
                    if (last[v] > last[best])
                        best = v;
                double margin = json_real_value(json_array_get(margins, (size_t)k));
                if (margin < 0.5)
                    break;
                if (best != greedy[k])
                    fail_msg("%s (%s): greedy token %d is %d, transformers gave %d (margin %.3f)",
                             name, gpu_dtype_name(dt), k, best, greedy[k], margin);
                seq[n + k] = best;
                if (k + 1 < n_greedy) {
                    step(&r, seq, n + k, 1, got);
                    last = got;
                }
            }
            free(seq);
            free(got);
            free(want);
            free(ids);
            free(greedy);
            model_destroy(&r.m);
            checkpoint_destroy(&r.ck);
            free(r.table);
        }
        backend_destroy(&g);
    }
    json_decref(ref);
    free(dir);
    if (n_failed)
        fail_msg("%d logits checks over their bound (listed above)", n_failed);
}

#define SMOLLM2_NEAR_TIE 0.5

static void test_model_on_cuda_matches_transformers(void **state)
{
    (void)state;
    const char *model_path = test_model_path();
    char *dir = test_data_path("smollm2"), path[4096];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    json_t *ref = ref_json_load(path), *prompts = json_object_get(ref, "prompts");
    const int vocab = (int)json_integer_value(json_object_get(ref, "vocab_size"));
    const size_t n_prompts = json_array_size(prompts);
    snprintf(path, sizeof path, "%s/%s", dir,
             json_string_value(json_object_get(ref, "logits_file")));
    size_t len = 0;
    float *want = (float *)test_read_file(path, &len);
    if (!want || len != n_prompts * vocab * sizeof(float))
        fail_msg("%s: expected %zu bytes of logits", path, n_prompts * vocab * sizeof(float));
    int cap = 0;
    for (size_t i = 0; i < n_prompts; i++) {
        int n = (int)json_array_size(json_object_get(json_array_get(prompts, i), "ids"));
        cap = n + 32 > cap ? n + 32 : cap;
    }
    float *got = malloc((size_t)vocab * sizeof(float));
    int32_t *seq = malloc((size_t)cap * sizeof(int32_t));
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = NULL;
        GPU_OK(backend_new(gpu_spec(dt), 0, &g));
        const double tol = dt == CUDA_DTYPE_FP16 ? 2e-2 : 1e-1;
        runner r = {0};
        const int bs = 16, nb = (cap + bs - 1) / bs;
        if (checkpoint_open(model_path, &r.ck))
            fail_msg("checkpoint_open(%s): %s", model_path, deras_errmsg());
        model_opts mo = {.max_batch_tokens = cap, .max_seqs = 1, .max_logits = 1,
                         .block_size = bs, .n_kv_blocks = nb, .max_blocks_per_seq = nb,
                         .kv_dtype = gpu_kv_dtype(dt)};
        if (model_new(r.ck, g, &mo, &r.m))
            fail_msg("model_new(%s) on %s: %s", model_path, backend_name(g), deras_errmsg());
        r.table = malloc((size_t)nb * sizeof(int32_t));
        for (int b = 0; b < nb; b++)
            r.table[b] = b;
        double worst = 0;
        int equal = 0, near_stops = 0, failed = 0;
        size_t i;
        json_t *pj;
        json_array_foreach(prompts, i, pj) {
            const char *name = json_string_value(json_object_get(pj, "name"));
            int n, n_greedy;
            int32_t *ids = ref_json_ids(json_object_get(pj, "ids"), &n);
            int32_t *greedy = ref_json_ids(json_object_get(pj, "greedy"), &n_greedy);
            json_t *margins = json_object_get(pj, "greedy_margins");
            memcpy(seq, ids, (size_t)n * sizeof(int32_t));
            int32_t q_start[2] = {0, n}, ctx = n, last = n - 1;
            model_batch bt = {n, seq, 1, q_start, &ctx, r.table, 1, &last, 0, NULL};
            if (model_forward(r.m, &bt, got))
                fail_msg("model_forward: %s", deras_errmsg());
            double e = test_rel_l2(got, want + i * (size_t)vocab, (size_t)vocab);
            worst = e > worst ? e : worst;
            if (!(e <= tol)) {
                printf("FAILED: smollm2 %s (%s): last-position relative L2 %.3g > %.3g\n", name,
                       gpu_dtype_name(dt), e, tol);
                failed++;
            }
            int k = 0;
            const char *how = "all equal";
            for (; k < n_greedy; k++) {
                int32_t best = 0;
                for (int v = 1; v < vocab; v++)
                    if (got[v] > got[best])
                        best = v;
                double margin = json_real_value(json_array_get(margins, (size_t)k));
                if (best != greedy[k]) {
                    if (margin < SMOLLM2_NEAR_TIE) {
                        how = "near-tie";
                        near_stops++;
                    } else {
                        how = "FAILED";
                        failed++;
                        printf("FAILED: smollm2 %s (%s): greedy token %d is %d, transformers "
                               "gave %d (their top-2 margin %.3f)\n",
                               name, gpu_dtype_name(dt), k, best, greedy[k], margin);
                    }
                    break;
                }
                seq[n + k] = best;
                if (k + 1 == n_greedy)
                    break;
                int32_t qs[2] = {0, 1}, c1 = n + k + 1, row = 0;
                model_batch st = {1, seq + n + k, 1, qs, &c1, r.table, 1, &row, 0, NULL};
                if (model_forward(r.m, &st, got))
                    fail_msg("model_forward: %s", deras_errmsg());
            }
            int same = strcmp(how, "all equal") ? k : n_greedy;
            equal += same;
            printf("    smollm2 %-16s %s: rel L2 %.3g, %2d/%d greedy tokens equal (%s)\n", name,
                   gpu_dtype_name(dt), e, same, n_greedy, how);
            free(ids);
            free(greedy);
        }
        printf("  smollm2 on %s: %zu prompts, worst last-position rel L2 %.3g (bound %.3g), %d "
               "greedy tokens equal before the first difference, %d prompts stopped at a "
               "near-tie (reference margin < %.1f)\n",
               gpu_dtype_name(dt), n_prompts, worst, tol, equal, near_stops, SMOLLM2_NEAR_TIE);
        model_destroy(&r.m);
        checkpoint_destroy(&r.ck);
        free(r.table);
        backend_destroy(&g);
        if (failed)
            fail_msg("smollm2 (%s): %d checks failed (listed above)", gpu_dtype_name(dt), failed);
    }
    free(got);
    free(seq);
    free(want);
    json_decref(ref);
    free(dir);
}

int main(void)
{
    gpu_require_device();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_models_on_cuda_match_transformers),
        cmocka_unit_test(test_model_on_cuda_matches_transformers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
