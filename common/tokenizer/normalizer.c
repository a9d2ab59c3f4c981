/* SPDX-License-Identifier: Apache-2.0 */
/* normalizer.c - Hugging Face normalizers the supported tokenizers use: Unicode NFC /
 * NFD / NFKC / NFKD (through utf8proc), Prepend (Llama 2's "▁" before a non-empty text)
 * and Replace with a literal or a regex pattern (Llama 2's " " -> "▁"). A Sequence is the
 * steps in order. Each step writes a fresh buffer; normalization runs once per text
 * segment of an encode call, never per token.
 */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/base/status.h"

/* Build out = s with every span in spans (pairs of offsets) replaced by rep. */
static int replace_spans(const char *s, size_t n, const size_t *spans, size_t n_spans,
                         const char *rep, size_t rlen, char **out, size_t *out_len)
{
    size_t total = n;
    for (size_t i = 0; i < n_spans; i++)
        total = total - (spans[2 * i + 1] - spans[2 * i]) + rlen;
    char *o = malloc(total + 1);
    if (!o)
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory normalizing %zu bytes", n);
    size_t pos = 0, prev = 0;
    for (size_t i = 0; i < n_spans; i++) {
        memcpy(o + pos, s + prev, spans[2 * i] - prev);
        pos += spans[2 * i] - prev;
        memcpy(o + pos, rep, rlen);
        pos += rlen;
        prev = spans[2 * i + 1];
    }
    memcpy(o + pos, s + prev, n - prev);
    pos += n - prev;
    o[pos] = '\0';
    *out = o;
    *out_len = pos;
    return 0;
}

static int unicode_form(enum norm_kind kind, const char *s, size_t n, char **out, size_t *out_len)
{
    utf8proc_option_t opt = UTF8PROC_STABLE;
    switch (kind) {
    case NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
    case NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    if (n == 0) {
        *out = calloc(1, 1);
        *out_len = 0;
        return *out ? 0 : deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, opt);
    if (r < 0)
        return deras_fail(r == UTF8PROC_ERROR_NOMEM ? DERAS_ENOMEM : DERAS_EFORMAT,
                          "tokenizer: Unicode normalization failed: %s", utf8proc_errmsg(r));
    *out = (char *)dst;
    *out_len = (size_t)r;
    return 0;
}

int norm_apply(const struct tokenizer *t, const char *s, size_t n, char **out, size_t *out_len)
{
    char *cur = malloc(n + 1);
    if (!cur)
        return deras_fail(DERAS_ENOMEM, "tokenizer: out of memory normalizing %zu bytes", n);
    memcpy(cur, s, n);
    cur[n] = '\0';
    size_t len = n;
    for (int i = 0; i < t->n_norm; i++) {
        const struct norm_step *st = &t->norm[i];
        char *next = NULL;
        size_t nlen = 0;
        int rc = 0;
        size_t *spans = NULL, n_spans = 0;
        switch (st->kind) {
        case NORM_PREPEND:
            if (len == 0)
                continue;
            next = malloc(len + st->alen + 1);
            if (!next) {
                rc = deras_fail(DERAS_ENOMEM, "tokenizer: out of memory");
                break;
            }
            memcpy(next, st->a, st->alen);
            memcpy(next + st->alen, cur, len + 1);
            nlen = len + st->alen;
            break;
        case NORM_REPLACE:
            rc = literal_find_all(st->a, st->alen, cur, len, &spans, &n_spans);
            if (rc == 0)
                rc = replace_spans(cur, len, spans, n_spans, st->b, st->blen, &next, &nlen);
            break;
        case NORM_REPLACE_RE:
            rc = regex_find_all(st->re, cur, len, &spans, &n_spans);
            if (rc == 0)
                rc = replace_spans(cur, len, spans, n_spans, st->b, st->blen, &next, &nlen);
            break;
        default:
            rc = unicode_form(st->kind, cur, len, &next, &nlen);
            break;
        }
        free(spans);
        free(cur);
        if (rc < 0)
            return rc;
        cur = next;
        len = nlen;
    }
    *out = cur;
    *out_len = len;
    return 0;
}

void norm_free_steps(struct norm_step *steps, int n)
{
    if (!steps)
        return;
    for (int i = 0; i < n; i++) {
        free(steps[i].a);
        free(steps[i].b);
        pcre2_code_free(steps[i].re);
    }
    free(steps);
}
