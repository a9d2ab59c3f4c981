/* SPDX-License-Identifier: Apache-2.0 */
/* test_tokenizer_smollm2.c - the test model's tokenizer, built from its GGUF metadata
 * (tokenizer.ggml.pre = "smollm"), against the Hugging Face reference
 * (tests/ref/smollm2_hf.py:load_tokenizer, vectors from make_tokenizer_vectors.py) over the
 * corpus; decode(encode(x)) == x for every corpus string; the GGUF-built and the
 * tokenizer.json-built tokenizers agree on a long mixed text; metadata (BOS/EOS/EOG, the
 * chat template and its default system message). Label `model`.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/tokenizer/chat.h"
#include "test_util.h"
#include "tok_vectors.h"

static tokenizer_t *gguf_tok;

static int setup(void **s)
{
    (void)s;
    gguf_tok = tt_from_gguf(test_model_path());
    return gguf_tok ? 0 : -1;
}

static int teardown(void **s)
{
    (void)s;
    tokenizer_destroy(&gguf_tok);
    return 0;
}

static void test_gguf_matches_hf_reference(void **s)
{
    (void)s;
    char *vp = test_data_path("tokenizer/smollm2/vectors.json");
    assert_int_equal(tv_check(gguf_tok, vp, "smollm2 (GGUF)"), 0);
    free(vp);
}

static void test_round_trip(void **s)
{
    (void)s;
    char *p = test_data_path("tokenizer/corpus.json");
    json_error_t err;
    json_t *root = json_load_file(p, 0, &err);
    assert_non_null(root);
    json_t *corpus = json_object_get(root, "corpus");
    size_t n = json_array_size(corpus), ok = 0;
    for (size_t i = 0; i < n; i++) {
        const char *text = json_string_value(json_array_get(corpus, i));
        size_t len = json_string_length(json_array_get(corpus, i)), ni, dl = 0;
        for (int ps = 0; ps < 2; ps++) {
            int32_t *ids = tt_encode(gguf_tok, text, len, false, ps, &ni, NULL);
            assert_non_null(ids);
            char *dec = tt_decode(gguf_tok, ids, ni, false, &dl);
            if (dec && dl == len && !memcmp(dec, text, len)) {
                ok++;
            } else {
                fprintf(stderr, "round trip failed (parse_special %d)\n", ps);
                tt_print_str(stderr, "input", text, len);
                if (dec)
                    tt_print_str(stderr, "decoded", dec, dl);
            }
            free(dec);
            free(ids);
        }
    }
    printf("smollm2 (GGUF): %zu/%zu round trips\n", ok, 2 * n);
    assert_int_equal(ok, 2 * n);
    json_decref(root);
    free(p);
}

static void test_gguf_and_json_agree(void **s)
{
    (void)s;
    char *dir = test_data_path("tokenizer/smollm2");
    tokenizer_t *jt = NULL;
    assert_int_equal(tokenizer_from_hf_dir(dir, &jt), DERAS_OK);
    assert_int_equal(tokenizer_vocab_size(jt), tokenizer_vocab_size(gguf_tok));
    char *cp = test_data_path("tokenizer/corpus.json");
    json_error_t err;
    json_t *root = json_load_file(cp, 0, &err);
    json_t *corpus = json_object_get(root, "corpus");
    /* One long text: every corpus string, joined in several ways. */
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    static const char *joins[] = {"\n", " ", "", "\t\r\n", "<|im_end|>"};
    for (int j = 0; j < 5; j++)
        for (size_t i = 0; i < json_array_size(corpus); i++) {
            const char *c = json_string_value(json_array_get(corpus, i));
            size_t cl = strlen(c), jl = strlen(joins[j]);
            while (len + cl + jl + 1 > cap)
                text = realloc(text, cap *= 2);
            memcpy(text + len, c, cl);
            memcpy(text + len + cl, joins[j], jl);
            len += cl + jl;
        }
    for (int ps = 0; ps < 2; ps++) {
        size_t na, nb;
        int32_t *a = tt_encode(gguf_tok, text, len, true, ps, &na, NULL);
        int32_t *b = tt_encode(jt, text, len, true, ps, &nb, NULL);
        assert_non_null(a);
        assert_non_null(b);
        if (!tt_ids_equal(a, na, b, nb)) {
            size_t k = 0;
            while (k < na && k < nb && a[k] == b[k])
                k++;
            fail_msg("GGUF and tokenizer.json tokenizers differ at id %zu of %zu/%zu (parse_special %d)", k, na, nb, ps);
        }
        free(a);
        free(b);
    }
    printf("smollm2: GGUF and tokenizer.json agree on a %zu-byte text\n", len);
    free(text);
    json_decref(root);
    free(cp);
    free(dir);
    tokenizer_destroy(&jt);
}

static void test_metadata_and_chat_template(void **s)
{
    (void)s;
    assert_int_equal(tokenizer_vocab_size(gguf_tok), 49152);
    assert_int_equal(tokenizer_bos(gguf_tok), 1);
    assert_int_equal(tokenizer_eos(gguf_tok), 2);
    assert_true(tokenizer_is_eog(gguf_tok, 2));
    assert_false(tokenizer_is_eog(gguf_tok, 1));
    assert_int_equal(tokenizer_n_eog(gguf_tok), 1);
    assert_int_equal(tokenizer_eog_at(gguf_tok, 0), 2);
    assert_int_equal(tokenizer_eog_at(gguf_tok, 1), -1);
    assert_true(tokenizer_is_special(gguf_tok, 1));
    assert_false(tokenizer_is_special(gguf_tok, tokenizer_find(gguf_tok, "the")));
    assert_int_equal(tokenizer_find(gguf_tok, "<|im_start|>"), 1);
    /* add_bos_token is false in this GGUF: add_special adds nothing */
    size_t n;
    int32_t *ids = tt_encode(gguf_tok, "Hi", 2, true, true, &n, NULL);
    assert_non_null(ids);
    assert_int_equal(n, 1);
    free(ids);
    chat_format f;
    assert_int_equal(chat_format_detect(tokenizer_chat_template(gguf_tok), &f), DERAS_OK);
    assert_int_equal(f.style, CHAT_STYLE_CHATML);
    assert_string_equal(f.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}

int main(void)
{
    test_model_path();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_matches_hf_reference),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_gguf_and_json_agree),
        cmocka_unit_test(test_metadata_and_chat_template),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
