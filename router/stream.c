/* SPDX-License-Identifier: Apache-2.0 */
/* stream.c - one sample's text: generated token ids in, text deltas out (see stream.h).
 *
 * The path of a token: detok_push writes the bytes it completes into `dt_out`; those go
 * to the stop matcher in pieces of at most STOP_MATCHER_MAX_PIECE bytes, and what the
 * matcher releases (into `sm_out`) is appended to the pending text. Without stop strings
 * the matcher is skipped. Both scratch buffers are sized once from the tokenizer's
 * longest token, so the only growth is the pending text, ids and logprobs, which double
 * when full and keep their capacity from one sample to the next.
 */
#include "router/stream.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/tokenizer/stop_matcher.h"

struct stream {
    const tokenizer_t *tok;
    detok_t *dt;
    stop_matcher_t *sm;       /* NULL without stop strings */
    char *dt_out;             /* detok_max_output bytes */
    size_t dt_cap;
    char *sm_out;             /* stop_matcher_out_cap bytes (largest possible matcher) */
    size_t sm_cap;

    bool logprobs, stopped, finished;
    int stop_index;
    int n_tokens;             /* pushed since start */
    int min_tokens;           /* the text of the first min_tokens tokens skips the matcher */

    char *text;               /* pending text */
    size_t n_text, text_cap;
    int32_t *ids;             /* pending ids */
    int n_ids, ids_cap;
    proto_logprob *lps;       /* pending logprobs, ids_cap entries when logprobs */
    int lps_cap;
};

int stream_new(const tokenizer_t *t, stream_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "stream_new: NULL out");
    *out = NULL;
    if (!t)
        return deras_fail(DERAS_EINVAL, "stream_new: NULL tokenizer");
    int rc;
    stream_t *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->tok = t;
    if ((rc = detok_new(t, true, false, &s->dt)))
        goto fail;
    s->dt_cap = detok_max_output(s->dt);
    s->sm_cap = PROTO_MAX_STOP_BYTES + STOP_MATCHER_MAX_PIECE;
    if (!(s->dt_out = malloc(s->dt_cap)) || !(s->sm_out = malloc(s->sm_cap)))
        goto nomem;
    s->stop_index = -1;
    *out = s;
    return DERAS_OK;
nomem:
    rc = deras_fail(DERAS_ENOMEM, "stream_new: out of memory");
fail:
    stream_destroy(&s);
    return rc;
}

void stream_destroy(stream_t **sp)
{
    if (!sp || !*sp)
        return;
    stream_t *s = *sp;
    detok_destroy(&s->dt);
    stop_matcher_destroy(&s->sm);
    free(s->dt_out);
    free(s->sm_out);
    free(s->text);
    free(s->ids);
    free(s->lps);
    free(s);
    *sp = NULL;
}

int stream_start(stream_t *s, const char *const *stops, const size_t *lens, int n_stops,
                 bool logprobs, int min_tokens)
{
    if (!s || n_stops < 0 || n_stops > PROTO_MAX_STOPS || (n_stops > 0 && (!stops || !lens)))
        return deras_fail(DERAS_EINVAL, "stream_start: bad arguments");
    stop_matcher_destroy(&s->sm);
    detok_reset(s->dt, false);
    s->logprobs = logprobs;
    s->stopped = s->finished = false;
    s->stop_index = -1;
    s->n_tokens = 0;
    s->min_tokens = min_tokens;
    stream_take(s);
    if (n_stops == 0)
        return DERAS_OK;

    /* stop_matcher_new wants C strings: copy each into one NUL-separated block. */
    char block[PROTO_MAX_STOPS * (PROTO_MAX_STOP_BYTES + 1)];
    const char *ptrs[PROTO_MAX_STOPS];
    size_t at = 0;
    for (int i = 0; i < n_stops; i++) {
        if (!stops[i] || lens[i] == 0 || lens[i] > PROTO_MAX_STOP_BYTES ||
            memchr(stops[i], '\0', lens[i]))
            return deras_fail(DERAS_EINVAL, "stop string %d is empty, too long or holds a NUL", i);
        memcpy(block + at, stops[i], lens[i]);
        block[at + lens[i]] = '\0';
        ptrs[i] = block + at;
        at += lens[i] + 1;
    }
    return stop_matcher_new(ptrs, n_stops, &s->sm);
}

/* Make room for `more` text bytes. */
static int reserve_text(stream_t *s, size_t more)
{
    if (s->n_text + more <= s->text_cap)
        return DERAS_OK;
    size_t cap = s->text_cap ? s->text_cap : 256;
    while (cap < s->n_text + more)
        cap *= 2;
    char *p = realloc(s->text, cap);
    if (!p)
        return deras_fail(DERAS_ENOMEM, "stream: out of memory for %zu text bytes", cap);
    s->text = p;
    s->text_cap = cap;
    return DERAS_OK;
}

