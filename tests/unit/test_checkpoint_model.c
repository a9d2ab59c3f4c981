/* SPDX-License-Identifier: Apache-2.0 */
/* test_checkpoint_model.c - the checkpoint reader on the real test model (SmolLM2-135M Q4_1).
 *
 * Label `model`. The config must read as the published SmolLM2-135M one, and rows of every
 * role (Q4_1 layers, the Q8_0 embedding, F32 norms; Q/K ranges inside and across heads)
 * must equal, bit for bit, what transformers reads from the same GGUF
 * (tests/ref/make_smollm2_rows.py -> tests/data/smollm2/).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "common/checkpoint/checkpoint.h"
#include "common/base/status.h"
#include "test_util.h"

static void test_model_config_is_smollm2_135m(void **state)
{
    (void)state;
    checkpoint_t *c = NULL;
    int rc = checkpoint_open(test_model_path(), &c);
    if (rc)
        fail_msg("expected the test model to open, got %s: %s", deras_status_name(rc),
                 deras_errmsg());
    const model_config *m = checkpoint_config(c);
    assert_int_equal(m->arch, MODEL_ARCH_LLAMA);
    assert_int_equal(m->n_layers, 30);
    assert_int_equal(m->d_model, 576);
    assert_int_equal(m->n_heads, 9);
    assert_int_equal(m->n_kv_heads, 3);
    assert_int_equal(m->head_dim, 64);
    assert_int_equal(m->d_ff, 1536);
    assert_int_equal(m->vocab_size, 49152);
    assert_int_equal(m->max_seq_len, 8192);
    assert_true(m->rope_theta == 100000.0f);
    assert_true(m->norm_eps == 1e-5f);
    assert_int_equal(m->rope_scaling, ROPE_SCALING_NONE);
    assert_true(m->tied_embeddings);
    assert_false(m->qkv_bias);
    assert_int_equal(m->sliding_window, 0);
    assert_false(checkpoint_has(c, CKPT_OUTPUT, 0));
    assert_non_null(checkpoint_gguf(c));
    char buf[256];
    model_config_describe(m, buf, sizeof buf);
    assert_non_null(strstr(buf, "llama, 30 layers, d=576, heads 9/3 x 64, ff 1536, vocab 49152"));
    /* Q8_0 embedding + 30 layers of Q4_1 weights and F32 norms + the final norm */
    uint64_t want = 49152ull * 576 / 32 * 34 + 576 * 4 +
                    30ull * (2 * 576 * 4 + (576ull * 576 * 2 + 192ull * 576 * 2 +
                                            3ull * 1536 * 576) / 32 * 20);
    assert_int_equal(checkpoint_file_bytes(c), want);
    checkpoint_destroy(&c);
}

static int role_of(const char *s)
{
    static const char *n[CKPT_N_TENSORS] = {
        "TOK_EMBD", "OUTPUT_NORM", "OUTPUT", "ATTN_NORM", "ATTN_Q", "ATTN_K", "ATTN_V",
        "ATTN_Q_BIAS", "ATTN_K_BIAS", "ATTN_V_BIAS", "ATTN_OUT", "FFN_NORM", "FFN_GATE",
        "FFN_UP", "FFN_DOWN"};
    for (int i = 0; i < CKPT_N_TENSORS; i++)
        if (!strcmp(n[i], s))
            return i;
    fail_msg("unknown role '%s' in rows.json", s);
    return -1;
}

static void test_model_rows_match_transformers_bit_for_bit(void **state)
{
    (void)state;
    const char *model = test_model_path();
    char *manifest = test_data_path("smollm2/rows.json");
    char *blob_path = test_data_path("smollm2/rows.f32");
    json_error_t err;
    json_t *rows = json_load_file(manifest, 0, &err);
    size_t blob_bytes;
    float *ref = (float *)test_read_file(blob_path, &blob_bytes);
    if (!rows || !ref)
        test_skip("reference rows missing (run tests/ref/make_smollm2_rows.py)");
    checkpoint_t *c = NULL;
    assert_int_equal(checkpoint_open(model, &c), DERAS_OK);
    size_t i;
    json_t *r;
    int n_checked = 0;
    json_array_foreach(rows, i, r) {
        int role = role_of(json_string_value(json_object_get(r, "role")));
        int layer = (int)json_integer_value(json_object_get(r, "layer"));
        int64_t row0 = json_integer_value(json_object_get(r, "row0"));
        int64_t n = json_integer_value(json_object_get(r, "n_rows"));
        int64_t cols = json_integer_value(json_object_get(r, "cols"));
        int64_t off = json_integer_value(json_object_get(r, "offset"));
        assert_true((size_t)(off + n * cols) * sizeof(float) <= blob_bytes);
        int64_t rr, cc;
        assert_int_equal(checkpoint_shape(c, (enum ckpt_tensor)role, layer, &rr, &cc), DERAS_OK);
        assert_int_equal(cc, cols);
        float *got = malloc((size_t)(n * cols) * sizeof *got);
        int rc = checkpoint_read_rows(c, (enum ckpt_tensor)role, layer, row0, n, got);
        if (rc)
            fail_msg("%s: %s", json_string_value(json_object_get(r, "hf_name")), deras_errmsg());
        for (int64_t k = 0; k < n * cols; k++)
            if (memcmp(&got[k], &ref[off + k], 4))
                fail_msg("%s rows %lld+%lld, element (%lld, %lld): expected %.9g "
                         "(transformers), got %.9g",
                         json_string_value(json_object_get(r, "hf_name")), (long long)row0,
                         (long long)n, (long long)(row0 + k / cols), (long long)(k % cols),
                         ref[off + k], got[k]);
        free(got);
        n_checked++;
    }
    assert_true(n_checked >= 15);
    checkpoint_destroy(&c);
    json_decref(rows);
    free(ref);
    free(manifest);
    free(blob_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_config_is_smollm2_135m),
        cmocka_unit_test(test_model_rows_match_transformers_bit_for_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
