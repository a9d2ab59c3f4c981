/* SPDX-License-Identifier: Apache-2.0 */
/* test_tokenizer_vectors.c - the four vocabulary-only GGUF files of the outside vectors
 * (../shared/tokenizer-vectors, from llama.cpp's tests/): every input tokenizes to the
 * ids Hugging Face's tokenizers produced, and decodes back to the input.
 *
 * How llama.cpp's test-tokenizer-0 reads them, and so how we do: NAME.gguf.inp is split at
 * every "\n__ggml_vocab_test__\n" (the file ends with one, which closes the last input);
 * line i of NAME.gguf.out holds the expected ids of input i separated by spaces (leading
 * space, empty line for no ids). Tokenization runs with add_special = false (no BOS) and
 * parse_special = false, as that test calls common_tokenize(ctx, text, false, false).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "test_util.h"
#include "tok_test_common.h"

struct vcase {
    char *text;
    size_t len;
    int32_t *ids;
    size_t n_ids;
};

static size_t read_cases(const char *dir, const char *name, struct vcase **out)
{
    char p_inp[1024], p_out[1024];
    snprintf(p_inp, sizeof p_inp, "%s/%s.inp", dir, name);
    snprintf(p_out, sizeof p_out, "%s/%s.out", dir, name);
    size_t ni = 0, no = 0;
    char *inp = test_read_file(p_inp, &ni), *outf = test_read_file(p_out, &no);
    if (!inp || !outf)
        fail_msg("cannot read %s or %s", p_inp, p_out);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t seplen = sizeof sep - 1;
    struct vcase *cases = NULL;
    size_t n = 0;
    for (size_t pos = 0; pos < ni;) {
        char *next = memmem(inp + pos, ni - pos, sep, seplen);
        size_t end = next ? (size_t)(next - inp) : ni;
        cases = realloc(cases, (n + 1) * sizeof *cases);
        cases[n].len = end - pos;
        cases[n].text = malloc(end - pos + 1);
        memcpy(cases[n].text, inp + pos, end - pos);
        cases[n].text[end - pos] = '\0';
        cases[n].ids = NULL;
        cases[n].n_ids = 0;
        n++;
        if (!next)
            break;
        pos = end + seplen;
    }
    size_t line = 0;
    for (char *p = outf; p < outf + no && line < n; line++) {
        char *eol = memchr(p, '\n', (size_t)(outf + no - p));
        if (!eol)
            eol = outf + no;
        *eol = '\0';
        for (char *q = p; *q;) {
            char *endp;
            long v = strtol(q, &endp, 10);
            if (endp == q) {
                q++;
                continue;
            }
            cases[line].ids = realloc(cases[line].ids, (cases[line].n_ids + 1) * sizeof(int32_t));
            cases[line].ids[cases[line].n_ids++] = (int32_t)v;
            q = endp;
        }
        p = eol + 1;
    }
    if (line != n)
        fail_msg("%s: %zu inputs but %zu output lines", name, n, line);
    free(inp);
    free(outf);
    *out = cases;
    return n;
}

static void run_vocab(const char *name)
{
    const char *dir = test_tokenizer_vectors_dir();
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tokenizer_t *t = tt_from_gguf(path);
    assert_non_null(t);
    struct vcase *cases;
    size_t n = read_cases(dir, name, &cases);
    assert_true(n > 40);
    size_t ok_ids = 0, ok_rt = 0, ok_stream = 0;
    for (size_t i = 0; i < n; i++) {
        struct vcase *c = &cases[i];
        size_t ng;
        int rc;
        int32_t *got = tt_encode(t, c->text, c->len, false, false, &ng, &rc);
        if (!got) {
            fprintf(stderr, "%s case %zu: encode failed: %s\n", name, i, deras_errmsg());
            continue;
        }
        if (tt_ids_equal(got, ng, c->ids, c->n_ids)) {
            ok_ids++;
        } else {
            fprintf(stderr, "%s case %zu: ids differ\n", name, i);
            tt_print_str(stderr, "input", c->text, c->len);
            tt_print_ids(stderr, "expected", c->ids, c->n_ids);
            tt_print_ids(stderr, "got", got, ng);
        }
        size_t dl = 0, sl = 0;
        char *dec = tt_decode(t, got, ng, false, &dl);
        if (dec && dl == c->len && !memcmp(dec, c->text, dl)) {
            ok_rt++;
        } else {
            fprintf(stderr, "%s case %zu: decode(encode(x)) != x\n", name, i);
            tt_print_str(stderr, "input", c->text, c->len);
            if (dec)
                tt_print_str(stderr, "decoded", dec, dl);
        }
        char *st = tt_stream(t, got, ng, false, &sl);
        if (st && dec && sl == dl && !memcmp(st, dec, dl))
            ok_stream++;
        else
            fprintf(stderr, "%s case %zu: streamed text differs from decode\n", name, i);
        free(st);
        free(dec);
        free(got);
    }
    printf("%s: %zu/%zu ids equal, %zu/%zu round trips, %zu/%zu streams = decode\n", name, ok_ids, n, ok_rt, n,
           ok_stream, n);
    for (size_t i = 0; i < n; i++) {
        free(cases[i].text);
        free(cases[i].ids);
    }
    free(cases);
    tokenizer_destroy(&t);
    assert_int_equal(ok_ids, n);
    assert_int_equal(ok_rt, n);
    assert_int_equal(ok_stream, n);
}

static void test_llama_spm(void **state) { (void)state; run_vocab("ggml-vocab-llama-spm.gguf"); }
static void test_phi3(void **state) { (void)state; run_vocab("ggml-vocab-phi-3.gguf"); }
static void test_gpt2(void **state) { (void)state; run_vocab("ggml-vocab-gpt-2.gguf"); }
static void test_starcoder(void **state) { (void)state; run_vocab("ggml-vocab-starcoder.gguf"); }

int main(void)
{
    test_tokenizer_vectors_dir(); /* skip the whole file, with the reason, when absent */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_spm),
        cmocka_unit_test(test_phi3),
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_starcoder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
