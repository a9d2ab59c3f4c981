/* SPDX-License-Identifier: Apache-2.0 */
/* test_model_reference.c - the forward pass against Hugging Face transformers.
 *
 * Reference data (tests/data, produced once by tests/ref/make_model_reference.py and
 * make_tiny_models.py, never by CI):
 *  - tiny/: random-weight models covering every architecture feature (GQA, MQA, MHA,
 *    llama3 and linear rope scaling, Qwen2 biases, Mistral sliding window, tied and
 *    separate heads; safetensors F32/BF16/F16, sharded, GGUF F32/Q8_0) with logits at
 *    every position of a fixed token sequence and a greedy continuation.
 *  - smollm2/: the test model (Q4_1 GGUF, which transformers dequantizes) with
 *    last-position logits of at least 8 prompts and 32-token greedy continuations.
 *
 * Tolerances. Both sides compute in f32 from identical (dequantized) weights, so they
 * differ only by summation order: relative L2 ~1e-6 per layer, growing through 30 layers
 * to ~1e-5. The bound for the test model is 1e-3; the tiny models, with two
 * layers, are held to 1e-4. Chunked prefill and decode reuse the same math over the
 * paged cache and must agree with one-shot prefill to 1e-5. The same weights stored as
 * GGUF and as safetensors must give bit-identical logits (in the same format).
 *
 * Weights as stored against the dequantized-f32 path (--weight-format f32: every matrix
 * dequantized at load): both compute the same weight values in f32 and differ only in
 * summation order (qmatmul.h's block kernels against its F32 ones), ~1e-7 relative per dot
 * product of 48-1536 terms; 1e-5 relative L2 for the tiny models (2-3 layers) and 1e-4
 * for the test model (30 layers; it is ~5e-6 in practice) leave a factor of 10-20. The
 * test model's greedy continuations must be identical on both paths except after a step
 * whose top-2 margin is below 1e-3 (a near-tie either rounding may break: counted and
 * printed). As stored, weight memory is the file's tensor bytes: the matrices are the
 * file's pages in place, only norms and biases are held in f32. Conversions and odd file
 * offsets (conversions_and_misaligned_files): F32 converted to Q8_0 at load equals the
 * Q8_0 GGUF gguf-py wrote from the same weights bit for bit; a file whose tensors start at
 * odd offsets (tests/ref/make_misaligned_gguf.py) gives its source's logits bit for bit,
 * F32 copied (its kernels want floats aligned), Q8_0 read in place.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/checkpoint/checkpoint.h"
#include "common/base/status.h"
#include "common/tokenizer/tokenizer.h"
#include "ref_json.h"
#include "test_util.h"
#include "engine/model.h"
#include "model_runner.h"

/* Bytes of the checkpoint's vectors (norms, biases) as stored, and as the model holds them
 * (f32 on the CPU). */
static void vector_bytes(const checkpoint_t *ck, uint64_t *stored, uint64_t *held)
{
    static const enum ckpt_tensor vec[] = {CKPT_OUTPUT_NORM, CKPT_ATTN_NORM, CKPT_FFN_NORM,
                                           CKPT_ATTN_Q_BIAS, CKPT_ATTN_K_BIAS, CKPT_ATTN_V_BIAS};
    *stored = *held = 0;
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++)
        for (int l = 0; l < (vec[i] == CKPT_OUTPUT_NORM ? 1 : checkpoint_config(ck)->n_layers); l++) {
            int64_t rows, cols;
            size_t nb;
            if (!checkpoint_has(ck, vec[i], l))
                continue;
            assert_int_equal(checkpoint_shape(ck, vec[i], l, &rows, &cols), DERAS_OK);
            assert_int_equal(dtype_nbytes(checkpoint_dtype(ck, vec[i], l), cols, &nb), DERAS_OK);
            *stored += nb;
            *held += (uint64_t)cols * sizeof(float);
        }
}

/* As stored on the CPU every matrix is the file's bytes in place: the weights take the
 * file's tensor bytes, with the vectors widened to f32. */
static void expect_file_bytes(const char *name, const runner *r)
{
    uint64_t vs, vh;
    vector_bytes(r->ck, &vs, &vh);
    const uint64_t file = checkpoint_file_bytes(r->ck), w = model_weight_bytes(r->m);
    const uint64_t mapped = model_mapped_bytes(r->m);
    if (mapped != file - vs || w != mapped + vh)
        fail_msg("%s: weights %llu bytes (%llu in place), the file's tensors %llu (vectors %llu "
                 "stored, %llu in f32)", name, (unsigned long long)w, (unsigned long long)mapped,
                 (unsigned long long)file, (unsigned long long)vs, (unsigned long long)vh);
}

/* Logits at every position of ids[0..n) from a fresh runner over path as `convert`. */
static float *all_logits(const char *path, const int32_t *ids, int n, int convert, runner *keep)
{
    runner r;
    runner_open_as(&r, path, n, 4, convert);
    float *out = malloc((size_t)n * r.vocab * sizeof(float));
    runner_step(&r, ids, 0, n, false, out);
    if (keep)
        *keep = r;
    else
        runner_close(&r);
    return out;
}

