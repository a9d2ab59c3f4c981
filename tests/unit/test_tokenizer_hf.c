/* SPDX-License-Identifier: Apache-2.0 */
/* test_tokenizer_hf.c - tokenizers built from Hugging Face directories (tokenizer.json +
 * tokenizer_config.json + generation_config.json, chat_template.jinja) give the same ids
 * and texts as the Hugging Face tokenizers library, for both algorithms:
 *  - hf_llama3_bpe: byte-level BPE, Llama 3 Split regex, ignore_merges, BOS template;
 *  - hf_spm_bytefallback: SentencePiece-style BPE with the Llama 2 normalizer, <0xXX>
 *    byte fallback, fuse_unk, Replace/ByteFallback/Fuse/Strip decoder;
 *  - hf_qwen2_nfc: NFC normalizer, Qwen2 regex, non-special and lstrip/rstrip added tokens;
 *  - smollm2: SmolLM2's pipeline (Digits + ByteLevel) with its real vocabulary.
 * Data: tests/ref/make_tokenizer_vectors.py. Where a text is changed by the tokenizer
 * (NFC composes "e\u0301" into "é"), the expected decode is HF's, which shows the loss is
 * the reference behaviour, not ours.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <unistd.h>

#include "test_util.h"
#include "tok_vectors.h"

static tokenizer_t *load_dir(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizer/%s", name);
    char *dir = test_data_path(rel);
    tokenizer_t *t = NULL;
    int rc = tokenizer_from_hf_dir(dir, &t);
    if (rc != DERAS_OK)
        fail_msg("tokenizer_from_hf_dir(%s): expected ok, got %s: %s", dir, deras_status_name(rc), deras_errmsg());
    free(dir);
    return t;
}

static void check_dir(const char *name)
{
    tokenizer_t *t = load_dir(name);
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizer/%s/vectors.json", name);
    char *vp = test_data_path(rel);
    size_t bad = tv_check(t, vp, name);
    free(vp);
    tokenizer_destroy(&t);
    assert_null(t);
    assert_int_equal(bad, 0);
}

static void test_llama3_style_matches_hf(void **s) { (void)s; check_dir("hf_llama3_bpe"); }
static void test_spm_style_matches_hf(void **s) { (void)s; check_dir("hf_spm_bytefallback"); }
static void test_qwen2_nfc_matches_hf(void **s) { (void)s; check_dir("hf_qwen2_nfc"); }
static void test_smollm2_json_matches_hf(void **s) { (void)s; check_dir("smollm2"); }

static void test_config_rules(void **s)
{
    (void)s;
    tokenizer_t *t = load_dir("hf_llama3_bpe");
    int32_t bos = tokenizer_find(t, "<|begin_of_text|>"), eot = tokenizer_find(t, "<|eot_id|>");
    int32_t eot_text = tokenizer_find(t, "<|end_of_text|>");
    assert_true(bos >= 0 && eot >= 0 && eot_text >= 0);
    assert_int_equal(tokenizer_bos(t), bos);
    assert_int_equal(tokenizer_eos(t), eot_text);
    /* generation_config's eos list and tokenizer_config's eos make the EOG set */
    assert_true(tokenizer_is_eog(t, eot));
    assert_true(tokenizer_is_eog(t, eot_text));
    assert_false(tokenizer_is_eog(t, bos));
    assert_int_equal(tokenizer_n_eog(t), 2);
    assert_true(tokenizer_is_special(t, bos));
    assert_non_null(tokenizer_chat_template(t));
    assert_non_null(strstr(tokenizer_chat_template(t), "<|start_header_id|>"));
    tokenizer_destroy(&t);

    t = load_dir("hf_qwen2_nfc");
    assert_int_equal(tokenizer_bos(t), -1);
    assert_int_equal(tokenizer_eos(t), tokenizer_find(t, "<|im_end|>"));
    assert_true(tokenizer_is_eog(t, tokenizer_find(t, "<|endoftext|>")));
    /* chat_template.jinja is read when tokenizer_config.json has no template */
    assert_non_null(tokenizer_chat_template(t));
    assert_non_null(strstr(tokenizer_chat_template(t), "You are a helpful assistant."));
    /* a non-special added token is not special (skip_special keeps it) */
    assert_false(tokenizer_is_special(t, tokenizer_find(t, "<tool_call>")));
    tokenizer_destroy(&t);

    t = load_dir("hf_spm_bytefallback");
    assert_int_equal(tokenizer_bos(t), 1);
    size_t len = 0;
    const char *b = tokenizer_token_bytes(t, tokenizer_find(t, "<0x0A>"), &len);
    assert_int_equal(len, 1);
    assert_int_equal(b[0], '\n');
    assert_string_equal(tokenizer_token_text(t, 1), "<s>");
    assert_null(tokenizer_token_text(t, tokenizer_vocab_size(t)));
    assert_int_equal(tokenizer_find(t, "no such token \x01"), -1);
    tokenizer_destroy(&t);
}

