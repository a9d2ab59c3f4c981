/* SPDX-License-Identifier: Apache-2.0 */
/* stop_matcher.c - stop strings over streamed text (see stop_matcher.h).
 *
 * State is one byte buffer of held text. A push appends the piece, looks for the
 * earliest complete stop string, and otherwise keeps the longest suffix that is a proper
 * prefix of some stop string.
 */
#include "stop_matcher.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

struct stop_matcher {
    int n;
    char **stops;
    size_t *lens;
    size_t max_len;
    char *held;       /* capacity max_len + STOP_MATCHER_MAX_PIECE */
    size_t n_held;
    bool stopped;
};

int stop_matcher_new(const char *const *stops, int n, stop_matcher_t **out)
{
    if (!out || n < 0 || (n > 0 && !stops))
        return deras_fail(DERAS_EINVAL, "stop_matcher_new: bad arguments");
    *out = NULL;
    stop_matcher_t *m = calloc(1, sizeof *m);
    if (!m)
        goto nomem;
    m->n = n;
    m->stops = calloc((size_t)n + 1, sizeof(char *));
    m->lens = calloc((size_t)n + 1, sizeof(size_t));
    if (!m->stops || !m->lens)
        goto nomem;
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) {
            stop_matcher_destroy(&m);
            return deras_fail(DERAS_EINVAL, "stop string %d is empty", i);
        }
        m->lens[i] = strlen(stops[i]);
        if (!(m->stops[i] = strdup(stops[i])))
            goto nomem;
        m->max_len = m->lens[i] > m->max_len ? m->lens[i] : m->max_len;
    }
    if (!(m->held = malloc(m->max_len + STOP_MATCHER_MAX_PIECE)))
        goto nomem;
    *out = m;
    return DERAS_OK;
nomem:
    stop_matcher_destroy(&m);
    return deras_fail(DERAS_ENOMEM, "stop_matcher_new: out of memory");
}

void stop_matcher_destroy(stop_matcher_t **mp)
{
    if (!mp || !*mp)
        return;
    stop_matcher_t *m = *mp;
    if (m->stops)
        for (int i = 0; i < m->n; i++)
            free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->held);
    free(m);
    *mp = NULL;
}

void stop_matcher_reset(stop_matcher_t *m)
{
    m->n_held = 0;
    m->stopped = false;
}

size_t stop_matcher_out_cap(const stop_matcher_t *m)
{
    return m->max_len + STOP_MATCHER_MAX_PIECE;
}

/* Does held[at..] (to the end) equal the start of some stop string? */
static bool is_stop_prefix(const stop_matcher_t *m, size_t at)
{
    size_t tail = m->n_held - at;
    for (int i = 0; i < m->n; i++)
        if (tail < m->lens[i] && !memcmp(m->held + at, m->stops[i], tail))
            return true;
    return false;
}

int stop_matcher_push(stop_matcher_t *m, const char *text, size_t len, char *out, size_t cap,
                      size_t *n_out, int *stop)
{
    if (!m || (!text && len) || !out || !n_out || !stop || len > STOP_MATCHER_MAX_PIECE ||
        cap < stop_matcher_out_cap(m))
        return deras_fail(DERAS_EINVAL, "stop_matcher_push: bad arguments");
    *n_out = 0;
    *stop = -1;
    if (m->stopped)
        return deras_fail(DERAS_ECLOSED, "stop_matcher_push: stream already stopped");
    memcpy(m->held + m->n_held, text, len);
    m->n_held += len;

    /* earliest complete stop string */
    size_t best_at = SIZE_MAX;
    for (int i = 0; i < m->n; i++) {
        if (m->lens[i] > m->n_held)
            continue;
        for (size_t at = 0; at + m->lens[i] <= m->n_held && at < best_at; at++)
            if (!memcmp(m->held + at, m->stops[i], m->lens[i])) {
                best_at = at;
                *stop = i;
                break;
            }
    }
    if (*stop >= 0) {
        memcpy(out, m->held, best_at);
        *n_out = best_at;
        m->n_held = 0;
        m->stopped = true;
        return DERAS_OK;
    }
    /* keep the longest suffix that may still grow into a stop string */
    size_t keep_from = m->n_held;
    size_t lo = m->n_held > m->max_len ? m->n_held - m->max_len + 1 : 0;
    for (size_t at = lo; at < m->n_held; at++)
        if (is_stop_prefix(m, at)) {
            keep_from = at;
            break;
        }
    memcpy(out, m->held, keep_from);
    *n_out = keep_from;
    memmove(m->held, m->held + keep_from, m->n_held - keep_from);
    m->n_held -= keep_from;
    return DERAS_OK;
}

int stop_matcher_flush(stop_matcher_t *m, char *out, size_t cap, size_t *n_out)
{
    if (!m || !out || !n_out || cap < stop_matcher_out_cap(m))
        return deras_fail(DERAS_EINVAL, "stop_matcher_flush: bad arguments");
    memcpy(out, m->held, m->n_held);
    *n_out = m->n_held;
    m->n_held = 0;
    return DERAS_OK;
}