/* One model of tests/data/tiny/reference.json: its prompt (n ids), vocabulary,
 * transformers' logits at every position (n x vocab, malloc'ed like ids) and its file. */
typedef struct tiny_ref {
    const char *name;
    int n, vocab;
    int32_t *ids;
    float *want;
    char path[4096];
} tiny_ref;

static void tiny_ref_load(const char *dir, const json_t *mj, tiny_ref *t)
{
    t->name = json_string_value(json_object_get(mj, "name"));
    t->vocab = (int)json_integer_value(json_object_get(mj, "vocab_size"));
    t->ids = ref_json_ids(json_object_get(mj, "input_ids"), &t->n);
    snprintf(t->path, sizeof t->path, "%s/%s", dir,
             json_string_value(json_object_get(mj, "logits_file")));
    t->want = load_f32(t->path, (size_t)t->n * t->vocab);
    snprintf(t->path, sizeof t->path, "%s/%s", dir, json_string_value(json_object_get(mj, "path")));
}

static void tiny_models_match_transformers(void **state)
{
    (void)state;
    char *dir = test_data_path("tiny");
    json_t *ref = ref_json_in(dir), *models = json_object_get(ref, "models");
    assert_true(json_array_size(models) >= 5);
    size_t i;
    json_t *mj;
    json_array_foreach(models, i, mj) {
        tiny_ref tr;
        tiny_ref_load(dir, mj, &tr);
        const char *name = tr.name, *path = tr.path;
        const int n = tr.n, vocab = tr.vocab;
        int32_t *ids = tr.ids;
        float *want = tr.want;
        int n_greedy;
        int32_t *greedy = ref_json_ids(json_object_get(mj, "greedy"), &n_greedy);

        runner r;
        runner_open(&r, path, n + n_greedy, 4);
        assert_int_equal(r.vocab, vocab);
        float *got = malloc((size_t)(n + n_greedy) * vocab * sizeof(float));
        /* one-shot prefill, logits at every position */
        runner_step(&r, ids, 0, n, false, got);
        double worst = 0;
        for (int p = 0; p < n; p++) {
            double e = test_rel_l2(got + (size_t)p * vocab, want + (size_t)p * vocab, (size_t)vocab);
            worst = e > worst ? e : worst;
        }
        printf("tiny %-22s %-40s max rel L2 over %d positions: %.2e\n", name, path + strlen(dir) + 1,
               n, worst);
        if (worst > 1e-4)
            fail_msg("%s: logits differ from transformers: max relative L2 %.3g > 1e-4", name, worst);

        /* chunked prefill (5, 1, 7, rest) then the same logits */
        float *chunked = malloc((size_t)n * vocab * sizeof(float));
        int sizes[4] = {5, 1, 7, n - 13}, start = 0;
        for (int c = 0; c < 4; c++) {
            runner_step(&r, ids, start, sizes[c], false, chunked + (size_t)start * vocab);
            start += sizes[c];
        }
        double e = test_rel_l2(chunked, got, (size_t)n * vocab);
        if (e > 1e-5)
            fail_msg("%s: chunked prefill differs from one-shot: relative L2 %.3g", name, e);

        /* greedy continuation */
        int32_t *seq = malloc((size_t)(n + n_greedy) * sizeof(int32_t));
        memcpy(seq, ids, (size_t)n * sizeof(int32_t));
        runner_greedy(&r, seq, n, n_greedy, got);
        for (int g = 0; g < n_greedy; g++)
            if (seq[n + g] != greedy[g])
                fail_msg("%s: greedy token %d is %d, transformers gave %d", name, g, seq[n + g],
                         greedy[g]);

        /* the dequantized-f32 path (see the header for the bound), and the memory */
        expect_file_bytes(name, &r);
        float *f32p = all_logits(path, ids, n, DT_F32, NULL);
        runner_step(&r, ids, 0, n, false, got);
        double ef = test_rel_l2(got, f32p, (size_t)n * vocab);
        printf("tiny %-22s as stored vs the f32 path: rel L2 %.2e; weights %.1f KiB = the "
               "file's tensors (%.1f KiB in place)\n", name, ef, model_weight_bytes(r.m) / 1024.0,
               model_mapped_bytes(r.m) / 1024.0);
        if (ef > 1e-5)
            fail_msg("%s: logits as stored differ from the f32 path's: relative L2 %.3g > 1e-5",
                     name, ef);
        free(f32p);

        /* the same weights as GGUF and as safetensors: bit-identical logits */
        json_t *twin = json_object_get(mj, "same_weights_as");
        if (json_is_string(twin)) {
            size_t k;
            json_t *tj;
            json_array_foreach(models, k, tj) {
                if (strcmp(json_string_value(json_object_get(tj, "name")), json_string_value(twin)))
                    continue;
                char tpath[4096];
                snprintf(tpath, sizeof tpath, "%s/%s", dir, json_string_value(json_object_get(tj, "path")));
                runner t;
                runner_open(&t, tpath, n + n_greedy, 4);
                float *tw = malloc((size_t)n * vocab * sizeof(float));
                runner_step(&t, ids, 0, n, false, tw);
                runner_step(&r, ids, 0, n, false, got);
                /* A GGUF may carry RoPE scaling as stored divisors (rope_freqs.weight) where
                 * the directory has the formula: inverse frequencies then differ in the last
                 * bit, and so may the logits. Weights kept in different formats (an F32
                 * GGUF of an F16 directory: OpenBLAS against qmatmul.h's F16 kernel) are
                 * the same values summed in another order: f32 rounding of dot products of
                 * 48-128 terms, ~1e-7 relative per product, through 2-3 layers, so 1e-5 is
                 * ten times what such a reordering gives here. Otherwise everything must be
                 * bit-identical: the same format is the same arithmetic, in place or not,
                 * GGUF's permuted Q/K rows included. */
                const model_config *ca = checkpoint_config(r.ck), *cb = checkpoint_config(t.ck);
                float fa[MODEL_MAX_HEAD_DIM / 2], fb[MODEL_MAX_HEAD_DIM / 2];
                model_config_rope_inv_freq(ca, fa);
                model_config_rope_inv_freq(cb, fb);
                bool same_rope = !memcmp(fa, fb, (size_t)(ca->head_dim / 2) * sizeof(float));
                bool same_format = !strcmp(json_string_value(json_object_get(mj, "dtype")),
                                           json_string_value(json_object_get(tj, "dtype")));
                double et = test_rel_l2(tw, got, (size_t)n * vocab);
                bool exact = same_rope && same_format;
                double bound = same_format ? 1e-6 : 1e-5;
                if (exact ? memcmp(tw, got, (size_t)n * vocab * sizeof(float)) != 0 : et > bound)
                    fail_msg("%s and %s hold the same weights but their logits differ (rel L2 %.3g)",
                             name, json_string_value(twin), et);
                printf("tiny %-22s %s logits to %s (rel L2 %.2e)\n", name,
                       exact ? "bit-identical"
                       : !same_format ? "within 1e-5 (the same values in another format)"
                                      : "within 1e-6 (rope divisors vs formula)",
                       json_string_value(twin), et);
                free(tw);
                runner_close(&t);
            }
        }
        runner_close(&r);
        free(ids), free(greedy), free(want), free(got), free(chunked), free(seq);
    }
    json_decref(ref);
    free(dir);
}

