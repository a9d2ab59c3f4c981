/* SPDX-License-Identifier: Apache-2.0 */
/* admin_proto.h - the router's admin protocol: requests of derasctl (or any operator's
 * script) on the admin socket, and how they are checked.
 *
 * Transport: a ZeroMQ ROUTER socket of deras-router, separate from the client socket
 * (ipc:// with mode 0600 by default; tcp only with CURVE). A client connects a DEALER and
 * sends single-frame msgpack maps; every request gets exactly one reply map (a drain
 * waiting for its worker to empty gets it when the worker is empty or the timeout passed).
 *
 * Requests are decoded with the same strict, bounded pipeline as the client protocol
 * (size cap, msgpack_scan, one schema walk: unknown keys, wrong types, missing fields and
 * out-of-range numbers each get their stable code). Replies are built by the router
 * (router/admin.c) and read generically by derasctl; both are documented in
 * docs/operations.md.
 *
 *   {"type": "status"}                        every worker's state and load, the router's
 *   {"type": "health"}                        liveness and readiness
 *   {"type": "metrics"}                       the Prometheus text of GET /metrics
 *   {"type": "drain", "worker": NAME | "all": true[, "timeout_ms": N][, "wait": bool]}
 *   {"type": "undrain", "worker": NAME | "all": true}
 * Each may carry "v": 1.
 */
#ifndef DERAS_ADMIN_PROTO_H
#define DERAS_ADMIN_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/wire/protocol.h"
#include "common/wire/worker_proto.h"

#define ADMIN_PROTO_VERSION 1
#define ADMIN_MAX_MESSAGE_BYTES 65536   /* requests are small; replies are not capped */
#define ADMIN_MAX_TIMEOUT_MS 86400000   /* a drain waits at most a day */

enum admin_type { ADMIN_STATUS = 1, ADMIN_HEALTH, ADMIN_METRICS, ADMIN_DRAIN, ADMIN_UNDRAIN };

typedef struct admin_request {
    enum admin_type type;
    char worker[WPROTO_MAX_NAME + 1]; /* drain, undrain: the worker's name; "" with all */
    bool all;                         /* drain, undrain: every worker */
    int64_t timeout_ms;               /* drain: then abort what is left; -1: router default */
    bool wait;                        /* drain: reply when drained or timed out (default) */
} admin_request;

typedef struct admin_codec admin_codec_t;

/* DERAS_ENOMEM. */
int admin_codec_new(admin_codec_t **out);
void admin_codec_destroy(admin_codec_t **c);

/* Decode one request frame. DERAS_OK with *out filled; DERAS_EFORMAT with err->code the
 * stable code and err->message the reason; DERAS_ENOMEM. O(len). */
int admin_decode_request(admin_codec_t *c, const void *buf, size_t len, admin_request *out,
                         proto_error *err);

/* Encode a request (fields at their defaults are left out). *buf is valid until the next
 * encode on c. DERAS_EINVAL for a request the decoder would refuse. */
int admin_encode_request(admin_codec_t *c, const admin_request *r, const void **buf, size_t *len);

/* "status", "health", "metrics", "drain", "undrain" ("?" for others). */
const char *admin_type_name(enum admin_type t);

#endif
