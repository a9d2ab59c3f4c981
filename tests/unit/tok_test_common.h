/* SPDX-License-Identifier: Apache-2.0 */
/* tok_test_common.h - helpers shared by the tokenizer tests: building tokenizers from
 * GGUF files, comparing id lists with messages that show both sides, and the checks every
 * corpus string goes through (decode round trip, streaming detokenizer = decode). */
#ifndef DERAS_TOK_TEST_COMMON_H
#define DERAS_TOK_TEST_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checkpoint/gguf.h"
#include "common/base/status.h"
#include "common/tokenizer/tokenizer.h"
#include "common/base/utf8.h"

static inline tokenizer_t *tt_from_gguf(const char *path)
{
    gguf_t *g = NULL;
    int rc = gguf_open(path, &g);
    if (rc != DERAS_OK) {
        fprintf(stderr, "gguf_open(%s): %s: %s\n", path, deras_status_name(rc), deras_errmsg());
        return NULL;
    }
    tokenizer_t *t = NULL;
    rc = tokenizer_from_gguf(g, &t);
    if (rc != DERAS_OK)
        fprintf(stderr, "tokenizer_from_gguf(%s): %s: %s\n", path, deras_status_name(rc), deras_errmsg());
    gguf_destroy(&g);
    return t;
}

/* Encode into a malloc'd array (*n ids); NULL and the status in *rc_out on failure. */
static inline int32_t *tt_encode(const tokenizer_t *t, const char *s, size_t len, bool add_special,
                                 bool parse_special, size_t *n, int *rc_out)
{
    size_t cap = len + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    int rc = tokenizer_encode(t, s, len, add_special, parse_special, ids, cap, n);
    if (rc == DERAS_ERANGE) {
        cap = *n;
        ids = realloc(ids, (cap ? cap : 1) * sizeof *ids);
        rc = tokenizer_encode(t, s, len, add_special, parse_special, ids, cap, n);
    }
    if (rc_out)
        *rc_out = rc;
    if (rc != DERAS_OK) {
        free(ids);
        return NULL;
    }
    return ids;
}

static inline char *tt_decode(const tokenizer_t *t, const int32_t *ids, size_t n, bool skip_special,
                              size_t *len)
{
    size_t need = 0;
    char probe[1];
    int rc = tokenizer_decode(t, ids, n, skip_special, probe, sizeof probe, &need);
    if (rc != DERAS_OK && rc != DERAS_ERANGE)
        return NULL;
    char *out = malloc(need + 1);
    rc = tokenizer_decode(t, ids, n, skip_special, out, need + 1, &need);
    if (rc != DERAS_OK) {
        free(out);
        return NULL;
    }
    if (len)
        *len = need;
    return out;
}

static inline void tt_print_ids(FILE *f, const char *what, const int32_t *ids, size_t n)
{
    fprintf(f, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 64; i++)
        fprintf(f, " %d", ids[i]);
    if (n > 64)
        fprintf(f, " ...");
    fputc('\n', f);
}

/* Show a string with escapes so whitespace differences are visible. */
static inline void tt_print_str(FILE *f, const char *what, const char *s, size_t n)
{
    fprintf(f, "  %s: \"", what);
    for (size_t i = 0; i < n && i < 300; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c == '\r')
            fputs("\\r", f);
        else if (c < 0x20)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputs(n > 300 ? "...\"\n" : "\"\n", f);
}

static inline bool tt_ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

/* Push ids one at a time through a streaming detokenizer and flush; checks that every
 * chunk is valid UTF-8 and returns the concatenation (malloc'd), or NULL after printing
 * what went wrong. */
static inline char *tt_stream(const tokenizer_t *t, const int32_t *ids, size_t n, bool skip_special,
                              size_t *len)
{
    detok_t *d = NULL;
    if (detok_new(t, skip_special, true, &d) != DERAS_OK)
        return NULL;
    size_t cap = detok_max_output(d), total = 0, acap = 256;
    char *chunk = malloc(cap), *all = malloc(acap);
    bool ok = true;
    for (size_t i = 0; i <= n && ok; i++) {
        size_t got = 0;
        int rc = i < n ? detok_push(d, ids[i], chunk, cap, &got) : detok_flush(d, chunk, cap, &got);
        if (rc != DERAS_OK) {
            fprintf(stderr, "  detok %s failed at %zu: %s\n", i < n ? "push" : "flush", i, deras_errmsg());
            ok = false;
            break;
        }
        if (utf8_valid_prefix(chunk, got) != got) {
            fprintf(stderr, "  detok chunk %zu is not valid UTF-8\n", i);
            ok = false;
        }
        while (total + got + 1 > acap)
            all = realloc(all, acap *= 2);
        memcpy(all + total, chunk, got);
        total += got;
    }
    detok_destroy(&d);
    free(chunk);
    if (!ok) {
        free(all);
        return NULL;
    }
    all[total] = '\0';
    *len = total;
    return all;
}

#endif