static void expect_same_logits(const char *a, int conv_a, const char *b, int conv_b,
                               const int32_t *ids, int n, int vocab)
{
    runner ra, rb;
    float *la = all_logits(a, ids, n, conv_a, &ra), *lb = all_logits(b, ids, n, conv_b, &rb);
    if (memcmp(la, lb, (size_t)n * vocab * sizeof(float)))
        fail_msg("%s%s%s and %s%s%s: logits differ (rel L2 %.3g), expected bit-identical", a,
                 conv_a != AS_STORED ? " as " : "", conv_a != AS_STORED ? dtype_name(conv_a) : "",
                 b, conv_b != AS_STORED ? " as " : "", conv_b != AS_STORED ? dtype_name(conv_b) : "",
                 test_rel_l2(la, lb, (size_t)n * vocab));
    printf("%s%s%s (%.1f KiB, %.1f in place) = %s%s%s (%.1f KiB, %.1f in place), bit for bit\n",
           strrchr(a, '/') + 1, conv_a != AS_STORED ? " as " : "",
           conv_a != AS_STORED ? dtype_name(conv_a) : "", model_weight_bytes(ra.m) / 1024.0,
           model_mapped_bytes(ra.m) / 1024.0, strrchr(b, '/') + 1,
           conv_b != AS_STORED ? " as " : "", conv_b != AS_STORED ? dtype_name(conv_b) : "",
           model_weight_bytes(rb.m) / 1024.0, model_mapped_bytes(rb.m) / 1024.0);
    runner_close(&ra);
    runner_close(&rb);
    free(la);
    free(lb);
}

