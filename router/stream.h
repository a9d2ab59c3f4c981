/* SPDX-License-Identifier: Apache-2.0 */
/* stream.h - one sample's text: generated token ids in, text deltas out.
 *
 * Each sample of a request owns a stream: its ids go through the incremental
 * detokenizer (which never splits a UTF-8 character) and then through the stop matcher
 * (which holds back whatever could still become a stop string), and what comes out is
 * appended to the stream's pending text together with the ids (and their logprobs). The
 * router sends the pending part as one chunk per STEP frame and clears it
 * (stream_take); a non-streaming request never clears it and sends it whole in its
 * final. A completed stop string ends the stream: the text before it is pending, the
 * stop string and everything after it are dropped, and later pushes are ignored.
 *
 * Streams are pooled with the request slots (stream_start resets one for a new sample),
 * so after warm-up a token costs no allocation: buffers grow geometrically and keep
 * their capacity (stream_trim gives back what a huge request left behind).
 */
#ifndef DERAS_ROUTER_STREAM_H
#define DERAS_ROUTER_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/protocol.h"
#include "common/tokenizer/tokenizer.h"

typedef struct stream stream_t;

/* A stream detokenizing with t (borrowed; must outlive the stream). Special tokens
 * produce no text. DERAS_EINVAL for a NULL t, DERAS_ENOMEM. */
int stream_new(const tokenizer_t *t, stream_t **out);
void stream_destroy(stream_t **s);

/* Start a new sample: forget everything, install the n_stops stop strings (lens[i] bytes
 * each, non-empty, no NUL byte, at most PROTO_MAX_STOP_BYTES), keep logprobs when
 * `logprobs`. The request's min_tokens: stop strings are looked for only in the text of
 * the tokens after the first min_tokens. DERAS_EINVAL for a bad stop string, DERAS_ENOMEM.
 * O(total stop bytes); allocates only when there are stop strings. */
int stream_start(stream_t *s, const char *const *stops, const size_t *lens, int n_stops,
                 bool logprobs, int min_tokens);

/* Append one generated token (lp may be NULL). After a stop this is a no-op returning
 * DERAS_ECLOSED. An id outside the tokenizer's vocabulary adds no text. DERAS_ENOMEM if a
 * buffer cannot grow (the stream is unchanged). O(token bytes x stop bytes). */
int stream_push(stream_t *s, int32_t id, const proto_logprob *lp);

/* Natural end of the sample (or an abort): release what the detokenizer and the stop
 * matcher hold into the pending text. A stop string completed by the held bytes still
 * counts (stream_stopped becomes true). Idempotent. */
int stream_finish(stream_t *s);

bool stream_stopped(const stream_t *s);
/* Index of the stop string that ended the stream, or -1. */
int stream_stop_index(const stream_t *s);
/* Tokens pushed since stream_start (including the one completing a stop string). */
int stream_n_tokens(const stream_t *s);

/* The pending part: text (not NUL-terminated), ids, and one logprob per id (NULL when
 * logprobs were not asked). Valid until the next call on s. */
const char *stream_text(const stream_t *s, size_t *len);
const int32_t *stream_ids(const stream_t *s, int *n);
const proto_logprob *stream_logprobs(const stream_t *s);
bool stream_has_pending(const stream_t *s);

/* Forget the pending part (it was sent as a chunk). O(1). */
void stream_take(stream_t *s);

/* Free buffers grown beyond `keep_bytes` (call when a request ends). */
void stream_trim(stream_t *s, size_t keep_bytes);

#endif
