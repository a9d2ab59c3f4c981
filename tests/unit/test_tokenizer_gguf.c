/* SPDX-License-Identifier: Apache-2.0 */
/* test_tokenizer_gguf.c - the GGUF loader's rules on tiny fixtures
 * (tests/ref/make_tokenizer_vectors.py): an unknown tokenizer.ggml.pre or model is
 * DERAS_EUNSUPPORTED naming it, never guessed; EOS/EOT/EOM make the end-of-generation set;
 * add_bos_token adds BOS; llama-bpe's merges apply through the Llama 3 regex.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_util.h"
#include "tok_test_common.h"

static int load(const char *rel, tokenizer_t **t)
{
    char *p = test_data_path(rel);
    gguf_t *g = NULL;
    int rc = gguf_open(p, &g);
    if (rc != DERAS_OK)
        fail_msg("gguf_open(%s): %s", p, deras_errmsg());
    rc = tokenizer_from_gguf(g, t);
    gguf_destroy(&g);
    free(p);
    return rc;
}

static void test_unknown_pre_is_refused_by_name(void **s)
{
    (void)s;
    tokenizer_t *t = NULL;
    assert_int_equal(load("tokenizer/gguf_pre_unknown.gguf", &t), DERAS_EUNSUPPORTED);
    assert_null(t);
    if (!strstr(deras_errmsg(), "'no-such-pre'"))
        fail_msg("expected the message to name 'no-such-pre', got '%s'", deras_errmsg());
}

static void test_unknown_model_is_refused_by_name(void **s)
{
    (void)s;
    tokenizer_t *t = NULL;
    assert_int_equal(load("tokenizer/gguf_model_bert.gguf", &t), DERAS_EUNSUPPORTED);
    assert_null(t);
    if (!strstr(deras_errmsg(), "'bert'"))
        fail_msg("expected the message to name 'bert', got '%s'", deras_errmsg());
    assert_int_equal(tokenizer_from_gguf(NULL, &t), DERAS_EINVAL);
}

static void test_ids_eog_and_merges(void **s)
{
    (void)s;
    tokenizer_t *t = NULL;
    assert_int_equal(load("tokenizer/gguf_llama_bpe_tiny.gguf", &t), DERAS_OK);
    int32_t bos = tokenizer_find(t, "<|bos|>"), eot = tokenizer_find(t, "<|eot|>"), eom = tokenizer_find(t, "<|eom|>");
    assert_int_equal(tokenizer_bos(t), bos);
    assert_int_equal(tokenizer_eos(t), eot);
    assert_int_equal(tokenizer_n_eog(t), 2);
    assert_true(tokenizer_is_eog(t, eot));
    assert_true(tokenizer_is_eog(t, eom));
    assert_false(tokenizer_is_eog(t, bos));
    size_t n;
    /* "ab a": "ab" merges; " a" is "Ġa" via the second merge; BOS first */
    int32_t *ids = tt_encode(t, "ab a<|eot|>", 11, true, true, &n, NULL);
    assert_non_null(ids);
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], bos);
    assert_int_equal(ids[1], tokenizer_find(t, "ab"));
    assert_int_equal(ids[2], tokenizer_find(t, "\xC4\xA0" "a"));
    assert_int_equal(ids[3], eot);
    free(ids);
    ids = tt_encode(t, "<|eot|>", 7, false, false, &n, NULL); /* not parsed: plain letters */
    assert_non_null(ids);
    /* '<', '|' and '>' are not in this vocabulary: dropped, as HF's BPE does without an
     * unknown token; the letters stay */
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], tokenizer_find(t, "e"));
    assert_int_equal(ids[1], tokenizer_find(t, "o"));
    assert_int_equal(ids[2], tokenizer_find(t, "t"));
    free(ids);
    tokenizer_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_pre_is_refused_by_name),
        cmocka_unit_test(test_unknown_model_is_refused_by_name),
        cmocka_unit_test(test_ids_eog_and_merges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