static void conversions_and_misaligned_files(void **state)
{
    (void)state;
    char *f32 = test_data_path("tiny/llama-gqa.gguf"), *dir = test_data_path("tiny/llama-gqa");
    char *q8 = test_data_path("tiny/llama-gqa-q8_0.gguf");
    char *f32_odd = test_data_path("tiny/llama-gqa-align1.gguf");
    char *q8_odd = test_data_path("tiny/llama-gqa-q8_0-align1.gguf");
    checkpoint_t *ck = NULL;
    assert_int_equal(checkpoint_open(f32, &ck), DERAS_OK);
    const int vocab = checkpoint_config(ck)->vocab_size;
    checkpoint_destroy(&ck);
    int32_t ids[24];
    for (int i = 0; i < 24; i++)
        ids[i] = (int32_t)((i * 37 + 11) % vocab);
    /* F32 quantized at load = the Q8_0 file gguf-py quantized from the same weights */
    expect_same_logits(f32, DT_Q8_0, q8, AS_STORED, ids, 24, vocab);
    expect_same_logits(dir, DT_Q8_0, q8, AS_STORED, ids, 24, vocab);
    /* a format the file already has is used as stored, not converted */
    expect_same_logits(q8, DT_Q8_0, q8, AS_STORED, ids, 24, vocab);
    /* tensors at odd offsets: F32 copied, Q8_0 in place; the same logits */
    expect_same_logits(f32_odd, AS_STORED, f32, AS_STORED, ids, 24, vocab);
    expect_same_logits(q8_odd, AS_STORED, q8, AS_STORED, ids, 24, vocab);
    runner r;
    runner_open(&r, f32_odd, 8, 4);
    assert_int_equal(model_mapped_bytes(r.m), 0); /* every F32 matrix is misaligned: copied */
    runner_close(&r);
    runner_open(&r, q8_odd, 8, 4);
    expect_file_bytes("llama-gqa-q8_0-align1.gguf", &r);
    runner_close(&r);

    /* conversions that cannot be: a K format is not written; 48 columns are not blocks of 32 */
    model_opts mo = {.max_batch_tokens = 4, .max_seqs = 1, .max_logits = 1, .block_size = 4,
                     .n_kv_blocks = 2, .max_blocks_per_seq = 1, .convert_weights = true,
                     .weight_dtype = DT_Q4_K};
    model_t *m = NULL;
    assert_int_equal(checkpoint_open(f32, &ck), DERAS_OK);
    assert_int_equal(model_new(ck, runner_backend, &mo, &m), DERAS_EUNSUPPORTED);
    assert_non_null(strstr(deras_errmsg(), "Q4_K"));
    mo.weight_dtype = 10; /* Q2_K */
    assert_int_equal(model_new(ck, runner_backend, &mo, &m), DERAS_EUNSUPPORTED);
    assert_null(m);
    checkpoint_destroy(&ck);
    char *mha = test_data_path("tiny/llama-mha-linear"); /* hidden 48 */
    assert_int_equal(checkpoint_open(mha, &ck), DERAS_OK);
    mo.weight_dtype = DT_Q8_0;
    assert_int_equal(model_new(ck, runner_backend, &mo, &m), DERAS_EFORMAT);
    if (!strstr(deras_errmsg(), "48 columns are not whole blocks of Q8_0"))
        fail_msg("Q8_0 of 48 columns: %s", deras_errmsg());
    assert_null(m);
    checkpoint_destroy(&ck);
    free(f32), free(dir), free(q8), free(f32_odd), free(q8_odd), free(mha);
}

static void test_model_matches_transformers(void **state)
{
    (void)state;
    const char *model_path = test_model_path();
    char *dir = test_data_path("smollm2");
    char path[4096];
    json_t *ref = ref_json_in(dir), *prompts = json_object_get(ref, "prompts");
    int vocab = (int)json_integer_value(json_object_get(ref, "vocab_size"));
    size_t n_prompts = json_array_size(prompts);
    assert_true(n_prompts >= 8);
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(ref, "logits_file")));
    float *want = load_f32(path, n_prompts * vocab);

    int cap = 0;
    for (size_t i = 0; i < n_prompts; i++) {
        int n = (int)json_array_size(json_object_get(json_array_get(prompts, i), "ids"));
        cap = n + 32 > cap ? n + 32 : cap;
    }
    runner r;
    runner_open(&r, model_path, cap, 16);
    assert_int_equal(r.vocab, vocab);
    tokenizer_t *tok = NULL;
    assert_int_equal(tokenizer_from_gguf(checkpoint_gguf(r.ck), &tok), DERAS_OK);

    float *logits = malloc((size_t)vocab * sizeof(float));
    int32_t *seq = malloc((size_t)cap * sizeof(int32_t));
    double worst = 0;
    size_t i;
    json_t *pj;
    json_array_foreach(prompts, i, pj) {
        const char *name = json_string_value(json_object_get(pj, "name"));
        const char *text = json_string_value(json_object_get(pj, "text"));
        int n, n_greedy;
        int32_t *ids = ref_json_ids(json_object_get(pj, "ids"), &n);
        int32_t *greedy = ref_json_ids(json_object_get(pj, "greedy"), &n_greedy);
        assert_int_equal(n_greedy, 32);
        json_t *margins = json_object_get(pj, "greedy_margins");

        /* our tokenizer gives the reference's ids for the prompt text */
        size_t n_enc = 0;
        int32_t *enc = malloc((strlen(text) + 8) * sizeof(int32_t));
        assert_int_equal(tokenizer_encode(tok, text, strlen(text), true, true, enc,
                                          strlen(text) + 8, &n_enc), DERAS_OK);
        if ((int)n_enc != n || memcmp(enc, ids, (size_t)n * sizeof(int32_t)))
            fail_msg("prompt '%s': tokenizer gives %zu ids, reference %d (or different ids)", name,
                     n_enc, n);
        free(enc);

        memcpy(seq, ids, (size_t)n * sizeof(int32_t));
        runner_step(&r, seq, 0, n, true, logits);
        double e = test_rel_l2(logits, want + i * vocab, (size_t)vocab);
        worst = e > worst ? e : worst;
        if (e > 1e-3)
            fail_msg("prompt '%s': last-position logits relative L2 %.3g > 1e-3", name, e);

        runner_greedy(&r, seq, n, 32, logits);
        double min_margin = INFINITY;
        for (int g = 0; g < 32; g++) {
            double mg = json_real_value(json_array_get(margins, (size_t)g));
            min_margin = mg < min_margin ? mg : min_margin;
            if (seq[n + g] != greedy[g])
                fail_msg("prompt '%s': greedy token %d is %d, transformers gave %d (their "
                         "top-2 margin there: %.4g)",
                         name, g, seq[n + g], greedy[g], mg);
        }
        char out[4096];
        size_t n_out;
        tokenizer_decode(tok, seq + n, 32, true, out, sizeof out, &n_out);
        printf("smollm2 %-14s %3d prompt tokens, rel L2 %.2e, 32/32 greedy tokens equal "
               "(min top-2 margin %.3f): %.60s...\n",
               name, n, e, min_margin, out);
        free(ids), free(greedy);
    }
    printf("smollm2: %zu prompts, worst last-position relative L2 %.3e (bound 1e-3)\n", n_prompts,
           worst);

    /* every position of prompt 0 */
    json_t *all = json_object_get(ref, "logits_all_p0_file");
    if (json_is_string(all)) {
        int n;
        int32_t *ids = ref_json_ids(json_object_get(json_array_get(prompts, 0), "ids"), &n);
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(all));
        float *want_all = load_f32(path, (size_t)n * vocab);
        float *got_all = malloc((size_t)n * vocab * sizeof(float));
        runner_step(&r, ids, 0, n, false, got_all);
        for (int p = 0; p < n; p++) {
            double e = test_rel_l2(got_all + (size_t)p * vocab, want_all + (size_t)p * vocab, (size_t)vocab);
            if (e > 1e-3)
                fail_msg("prompt 0 position %d: relative L2 %.3g > 1e-3", p, e);
        }
        free(ids), free(want_all), free(got_all);
    }
    tokenizer_destroy(&tok);
    runner_close(&r);
    free(logits), free(seq), free(want), free(dir);
    json_decref(ref);
}