/* Make room for one more id (and logprob). */
static int reserve_id(stream_t *s)
{
    if (s->n_ids < s->ids_cap && (!s->logprobs || s->n_ids < s->lps_cap))
        return DERAS_OK;
    int cap = s->ids_cap ? s->ids_cap : 16;
    while (cap <= s->n_ids)
        cap *= 2;
    if (cap > s->ids_cap) {
        int32_t *p = realloc(s->ids, (size_t)cap * sizeof *p);
        if (!p)
            return deras_fail(DERAS_ENOMEM, "stream: out of memory for %d ids", cap);
        s->ids = p;
        s->ids_cap = cap;
    }
    if (s->logprobs && s->lps_cap < s->ids_cap) {
        proto_logprob *q = realloc(s->lps, (size_t)s->ids_cap * sizeof *q);
        if (!q)
            return deras_fail(DERAS_ENOMEM, "stream: out of memory for %d logprobs", s->ids_cap);
        s->lps = q;
        s->lps_cap = s->ids_cap;
    }
    return DERAS_OK;
}

/* Pass n bytes of detokenized text through the stop matcher into the pending text (past
 * it while the stream has no more than min_tokens tokens: the matcher never saw those and
 * holds nothing). The caller reserved n + PROTO_MAX_STOP_BYTES bytes: the matcher never
 * releases more than it was given plus what it held (less than the longest stop string). */
static int feed_text(stream_t *s, const char *txt, size_t n, bool flush)
{
    if (!s->sm || s->n_tokens <= s->min_tokens) {
        memcpy(s->text + s->n_text, txt, n);
        s->n_text += n;
        return DERAS_OK;
    }
    size_t off = 0;
    while (!s->stopped && (off < n || (off == n && flush))) {
        size_t piece = n - off > STOP_MATCHER_MAX_PIECE ? STOP_MATCHER_MAX_PIECE : n - off;
        size_t n_out = 0;
        int stop = -1, rc;
        if (piece > 0 || !flush) {
            rc = stop_matcher_push(s->sm, txt + off, piece, s->sm_out, s->sm_cap, &n_out, &stop);
            off += piece;
        } else {
            rc = stop_matcher_flush(s->sm, s->sm_out, s->sm_cap, &n_out);
            flush = false;
        }
        if (rc)
            return rc;
        memcpy(s->text + s->n_text, s->sm_out, n_out);
        s->n_text += n_out;
        if (stop >= 0) {
            s->stopped = true;
            s->stop_index = stop;
        }
        if (piece == 0 && off == n)
            break;
    }
    return DERAS_OK;
}

int stream_push(stream_t *s, int32_t id, const proto_logprob *lp)
{
    if (!s)
        return deras_fail(DERAS_EINVAL, "stream_push: NULL stream");
    if (s->stopped || s->finished)
        return DERAS_ECLOSED;
    int rc = reserve_id(s);
    if (rc)
        return rc;
    size_t n = 0;
    if (id >= 0 && id < tokenizer_vocab_size(s->tok)) {
        if ((rc = detok_push(s->dt, id, s->dt_out, s->dt_cap, &n)))
            return rc;
        if ((rc = reserve_text(s, n + PROTO_MAX_STOP_BYTES)))
            return rc; /* the detokenizer consumed the token; its text is lost only on ENOMEM */
    }
    s->ids[s->n_ids] = id;
    if (s->logprobs) {
        if (lp)
            s->lps[s->n_ids] = *lp;
        else
            s->lps[s->n_ids] = (proto_logprob){.token_id = id};
    }
    s->n_ids++;
    s->n_tokens++;
    return n ? feed_text(s, s->dt_out, n, false) : DERAS_OK;
}

int stream_finish(stream_t *s)
{
    if (!s)
        return deras_fail(DERAS_EINVAL, "stream_finish: NULL stream");
    if (s->finished)
        return DERAS_OK;
    s->finished = true;
    if (s->stopped)
        return DERAS_OK;
    size_t n = 0;
    int rc = detok_flush(s->dt, s->dt_out, s->dt_cap, &n);
    if (!rc)
        rc = reserve_text(s, n + PROTO_MAX_STOP_BYTES);
    if (!rc)
        rc = feed_text(s, s->dt_out, n, true);
    return rc;
}

bool stream_stopped(const stream_t *s)
{
    return s && s->stopped;
}

int stream_stop_index(const stream_t *s)
{
    return s ? s->stop_index : -1;
}

int stream_n_tokens(const stream_t *s)
{
    return s ? s->n_tokens : 0;
}

const char *stream_text(const stream_t *s, size_t *len)
{
    *len = s->n_text;
    return s->n_text ? s->text : "";
}

const int32_t *stream_ids(const stream_t *s, int *n)
{
    *n = s->n_ids;
    return s->ids;
}

const proto_logprob *stream_logprobs(const stream_t *s)
{
    return s->logprobs ? s->lps : NULL;
}

bool stream_has_pending(const stream_t *s)
{
    return s->n_ids > 0 || s->n_text > 0;
}

void stream_take(stream_t *s)
{
    s->n_text = 0;
    s->n_ids = 0;
}

void stream_trim(stream_t *s, size_t keep_bytes)
{
    if (!s)
        return;
    if (s->text_cap > keep_bytes) {
        free(s->text);
        s->text = NULL;
        s->text_cap = 0;
        s->n_text = 0;
    }
    if ((size_t)s->ids_cap * (sizeof *s->ids + (s->lps ? sizeof *s->lps : 0)) > keep_bytes) {
        free(s->ids);
        free(s->lps);
        s->ids = NULL;
        s->lps = NULL;
        s->ids_cap = s->lps_cap = 0;
        s->n_ids = 0;
    }
}