/* Write a tokenizer.json into a temporary directory and expect `status` naming `what`. */
static void expect_refused(const char *json, int status, const char *what)
{
    char dir[] = "/tmp/deras-tokjson-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fputs(json, f);
    fclose(f);
    tokenizer_t *t = NULL;
    int rc = tokenizer_from_hf_dir(dir, &t);
    unlink(path);
    rmdir(dir);
    if (rc != status || !strstr(deras_errmsg(), what))
        fail_msg("expected %s naming '%s', got %s: '%s'", deras_status_name(status), what, deras_status_name(rc),
                 deras_errmsg());
    assert_null(t);
}

#define BPE_MODEL "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}"

static void test_unsupported_components_are_named(void **s)
{
    (void)s;
    expect_refused("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}},\"decoder\":{\"type\":\"ByteLevel\"}}",
                   DERAS_EUNSUPPORTED, "WordPiece");
    expect_refused("{" BPE_MODEL ",\"normalizer\":{\"type\":\"Lowercase\"},\"decoder\":{\"type\":\"ByteLevel\"}}",
                   DERAS_EUNSUPPORTED, "Lowercase");
    expect_refused("{" BPE_MODEL ",\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                   "\"Whitespace\"}]},\"decoder\":{\"type\":\"ByteLevel\"}}",
                   DERAS_EUNSUPPORTED, "pre_tokenizer.pretokenizers[0]: pre-tokenizer 'Whitespace'");
    expect_refused("{" BPE_MODEL ",\"post_processor\":{\"type\":\"RobertaProcessing\"},\"decoder\":{\"type\":"
                   "\"ByteLevel\"}}", DERAS_EUNSUPPORTED, "RobertaProcessing");
    expect_refused("{" BPE_MODEL ",\"decoder\":{\"type\":\"WordPiece\"}}", DERAS_EUNSUPPORTED, "WordPiece");
    expect_refused("{" BPE_MODEL ",\"decoder\":null}", DERAS_EUNSUPPORTED, "decoder: null");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[],\"dropout\":0.1},"
                   "\"decoder\":{\"type\":\"ByteLevel\"}}", DERAS_EUNSUPPORTED, "dropout");
    expect_refused("{" BPE_MODEL ",\"added_tokens\":[{\"id\":3,\"content\":\"x\",\"single_word\":true}],"
                   "\"decoder\":{\"type\":\"ByteLevel\"}}", DERAS_EUNSUPPORTED, "single_word");
    expect_refused("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a q\"]},"
                   "\"decoder\":{\"type\":\"ByteLevel\"}}", DERAS_EFORMAT, "merges[0]");
    expect_refused("{\"model\": [", DERAS_EFORMAT, "tokenizer.json");
}

static void test_missing_dir_is_not_found(void **s)
{
    (void)s;
    tokenizer_t *t = NULL;
    assert_int_equal(tokenizer_from_hf_dir("/nonexistent/deras", &t), DERAS_ENOTFOUND);
    assert_null(t);
    assert_int_equal(tokenizer_from_hf_dir(NULL, &t), DERAS_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3_style_matches_hf),
        cmocka_unit_test(test_spm_style_matches_hf),
        cmocka_unit_test(test_qwen2_nfc_matches_hf),
        cmocka_unit_test(test_smollm2_json_matches_hf),
        cmocka_unit_test(test_config_rules),
        cmocka_unit_test(test_unsupported_components_are_named),
        cmocka_unit_test(test_missing_dir_is_not_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