/* The test model as stored (Q4_1 in place, Q8_0 embedding) against the dequantized-f32
 * path on every reference prompt: last-position logits within 1e-4, greedy continuations
 * equal except after a near-tie (counted and printed). */
static void test_model_as_stored_matches_the_f32_path(void **state)
{
    (void)state;
    const char *model_path = test_model_path();
    char *dir = test_data_path("smollm2");
    json_t *ref = ref_json_in(dir), *prompts = json_object_get(ref, "prompts");
    int vocab = (int)json_integer_value(json_object_get(ref, "vocab_size"));
    const int n_gen = 32;
    int cap = 0;
    size_t i;
    json_t *pj;
    json_array_foreach(prompts, i, pj) {
        int n = (int)json_array_size(json_object_get(pj, "ids"));
        cap = n + n_gen > cap ? n + n_gen : cap;
    }
    runner q, f;
    runner_open(&q, model_path, cap, 16);
    runner_open_as(&f, model_path, cap, 16, DT_F32);
    expect_file_bytes("the test model", &q);
    printf("test model: as stored %.1f MiB of weights (%.1f MiB in place), the f32 path %.1f MiB\n",
           model_weight_bytes(q.m) / 1048576.0, model_mapped_bytes(q.m) / 1048576.0,
           model_weight_bytes(f.m) / 1048576.0);
    float *lq = malloc((size_t)vocab * sizeof(float)), *lf = malloc((size_t)vocab * sizeof(float));
    int32_t *sq = malloc((size_t)cap * sizeof(int32_t)), *sf = malloc((size_t)cap * sizeof(int32_t));
    double worst = 0;
    int same = 0, ties = 0;
    json_array_foreach(prompts, i, pj) {
        const char *name = json_string_value(json_object_get(pj, "name"));
        int n;
        int32_t *ids = ref_json_ids(json_object_get(pj, "ids"), &n);
        memcpy(sq, ids, (size_t)n * sizeof(int32_t));
        memcpy(sf, ids, (size_t)n * sizeof(int32_t));
        runner_step(&q, sq, 0, n, true, lq);
        runner_step(&f, sf, 0, n, true, lf);
        double e = test_rel_l2(lq, lf, (size_t)vocab);
        worst = e > worst ? e : worst;
        if (e > 1e-4)
            fail_msg("prompt '%s': last-position logits as stored vs the f32 path: relative L2 "
                     "%.3g > 1e-4", name, e);
        /* greedy on both, in lockstep; the first divergence must follow a near-tie */
        int g = 0;
        double margin = INFINITY;
        for (; g < n_gen; g++) {
            int32_t a = argmax(lq, vocab), b = argmax(lf, vocab);
            float top = lf[b], second = -INFINITY;
            for (int v = 0; v < vocab; v++)
                second = v != b && lf[v] > second ? lf[v] : second;
            margin = (double)top - second;
            if (a != b)
                break;
            sq[n + g] = sf[n + g] = a;
            if (g + 1 < n_gen) {
                runner_step(&q, sq, n + g, 1, true, lq);
                runner_step(&f, sf, n + g, 1, true, lf);
            }
        }
        if (g == n_gen) {
            same++;
        } else if (margin < 1e-3) {
            ties++;
            printf("prompt '%s': greedy diverges at token %d, a near-tie (top-2 margin %.2e on "
                   "the f32 path)\n", name, g, margin);
        } else {
            fail_msg("prompt '%s': greedy token %d as stored differs from the f32 path's at a "
                     "top-2 margin of %.3g", name, g, margin);
        }
        free(ids);
    }
    printf("test model as stored vs the f32 path: %zu prompts, worst last-position relative L2 "
           "%.2e (bound 1e-4); %d of them %d/%d greedy tokens equal, %d diverged at near-ties\n",
           json_array_size(prompts), worst, same, n_gen, n_gen, ties);
    runner_close(&q);
    runner_close(&f);
    free(lq), free(lf), free(sq), free(sf), free(dir);
    json_decref(ref);
}

