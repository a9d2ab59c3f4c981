/* SPDX-License-Identifier: Apache-2.0 */
/* test_detok.c - decode and the streaming detokenizer at the edges: characters spread
 * over several byte tokens are held back until complete, invalid bytes become U+FFFD
 * (the "maximal subpart" rule), skip_special, the SentencePiece leading space removed only
 * at the start of a text, ERANGE that changes nothing, and encode's argument checks.
 * Tokenizers: the small trained ones of tests/data/tokenizer (no model needed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_util.h"
#include "tok_test_common.h"

static tokenizer_t *spm, *bl;

static tokenizer_t *load(const char *name)
{
    char rel[128];
    snprintf(rel, sizeof rel, "tokenizer/%s", name);
    char *dir = test_data_path(rel);
    tokenizer_t *t = NULL;
    if (tokenizer_from_hf_dir(dir, &t) != DERAS_OK)
        fprintf(stderr, "%s: %s\n", dir, deras_errmsg());
    free(dir);
    return t;
}

static int setup(void **s)
{
    (void)s;
    spm = load("hf_spm_bytefallback");
    bl = load("hf_llama3_bpe");
    return spm && bl ? 0 : -1;
}

static int teardown(void **s)
{
    (void)s;
    tokenizer_destroy(&spm);
    tokenizer_destroy(&bl);
    return 0;
}

static int32_t byte_tok(int b)
{
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    int32_t id = tokenizer_find(spm, name);
    assert_true(id >= 0);
    return id;
}

/* Push and expect exactly `want` (NUL-terminated literal). */
static void push_expect(detok_t *d, int32_t id, const char *want)
{
    char out[1024];
    size_t n = 99;
    assert_int_equal(detok_push(d, id, out, sizeof out, &n), DERAS_OK);
    if (n != strlen(want) || memcmp(out, want, n))
        fail_msg("push %d: expected \"%s\" (%zu bytes), got \"%.*s\" (%zu bytes)", id, want, strlen(want), (int)n,
                 out, n);
}

static void flush_expect(detok_t *d, const char *want)
{
    char out[64];
    size_t n = 99;
    assert_int_equal(detok_flush(d, out, sizeof out, &n), DERAS_OK);
    if (n != strlen(want) || memcmp(out, want, n))
        fail_msg("flush: expected \"%s\", got \"%.*s\"", want, (int)n, out);
}

static void test_emoji_held_until_complete(void **s)
{
    (void)s;
    /* "😀" = F0 9F 98 80: four byte-fallback tokens in the SentencePiece tokenizer */
    size_t n;
    int32_t *ids = tt_encode(spm, "\xF0\x9F\x98\x80", 4, false, false, &n, NULL);
    assert_non_null(ids);
    assert_true(n >= 4);
    detok_t *d = NULL;
    assert_int_equal(detok_new(spm, false, true, &d), DERAS_OK);
    assert_non_null(d);
    for (size_t i = 0; i + 1 < n; i++)
        push_expect(d, ids[i], "");
    push_expect(d, ids[n - 1], "\xF0\x9F\x98\x80");
    flush_expect(d, "");
    free(ids);

    /* byte-level: the family emoji (ZWJ sequence) spans tokens that split characters */
    const char *fam = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7";
    ids = tt_encode(bl, fam, strlen(fam), false, false, &n, NULL);
    assert_non_null(ids);
    detok_reset(d, true);
    detok_t *d2 = NULL;
    assert_int_equal(detok_new(bl, false, true, &d2), DERAS_OK);
    size_t total = 0, split_tokens = 0;
    char all[256];
    for (size_t i = 0; i < n; i++) {
        size_t tl, got;
        tokenizer_token_bytes(bl, ids[i], &tl);
        assert_int_equal(detok_push(d2, ids[i], all + total, sizeof all - total, &got), DERAS_OK);
        assert_int_equal(utf8_valid_prefix(all + total, got), got);
        if (got != tl)
            split_tokens++;
        total += got;
    }
    size_t got;
    assert_int_equal(detok_flush(d2, all + total, sizeof all - total, &got), DERAS_OK);
    total += got;
    assert_int_equal(total, strlen(fam));
    assert_memory_equal(all, fam, total);
    assert_true(split_tokens > 0); /* the case is only meaningful if some token split a character */
    detok_destroy(&d2);
    detok_destroy(&d);
    assert_null(d);
    free(ids);
}

static void test_invalid_bytes_become_replacement(void **s)
{
    (void)s;
    detok_t *d = NULL;
    assert_int_equal(detok_new(spm, false, true, &d), DERAS_OK);
    push_expect(d, byte_tok(0xFF), "\xEF\xBF\xBD");   /* can never start a character */
    push_expect(d, byte_tok(0xE2), "");               /* may start one: held */
    push_expect(d, byte_tok(0x41), "\xEF\xBF\xBD" "A"); /* ...and did not */
    push_expect(d, byte_tok(0xF0), "");
    push_expect(d, byte_tok(0x9F), "");
    flush_expect(d, "\xEF\xBF\xBD");                  /* truncated at the end: one U+FFFD */
    push_expect(d, byte_tok(0xED), "");
    push_expect(d, byte_tok(0xA0), "\xEF\xBF\xBD\xEF\xBF\xBD"); /* surrogate: two maximal subparts */
    detok_destroy(&d);

    int32_t ids[] = {byte_tok(0xE2), byte_tok(0x41), byte_tok(0xC3), byte_tok(0xA9), byte_tok(0xC3)};
    char out[64];
    size_t n;
    assert_int_equal(tokenizer_decode(spm, ids, 5, false, out, sizeof out, &n), DERAS_OK);
    assert_string_equal(out, "\xEF\xBF\xBD" "A\xC3\xA9\xEF\xBF\xBD");
    assert_int_equal(n, strlen(out));
}

