/* SPDX-License-Identifier: Apache-2.0 */
/* fake_frontend.h - a stand-in for deras-router's client side (its frontend) in a thread, for
 * client tests.
 *
 * A ROUTER socket on tcp://127.0.0.1 (a free port), decoding client frames with the real
 * codec (proto_decode_client) and answering with the real encoder. It generates no text:
 * sample k of a request yields token ids 100 + 10k + i with text "w<i> ". The prompt steers
 * it (same rules as tests/integration/fake_router.py):
 *
 *   "error:CODE"  the request fails with that error code (a proto_error_name)
 *   "silent"      never answered
 *   "slow"        a token every 20 ms
 *   "hold:K"      K tokens at once, then nothing until cancelled (a request that lasts
 *                 exactly as long as the test wants, however fast or slow the machine)
 *   "stop:K"      each sample ends after K tokens with finish_reason "stop"
 *   otherwise     max_tokens tokens, finish_reason "length"
 *
 * Cancels end live requests with finals "abort" / "cancelled" (unknown ids: an
 * unknown_request error); pings get a pong naming one worker "fake0". Counters of what
 * arrived are readable after fake_frontend_stop().
 */
#ifndef DERAS_TEST_FAKE_FRONTEND_H
#define DERAS_TEST_FAKE_FRONTEND_H

#include <stdatomic.h>

typedef struct fake_frontend fake_frontend;

typedef struct fake_frontend_stats {
    int requests, cancels, pings, decode_errors;
    char last_cancel_id[65];
} fake_frontend_stats;

/* Start on a free port; curve_secret_key (40 Z85 characters) makes it a CURVE server.
 * NULL on failure. */
fake_frontend *fake_frontend_start(const char *curve_secret_key);

/* Where clients connect ("tcp://127.0.0.1:PORT"). */
const char *fake_frontend_address(const fake_frontend *r);

/* Frames sent to clients so far (chunks, finals, errors, pongs); readable while it runs. */
int fake_frontend_frames_sent(const fake_frontend *r);

/* Stop the thread, fill *stats (may be NULL), free everything. */
void fake_frontend_stop(fake_frontend **r, fake_frontend_stats *stats);

#endif