/* ---- 16-bit KV caches (--kv-dtype f16 / bf16) against the f32 cache ----
 *
 * The same weights and prompts with the cache in f16 or bf16: K and V are rounded once, on
 * write, by at most half an ulp, r = 2^-11 (f16) or 2^-8 (bf16) relative; the arithmetic
 * stays f32. Bound on the logits' relative L2 change: the model's measured sensitivity
 * to rounding, scaled. Our f32 logits differ from transformers' f32 logits by e32 (the
 * same weights, another summation order: perturbations of u = 2^-24 relative at every
 * operation, K and V among them); a first-order (linear) response to a relative
 * perturbation of K and V alone, of size r, is then at most about e32 x r / u, since the
 * f32 comparison perturbs a superset of the same sites by u. BOUND = e32 x r / u, e32 the
 * worst over the compared positions, measured in the same run.
 * Greedy tokens must equal the f32 cache's except at a near-tie. A token can change only
 * where the f32 run's top-2 logit margin is below twice the largest change of one logit;
 * NEAR = 4 x the largest single-logit change measured at the compared positions (a factor
 * 2 for positions not measured). Divergences below NEAR are counted and printed; after
 * one, the two continuations are unrelated and the rest of that prompt is not compared. */

#define N_KV_GREEDY 32

typedef struct kv_run {
    float *logits;   /* (n_prompts, n_pos, vocab): the compared positions' logits */
    int32_t *greedy; /* (n_prompts, N_KV_GREEDY) */
    float *margin;   /* (n_prompts, N_KV_GREEDY) top-1 minus top-2 logit */
} kv_run;

static double top2_margin(const float *x, int n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (x[i] > a) {
            b = a;
            a = x[i];
        } else if (x[i] > b) {
            b = x[i];
        }
    }
    return (double)a - b;
}

/* Prefill and greedy continuation of every prompt with the cache in kv_dtype; n_pos
 * compared positions per prompt: the last one, or (n_pos > 1, one prompt) all n_pos. */
static void kv_run_prompts(const char *path, int kv_dtype, int32_t *const *ids, const int *n_ids,
                           int n_prompts, int n_pos, int cap, int block_size, kv_run *out)
{
    runner r;
    runner_open_with(&r, path, cap, block_size, AS_STORED, kv_dtype);
    out->logits = malloc((size_t)n_prompts * n_pos * r.vocab * sizeof(float));
    out->greedy = malloc((size_t)n_prompts * N_KV_GREEDY * sizeof(int32_t));
    out->margin = malloc((size_t)n_prompts * N_KV_GREEDY * sizeof(float));
    float *logits = malloc((size_t)r.vocab * sizeof(float));
    int32_t *seq = malloc((size_t)cap * sizeof(int32_t));
    for (int p = 0; p < n_prompts; p++) {
        const int n = n_ids[p];
        float *mine = out->logits + (size_t)p * n_pos * r.vocab;
        memcpy(seq, ids[p], (size_t)n * sizeof(int32_t));
        runner_step(&r, seq, 0, n, n_pos == 1, mine);
        memcpy(logits, mine + (size_t)(n_pos - 1) * r.vocab, (size_t)r.vocab * sizeof(float));
        for (int g = 0; g < N_KV_GREEDY; g++) {
            out->margin[p * N_KV_GREEDY + g] = (float)top2_margin(logits, r.vocab);
            seq[n + g] = out->greedy[p * N_KV_GREEDY + g] = argmax(logits, r.vocab);
            if (g + 1 < N_KV_GREEDY)
                runner_step(&r, seq, n + g, 1, true, logits);
        }
    }
    free(logits);
    free(seq);
    runner_close(&r);
}