static void test_skip_special_and_leading_space(void **s)
{
    (void)s;
    size_t n;
    int32_t *ids = tt_encode(spm, "Hello world", 11, true, false, &n, NULL);
    assert_non_null(ids);
    assert_int_equal(ids[0], 1); /* <s> */
    char out[128];
    size_t len;
    assert_int_equal(tokenizer_decode(spm, ids, n, true, out, sizeof out, &len), DERAS_OK);
    assert_string_equal(out, "Hello world");
    assert_int_equal(tokenizer_decode(spm, ids, n, false, out, sizeof out, &len), DERAS_OK);
    assert_string_equal(out, "<s> Hello world"); /* as Hugging Face: the strip sees "<s>" first */

    /* a word token with its "\u2581" (a space when decoded) */
    int32_t word = -1;
    size_t bl1 = 0;
    const char *b1 = NULL;
    for (int32_t id = 0; id < tokenizer_vocab_size(spm) && word < 0; id++) {
        b1 = tokenizer_token_bytes(spm, id, &bl1);
        if (b1 && bl1 > 2 && b1[0] == ' ' && b1[1] != ' ')
            word = id;
    }
    assert_true(word >= 0);
    ids[1] = word;
    char want[64];
    snprintf(want, sizeof want, "%.*s", (int)bl1, b1);
    detok_t *d = NULL;
    assert_int_equal(detok_new(spm, true, true, &d), DERAS_OK);
    push_expect(d, ids[0], "");      /* skipped: the text has not started yet */
    push_expect(d, ids[1], want + 1); /* leading space dropped at the start */
    detok_reset(d, false);           /* a continuation keeps its leading space */
    push_expect(d, ids[1], want);
    detok_reset(d, true);
    push_expect(d, ids[1], want + 1);
    push_expect(d, ids[1], want);    /* only the first */
    detok_destroy(&d);
    assert_int_equal(detok_new(spm, false, true, &d), DERAS_OK);
    push_expect(d, ids[0], "<s>");
    detok_destroy(&d);
    free(ids);
}

static void test_erange_changes_nothing(void **s)
{
    (void)s;
    detok_t *d = NULL;
    assert_int_equal(detok_new(bl, false, true, &d), DERAS_OK);
    int32_t id = tokenizer_find(bl, "<|begin_of_text|>");
    char small[4];
    size_t n = 0;
    assert_int_equal(detok_push(d, id, small, sizeof small, &n), DERAS_ERANGE);
    push_expect(d, id, "<|begin_of_text|>");
    assert_int_equal(detok_push(d, tokenizer_vocab_size(bl), small, sizeof small, &n), DERAS_ERANGE);
    assert_int_equal(detok_push(d, -1, small, sizeof small, &n), DERAS_ERANGE);
    assert_true(detok_max_output(d) >= 3 * 3);
    detok_destroy(&d);
    detok_destroy(&d); /* NULL-safe */

    int32_t ids[] = {id, id};
    size_t need;
    assert_int_equal(tokenizer_decode(bl, ids, 2, false, small, sizeof small, &need), DERAS_ERANGE);
    assert_int_equal(need, 2 * strlen("<|begin_of_text|>"));
    assert_int_equal(small[3], '\0');
    int32_t bad = tokenizer_vocab_size(bl);
    char out[64];
    assert_int_equal(tokenizer_decode(bl, &bad, 1, false, out, sizeof out, &need), DERAS_ERANGE);
}

static void test_encode_arguments(void **s)
{
    (void)s;
    int32_t ids[2];
    size_t n = 0;
    assert_int_equal(tokenizer_encode(bl, "a\xC3(b", 4, false, false, ids, 2, &n), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), "byte 1"));
    assert_int_equal(tokenizer_encode(bl, "\xED\xA0\x80", 3, false, false, ids, 2, &n), DERAS_EFORMAT);
    assert_int_equal(tokenizer_encode(bl, "\xC0\xAF", 2, false, false, ids, 2, &n), DERAS_EFORMAT);
    const char *text = "one two three four five";
    assert_int_equal(tokenizer_encode(bl, text, strlen(text), false, false, ids, 2, &n), DERAS_ERANGE);
    assert_true(n > 2);
    size_t n2;
    int32_t *all = tt_encode(bl, text, strlen(text), false, false, &n2, NULL);
    assert_int_equal(n, n2);
    assert_int_equal(ids[0], all[0]);
    assert_int_equal(ids[1], all[1]);
    free(all);
    assert_int_equal(tokenizer_encode(bl, "", 0, false, false, NULL, 0, &n), DERAS_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tokenizer_encode(bl, "", 0, true, false, ids, 2, &n), DERAS_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], tokenizer_bos(bl));
    assert_int_equal(tokenizer_encode(NULL, "", 0, false, false, ids, 2, &n), DERAS_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_emoji_held_until_complete),
        cmocka_unit_test(test_invalid_bytes_become_replacement),
        cmocka_unit_test(test_skip_special_and_leading_space),
        cmocka_unit_test(test_erange_changes_nothing),
        cmocka_unit_test(test_encode_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
