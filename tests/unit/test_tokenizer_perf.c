/* SPDX-License-Identifier: Apache-2.0 */
/* test_tokenizer_perf.c - encoding speed: 100 KB of mixed text (the corpus repeated) must
 * tokenize well under a second with the SentencePiece-style and the byte-level tokenizers
 * (whose whole text is one BPE piece, or thousands of regex pieces). Label no-sanitize:
 * the sanitizer build is several times slower by design. The time is this thread's CPU
 * time, not the wall clock: on a loaded machine other processes hold the core for part of
 * the encoding, which says nothing about the tokenizer (it takes 20-40 ms of CPU here, so
 * the 0.5 s bound leaves room for a machine several times slower, and still catches a
 * quadratic turn).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <time.h>

#include "test_util.h"
#include "tok_test_common.h"

static char *make_text(size_t target, size_t *len)
{
    char *p = test_data_path("tokenizer/corpus.json");
    json_error_t err;
    json_t *root = json_load_file(p, 0, &err);
    assert_non_null(root);
    json_t *corpus = json_object_get(root, "corpus");
    char *text = malloc(target + 4096);
    size_t n = 0;
    while (n < target)
        for (size_t i = 0; i < json_array_size(corpus) && n < target; i++) {
            const char *c = json_string_value(json_array_get(corpus, i));
            size_t cl = strlen(c);
            memcpy(text + n, c, cl);
            text[n + cl] = '\n';
            n += cl + 1;
        }
    json_decref(root);
    free(p);
    *len = n;
    return text;
}

static void time_encode(const char *dir_rel)
{
    char *dir = test_data_path(dir_rel);
    tokenizer_t *t = NULL;
    assert_int_equal(tokenizer_from_hf_dir(dir, &t), DERAS_OK);
    size_t len, n;
    char *text = make_text(100 * 1024, &len);
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    int32_t *ids = tt_encode(t, text, len, true, true, &n, NULL);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    assert_non_null(ids);
    printf("%s: %zu bytes -> %zu ids in %.1f ms of CPU\n", dir_rel, len, n, s * 1e3);
    if (s >= 0.5)
        fail_msg("%s: expected 100 KB to encode in under 0.5 s of CPU, took %.3f s", dir_rel, s);
    free(ids);
    free(text);
    free(dir);
    tokenizer_destroy(&t);
}

static void test_encode_100kb_spm(void **s) { (void)s; time_encode("tokenizer/hf_spm_bytefallback"); }
static void test_encode_100kb_bytelevel(void **s) { (void)s; time_encode("tokenizer/smollm2"); }
static void test_encode_100kb_llama3(void **s) { (void)s; time_encode("tokenizer/hf_llama3_bpe"); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_100kb_spm),
        cmocka_unit_test(test_encode_100kb_bytelevel),
        cmocka_unit_test(test_encode_100kb_llama3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