static void kv_run_free(kv_run *k)
{
    free(k->logits), free(k->greedy), free(k->margin);
}

/* f16 and bf16 runs against the f32 run `ref`; fails beyond the bound or on a divergence
 * that is not a near-tie. Prints the figures. */
static void kv_compare(const char *what, const char *path, int32_t *const *ids, const int *n_ids,
                       int n_prompts, int n_pos, int cap, int block_size, int vocab,
                       const kv_run *ref, double e32)
{
    static const int dts[2] = {DT_F16, DT_BF16};
    for (int d = 0; d < 2; d++) {
        const double r = dts[d] == DT_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
        const double bound = e32 * r / ldexp(1.0, -24);
        kv_run got;
        kv_run_prompts(path, dts[d], ids, n_ids, n_prompts, n_pos, cap, block_size, &got);
        double worst = 0, max_abs = 0;
        for (size_t k = 0; k < (size_t)n_prompts * n_pos; k++) {
            const float *a = got.logits + k * vocab, *b = ref->logits + k * vocab;
            double e = test_rel_l2(a, b, (size_t)vocab);
            worst = e > worst ? e : worst;
            if (e > bound)
                fail_msg("%s, %s cache, position %zu: logits relative L2 %.3g from the f32 "
                         "cache's > bound %.3g", what, dtype_name(dts[d]), k, e, bound);
            for (int i = 0; i < vocab; i++)
                max_abs = fmax(max_abs, fabs((double)a[i] - b[i]));
        }
        const double near = 4 * max_abs;
        int equal = 0, n_near = 0, compared = 0;
        for (int p = 0; p < n_prompts; p++)
            for (int g = 0; g < N_KV_GREEDY; g++) {
                const int at = p * N_KV_GREEDY + g;
                compared++;
                if (got.greedy[at] == ref->greedy[at]) {
                    equal++;
                    continue;
                }
                if (ref->margin[at] >= near)
                    fail_msg("%s, %s cache, prompt %d: greedy token %d is %d, the f32 cache's "
                             "%d at a top-2 margin of %.4g (near-tie bound %.4g)", what,
                             dtype_name(dts[d]), p, g, got.greedy[at], ref->greedy[at],
                             ref->margin[at], near);
                n_near++;
                printf("  %s, %s cache, prompt %d diverges at greedy token %d after a near-tie "
                       "(f32 top-2 margin %.4g < %.4g)\n", what, dtype_name(dts[d]), p, g,
                       ref->margin[at], near);
                break;
            }
        printf("%s, %s cache vs f32 cache: worst relative L2 %.3e over %d positions (bound "
               "%.3e = e32 %.2e x 2^%d); greedy: %d of %d compared tokens equal, %d near-tie "
               "divergence%s (near-tie: margin < %.3g)\n", what, dtype_name(dts[d]), worst,
               n_prompts * n_pos, bound, e32, dts[d] == DT_F16 ? 13 : 16, equal, compared,
               n_near, n_near == 1 ? "" : "s", near);
        kv_run_free(&got);
    }
}

/* q8 mode on the tiny block-format files (Q8_0, Q4_1), under the sanitizers: the weights
 * are packed at load (kernels/cpu/qmatmul.h) and the logits stay within q8's rounding of
 * transformers' (each activation off by up to half a step of its block's max / 127, which
 * these random-weight models carry to about 3e-2 of the logits' norm; bound 5e-2), and
 * differ from exact mode's (the int8 activations are in use). */
static void tiny_block_models_in_q8_mode(void **state)
{
    (void)state;
    char *dir = test_data_path("tiny");
    json_t *ref = ref_json_in(dir), *models = json_object_get(ref, "models");
    size_t i;
    json_t *mj;
    int seen = 0;
    json_array_foreach(models, i, mj) {
        const char *file = json_string_value(json_object_get(mj, "path"));
        if (!strstr(file, "-q8_0.gguf") && !strstr(file, "-q4_1.gguf"))
            continue;
        tiny_ref t;
        tiny_ref_load(dir, mj, &t);
        const char *path = t.path;
        const int n = t.n, vocab = t.vocab;
        int32_t *ids = t.ids;
        float *want = t.want;
        float *exact = malloc((size_t)n * vocab * sizeof(float));
        float *q8 = malloc((size_t)n * vocab * sizeof(float));
        runner r;
        runner_open(&r, path, n, 4);
        runner_step(&r, ids, 0, n, false, exact);
        runner_close(&r);
        assert_int_equal(backend_set_matmul_mode(runner_backend, BACKEND_MM_Q8), DERAS_OK);
        runner_open(&r, path, n, 4);
        runner_step(&r, ids, 0, n, false, q8);
        runner_close(&r);
        assert_int_equal(backend_set_matmul_mode(runner_backend, BACKEND_MM_EXACT), DERAS_OK);
        const double e = test_rel_l2(q8, want, (size_t)n * vocab);
        printf("tiny %-24s q8 mode: rel L2 to transformers %.2e\n", file, e);
        if (!(e < 5e-2))
            fail_msg("%s in q8 mode: relative L2 %.3g to transformers, expected below 5e-2", file, e);
        assert_true(memcmp(q8, exact, (size_t)n * vocab * sizeof(float)) != 0);
        free(ids), free(want), free(exact), free(q8);
        seen++;
    }
    assert_int_equal(seen, 2);
    json_decref(ref);
    free(dir);
}

