/* SPDX-License-Identifier: Apache-2.0 */
/* detok.c - streaming detokenizer: token ids in, complete UTF-8 text out.
 *
 * A push joins the bytes held back from earlier tokens (at most 3: the start of one
 * character) with the new token's bytes in a scratch buffer sized at creation for the
 * longest token, then emits every complete character. Invalid sequences become U+FFFD by
 * the same "maximal subpart" rule as tokenizer_decode, and the bytes of a character that
 * is still incomplete at the end are held for the next push. So the concatenation of
 * every push and the final flush is exactly tokenizer_decode of the same ids, whatever
 * the split into tokens, and no output ever ends inside a character. The leading space a
 * SentencePiece tokenizer prefixed is dropped from the first bytes of a text, as decode
 * does. A push that does not fit in `cap` changes nothing, so the caller may retry.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "tokenizer_internal.h"
#include "common/base/utf8.h"

struct detok {
    const struct tokenizer *t;
    bool skip_special;
    bool at_start;
    char held[4];
    size_t n_held;
    char *scratch; /* held + one token's bytes */
    size_t scratch_cap;
};

int detok_new(const tokenizer_t *t, bool skip_special, bool at_start, detok_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "detok_new: NULL out");
    *out = NULL;
    if (!t)
        return deras_fail(DERAS_EINVAL, "detok_new: NULL tokenizer");
    struct detok *d = calloc(1, sizeof *d);
    if (!d)
        return deras_fail(DERAS_ENOMEM, "detok_new: out of memory");
    d->t = t;
    d->skip_special = skip_special;
    d->at_start = at_start;
    d->scratch_cap = t->max_token_bytes + 4;
    d->scratch = malloc(d->scratch_cap);
    if (!d->scratch) {
        free(d);
        return deras_fail(DERAS_ENOMEM, "detok_new: out of memory");
    }
    *out = d;
    return DERAS_OK;
}

void detok_destroy(detok_t **dp)
{
    if (!dp || !*dp)
        return;
    free((*dp)->scratch);
    free(*dp);
    *dp = NULL;
}

void detok_reset(detok_t *d, bool at_start)
{
    if (!d)
        return;
    d->at_start = at_start;
    d->n_held = 0;
}

size_t detok_max_output(const detok_t *d)
{
    return d ? 3 * (d->t->max_token_bytes + 3) : 0;
}

/* Emit the complete characters of s[0..n) (invalid ones as U+FFFD); with `final`, a
 * trailing incomplete character too. Returns bytes written (or needed when they do not
 * fit) and the count of trailing bytes left unconsumed in *keep. */
static size_t emit(const char *s, size_t n, bool final, char *out, size_t cap, size_t *keep)
{
    size_t end = n;
    *keep = 0;
    if (!final) {
        /* A trailing incomplete character starts at most 3 bytes before the end. */
        for (size_t k = n; k-- > (n > 3 ? n - 3 : 0);) {
            if (((uint8_t)s[k] & 0xC0) == 0x80)
                continue;
            /* k leads a character, so the scan of s[0..k) ends exactly at k. */
            if (utf8_incomplete_len(s + k, n - k) > 0) {
                end = k;
                *keep = n - k;
            }
            break;
        }
    }
    return utf8_lossy_copy(s, end, out, cap, 0);
}

int detok_push(detok_t *d, int32_t id, char *out, size_t cap, size_t *n_out)
{
    if (!d || (!out && cap > 0) || !n_out)
        return deras_fail(DERAS_EINVAL, "detok_push: NULL argument");
    const struct tokenizer *t = d->t;
    if (id < 0 || id >= t->n_vocab)
        return deras_fail(DERAS_ERANGE, "detok_push: id %d outside the vocabulary of %d", id, t->n_vocab);
    const struct tok_token *tk = &t->tokens[id];
    *n_out = 0;
    if ((d->skip_special && (tk->flags & TOKF_SPECIAL)) || tk->bytes_len == 0)
        return 0;
    const char *b = t->arena + tk->bytes_off;
    size_t bl = tk->bytes_len;
    bool strip = d->at_start && t->strip_leading_space && b[0] == ' ';
    if (strip) {
        b++;
        bl--;
    }
    memcpy(d->scratch, d->held, d->n_held);
    memcpy(d->scratch + d->n_held, b, bl);
    size_t n = d->n_held + bl, keep;
    size_t need = emit(d->scratch, n, false, out, cap, &keep);
    if (need > cap)
        return deras_fail(DERAS_ERANGE, "detok_push: %zu bytes do not fit in %zu", need, cap);
    memcpy(d->held, d->scratch + n - keep, keep);
    d->n_held = keep;
    d->at_start = false;
    *n_out = need;
    return 0;
}

int detok_flush(detok_t *d, char *out, size_t cap, size_t *n_out)
{
    if (!d || (!out && cap > 0) || !n_out)
        return deras_fail(DERAS_EINVAL, "detok_flush: NULL argument");
    size_t keep;
    size_t need = emit(d->held, d->n_held, true, out, cap, &keep);
    if (need > cap)
        return deras_fail(DERAS_ERANGE, "detok_flush: %zu bytes do not fit in %zu", need, cap);
    d->n_held = 0;
    *n_out = need;
    return 0;
}
