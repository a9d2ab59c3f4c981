/* SPDX-License-Identifier: Apache-2.0 */
/* tok_vectors.h - checking a tokenizer against a vectors.json written by
 * tests/ref/make_tokenizer_vectors.py (Hugging Face tokenizers' output for each corpus
 * string): ids with parse_special on and off, with add_special, decode with and without
 * skip_special, and the streaming detokenizer equal to decode. Prints one line per
 * mismatch with both sides and a summary line with the counts. */
#ifndef DERAS_TOK_VECTORS_H
#define DERAS_TOK_VECTORS_H

#include <jansson.h>

#include "tok_test_common.h"

static inline int32_t *tv_ids(json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return v;
}

/* Returns the number of failed checks; `label` names the tokenizer in messages. */
static inline size_t tv_check(const tokenizer_t *t, const char *vectors_path, const char *label)
{
    json_error_t err;
    json_t *root = json_load_file(vectors_path, 0, &err);
    if (!root) {
        fprintf(stderr, "%s: %s\n", vectors_path, err.text);
        return 1;
    }
    json_t *cases = json_object_get(root, "cases");
    size_t n = json_array_size(cases), bad = 0;
    size_t ok[6] = {0};
    static const char *what[6] = {"ids", "ids (parse_special off)", "ids (add_special)", "decode",
                                  "decode (skip_special)", "stream = decode"};
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(cases, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text"));
        static const char *keys[3] = {"ids", "ids_no_parse_special", "ids_add_special"};
        static const bool parse[3] = {true, false, true}, add[3] = {false, false, true};
        int32_t *got_main = NULL;
        size_t n_main = 0;
        for (int k = 0; k < 3; k++) {
            size_t ne, ng;
            int rc;
            int32_t *exp = tv_ids(json_object_get(c, keys[k]), &ne);
            int32_t *got = tt_encode(t, text, len, add[k], parse[k], &ng, &rc);
            if (got && tt_ids_equal(exp, ne, got, ng)) {
                ok[k]++;
            } else {
                bad++;
                fprintf(stderr, "%s case %zu: %s differ%s%s\n", label, i, what[k], got ? "" : ": ",
                        got ? "" : deras_errmsg());
                tt_print_str(stderr, "input", text, len);
                tt_print_ids(stderr, "expected (HF)", exp, ne);
                if (got)
                    tt_print_ids(stderr, "got", got, ng);
            }
            free(exp);
            if (k == 0) {
                got_main = got;
                n_main = ng;
            } else {
                free(got);
            }
        }
        /* Decode the reference ids, so a mismatch above does not hide decode results. */
        size_t ne;
        int32_t *exp = tv_ids(json_object_get(c, "ids"), &ne);
        static const char *dkeys[2] = {"decoded", "decoded_skip_special"};
        for (int k = 0; k < 2; k++) {
            const char *want = json_string_value(json_object_get(c, dkeys[k]));
            size_t wl = json_string_length(json_object_get(c, dkeys[k])), dl = 0;
            char *dec = tt_decode(t, exp, ne, k == 1, &dl);
            if (dec && dl == wl && !memcmp(dec, want, wl)) {
                ok[3 + k]++;
            } else {
                bad++;
                fprintf(stderr, "%s case %zu: %s differs\n", label, i, what[3 + k]);
                tt_print_str(stderr, "expected (HF)", want, wl);
                if (dec)
                    tt_print_str(stderr, "got", dec, dl);
            }
            if (k == 0) {
                size_t sl = 0;
                char *st = tt_stream(t, exp, ne, false, &sl);
                if (st && dec && sl == dl && !memcmp(st, dec, dl)) {
                    ok[5]++;
                } else {
                    bad++;
                    fprintf(stderr, "%s case %zu: streamed text differs from decode\n", label, i);
                }
                free(st);
            }
            free(dec);
        }
        free(exp);
        free(got_main);
        (void)n_main;
    }
    printf("%s: %zu cases:", label, n);
    for (int k = 0; k < 6; k++)
        printf(" %s %zu/%zu%s", what[k], ok[k], n, k < 5 ? "," : "\n");
    json_decref(root);
    return bad;
}

#endif