static void tiny_models_with_16_bit_kv_caches(void **state)
{
    (void)state;
    char *dir = test_data_path("tiny");
    json_t *ref = ref_json_in(dir), *models = json_object_get(ref, "models");
    size_t i;
    json_t *mj;
    json_array_foreach(models, i, mj) {
        tiny_ref t;
        tiny_ref_load(dir, mj, &t);
        const char *name = t.name, *path = t.path;
        int n = t.n;
        const int vocab = t.vocab;
        int32_t *ids = t.ids;
        float *want = t.want;
        kv_run f32;
        kv_run_prompts(path, DT_F32, &ids, &n, 1, n, n + N_KV_GREEDY, 4, &f32);
        double e32 = 0;
        for (int p = 0; p < n; p++) {
            double e = test_rel_l2(f32.logits + (size_t)p * vocab, want + (size_t)p * vocab,
                                   (size_t)vocab);
            e32 = e > e32 ? e : e32;
        }
        kv_compare(name, path, &ids, &n, 1, n, n + N_KV_GREEDY, 4, vocab, &f32, e32);
        kv_run_free(&f32);
        free(ids), free(want);
    }
    json_decref(ref);
    free(dir);
}

static void test_model_with_16_bit_kv_caches(void **state)
{
    (void)state;
    const char *model_path = test_model_path();
    char *dir = test_data_path("smollm2");
    char path[4096];
    json_t *ref = ref_json_in(dir), *prompts = json_object_get(ref, "prompts");
    const int vocab = (int)json_integer_value(json_object_get(ref, "vocab_size"));
    const int n_prompts = (int)json_array_size(prompts);
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(ref, "logits_file")));
    float *want = load_f32(path, (size_t)n_prompts * vocab);
    int32_t **ids = calloc((size_t)n_prompts, sizeof *ids);
    int *n_ids = malloc((size_t)n_prompts * sizeof(int)), cap = 0;
    for (int p = 0; p < n_prompts; p++) {
        ids[p] = ref_json_ids(json_object_get(json_array_get(prompts, (size_t)p), "ids"), &n_ids[p]);
        cap = n_ids[p] + N_KV_GREEDY > cap ? n_ids[p] + N_KV_GREEDY : cap;
    }
    kv_run f32;
    kv_run_prompts(model_path, DT_F32, ids, n_ids, n_prompts, 1, cap, 16, &f32);
    double e32 = 0;
    for (int p = 0; p < n_prompts; p++) {
        double e = test_rel_l2(f32.logits + (size_t)p * vocab, want + (size_t)p * vocab, (size_t)vocab);
        e32 = e > e32 ? e : e32;
    }
    kv_compare("smollm2", model_path, ids, n_ids, n_prompts, 1, cap, 16, vocab, &f32, e32);
    kv_run_free(&f32);
    for (int p = 0; p < n_prompts; p++)
        free(ids[p]);
    free(ids), free(n_ids), free(want), free(dir);
    json_decref(ref);
}

int main(int argc, char **argv)
{
    /* `test_model_reference tiny` runs only the tiny models (no test model needed),
     * `f32path` the test model as stored against its dequantized-f32 path */
    const struct CMUnitTest tiny[] = {cmocka_unit_test(tiny_models_match_transformers),
                                      cmocka_unit_test(conversions_and_misaligned_files),
                                      cmocka_unit_test(tiny_block_models_in_q8_mode)};
    const struct CMUnitTest full[] = {cmocka_unit_test(test_model_matches_transformers)};
    const struct CMUnitTest f32path[] = {cmocka_unit_test(test_model_as_stored_matches_the_f32_path)};
    const struct CMUnitTest tiny_kv[] = {cmocka_unit_test(tiny_models_with_16_bit_kv_caches)};
    const struct CMUnitTest full_kv[] = {cmocka_unit_test(test_model_with_16_bit_kv_caches)};
    if (argc > 1 && !strcmp(argv[1], "tiny"))
        return cmocka_run_group_tests(tiny, runner_setup, runner_teardown);
    if (argc > 1 && !strcmp(argv[1], "tiny-kv"))
        return cmocka_run_group_tests(tiny_kv, runner_setup, runner_teardown);
    if (argc > 1 && !strcmp(argv[1], "f32path")) {
        test_model_path();
        return cmocka_run_group_tests(f32path, runner_setup, runner_teardown);
    }
    if (argc > 1 && !strcmp(argv[1], "kv")) {
        test_model_path();
        return cmocka_run_group_tests(full_kv, runner_setup, runner_teardown);
    }
    test_model_path(); /* skips (or fails under DERAS_REQUIRE_MODEL) without the model */
    return cmocka_run_group_tests(full, runner_setup, runner_teardown);
}
