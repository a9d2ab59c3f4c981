/* SPDX-License-Identifier: Apache-2.0 */
/* stop_matcher.h - stop strings over streamed text, never emitting part of a stop.
 *
 * Text arrives in pieces (one detokenized token at a time). Whatever could still turn out
 * to be the start of a stop string is held back; everything before it is released. When a
 * stop string completes, the text before it is released and the stream ends (the stop
 * string itself is not part of the output, as in the OpenAI API). At the natural end of a
 * stream, stop_matcher_flush() releases what was held. Matching is on bytes; since stop
 * strings are valid UTF-8 and held text always starts where a stop string could start,
 * released text never ends inside a character that the stream completed.
 *
 * Cost per push: O(held + piece) x total stop-string length. Memory is fixed at creation.
 */
#ifndef DERAS_STOP_MATCHER_H
#define DERAS_STOP_MATCHER_H

#include <stdbool.h>
#include <stddef.h>

typedef struct stop_matcher stop_matcher_t;

#define STOP_MATCHER_MAX_PIECE 1024 /* bytes per push */

/* Copies the n stop strings (each non-empty). */
int stop_matcher_new(const char *const *stops, int n, stop_matcher_t **out);
void stop_matcher_destroy(stop_matcher_t **m);
void stop_matcher_reset(stop_matcher_t *m);

/* Feed `len` bytes (<= STOP_MATCHER_MAX_PIECE). Released text goes to out (cap must be at
 * least stop_matcher_out_cap()), its length to *n_out. *stop is the index of the stop
 * string that completed, or -1; after a stop, further pushes are DERAS_ECLOSED. */
int stop_matcher_push(stop_matcher_t *m, const char *text, size_t len, char *out, size_t cap,
                      size_t *n_out, int *stop);

/* Release everything held (end of stream without a stop). */
int stop_matcher_flush(stop_matcher_t *m, char *out, size_t cap, size_t *n_out);

/* Output buffer size that always suffices for push and flush. */
size_t stop_matcher_out_cap(const stop_matcher_t *m);

#endif
