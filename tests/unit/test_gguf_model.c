/* SPDX-License-Identifier: Apache-2.0 */
/* test_gguf_model.c - the GGUF reader on the real test model (SmolLM2-135M-Instruct Q4_1).
 *
 * Label `model`: skips (or fails under DERAS_REQUIRE_MODEL=1) without the cached model.
 * The expected facts were read from the file with gguf-py's GGUFReader.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/checkpoint/gguf.h"
#include "common/base/status.h"
#include "test_util.h"

static void test_model_metadata_and_tensors_read(void **state)
{
    (void)state;
    const char *path = test_model_path();
    gguf_t *g = NULL;
    int rc = gguf_open(path, &g);
    if (rc)
        fail_msg("expected the test model to open, got %s: %s", deras_status_name(rc),
                 deras_errmsg());
    assert_int_equal(gguf_version(g), 3);
    const char *s;
    size_t len;
    assert_int_equal(gguf_get_str(g, "general.architecture", &s, &len), DERAS_OK);
    assert_string_equal(s, "llama");
    int64_t v;
    assert_int_equal(gguf_get_int(g, "llama.block_count", &v), DERAS_OK);
    assert_int_equal(v, 30);
    assert_int_equal(gguf_get_int(g, "llama.embedding_length", &v), DERAS_OK);
    assert_int_equal(v, 576);
    double d;
    assert_int_equal(gguf_get_float(g, "llama.rope.freq_base", &d), DERAS_OK);
    assert_true(d == 100000.0);
    bool b;
    assert_int_equal(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), DERAS_OK);
    assert_false(b);

    int et;
    uint64_t n;
    assert_int_equal(gguf_get_arr_info(g, "tokenizer.ggml.tokens", &et, &n), DERAS_OK);
    assert_int_equal(et, GGUF_TYPE_STRING);
    assert_int_equal(n, 49152);
    assert_int_equal(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 0, &s, &len), DERAS_OK);
    assert_string_equal(s, "<|endoftext|>");
    assert_int_equal(gguf_get_arr_str(g, "tokenizer.ggml.tokens", 49151, &s, &len), DERAS_OK);
    assert_string_equal(s, "ectable");
    assert_int_equal(gguf_get_arr_str(g, "tokenizer.ggml.merges", 0, &s, &len), DERAS_OK);
    assert_string_equal(s, "\xc4\xa0 t");
    int32_t *types = malloc(49152 * sizeof *types);
    assert_int_equal(gguf_get_arr_i32(g, "tokenizer.ggml.token_type", types, 49152), DERAS_OK);
    assert_int_equal(types[0], 3);
    assert_int_equal(types[17], 1);
    free(types);

    assert_int_equal(gguf_n_tensors(g), 272);
    tensor_view t;
    assert_int_equal(gguf_find_tensor(g, "token_embd.weight", &t), DERAS_OK);
    assert_int_equal(t.dtype, DT_Q8_0);
    assert_int_equal(t.n_dims, 2);
    assert_true(t.shape[0] == 49152 && t.shape[1] == 576);
    assert_int_equal(t.n_bytes, (size_t)49152 * 576 / 32 * 34);
    assert_int_equal(gguf_find_tensor(g, "blk.29.attn_k.weight", &t), DERAS_OK);
    assert_int_equal(t.dtype, DT_Q4_1);
    assert_true(t.shape[0] == 192 && t.shape[1] == 576);
    assert_int_equal(gguf_find_tensor(g, "blk.0.attn_norm.weight", &t), DERAS_OK);
    assert_int_equal(t.dtype, DT_F32);
    assert_true(t.n_dims == 1 && t.shape[0] == 576);
    float norm[576];
    assert_int_equal(dtype_to_f32(t.dtype, t.data, norm, 576), DERAS_OK);
    assert_int_equal(gguf_find_tensor(g, "output.weight", &t), DERAS_ENOTFOUND);
    gguf_destroy(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_metadata_and_tensors_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
