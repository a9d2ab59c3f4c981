/* SPDX-License-Identifier: Apache-2.0 */
/* finish_reason.h - why a sample ended: one enum from the engine to the client.
 *
 * The engine reports it with each finished sample; the worker link carries its number
 * (the values below are the wire's and never change); the router sends its name as the
 * final's "finish_reason" and counts it in deras_requests_total, where "error" (a request
 * that ended with an error reply instead of finals) is the one reason no final carries.
 * Names are the protocol's stable strings (docs/protocol.md). Costs: O(1), except
 * finish_reason_parse, O(FINISH_N); nothing allocates.
 */
#ifndef DERAS_FINISH_REASON_H
#define DERAS_FINISH_REASON_H

#include <stdbool.h>

typedef enum finish_reason {
    FINISH_STOP = 0,   /* "stop": a stop token, an end-of-generation token or a stop string */
    FINISH_LENGTH = 1, /* "length": max_tokens or the context limit */
    FINISH_ABORT = 2,  /* "abort": cancelled, deadline, disconnect, aborted by the worker */
    FINISH_ERROR = 3,  /* "error": the request ended with an error reply (metrics only) */
    FINISH_N
} finish_reason;

/* The last reason a sample's end (a final, a worker's finish) can carry. */
#define FINISH_LAST_SAMPLE FINISH_ABORT

/* The stable wire name; "unknown" for a value outside the enum. Never NULL. */
const char *finish_reason_name(finish_reason f);

/* The reason named by the NUL-terminated s; false (and *out untouched) if none is. */
bool finish_reason_parse(const char *s, finish_reason *out);

#endif
