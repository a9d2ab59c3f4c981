/* SPDX-License-Identifier: Apache-2.0 */
/* zmq_curve.h - a ZeroMQ socket made a CURVE client: encrypted, and proving a key the
 * server may allow (router/curve.c is the server side). Used by the C client, and by a
 * worker's link and heartbeat sockets.
 *
 * Header-only and included only by code that links libzmq (like zmq_check.h). Costs: a
 * few setsockopt calls; the handshake itself happens at connect.
 */
#ifndef DERAS_ZMQ_CURVE_H
#define DERAS_ZMQ_CURVE_H

#include <stdint.h>
#include <string.h>

#include "common/wire/zmq_check.h"

/* Make sock (not yet connected) a CURVE client of the server whose public key is
 * server_z85 (40 Z85 characters), proving secret_z85 (40 Z85 characters; NULL: a fresh key
 * pair, for a server that admits any key). DERAS_EINVAL for a key that is not Z85, else a
 * ZMQ_CHECK status. */
static inline int zmq_curve_client(void *sock, const char *server_z85, const char *secret_z85)
{
    char pub[41], sec[41];
    uint8_t raw[32];
    if (!server_z85 || strlen(server_z85) != 40 || !zmq_z85_decode(raw, server_z85))
        return deras_fail(DERAS_EINVAL, "CURVE server key: expected 40 Z85 characters");
    int rc;
    if (secret_z85) {
        if (strlen(secret_z85) != 40 || zmq_curve_public(pub, secret_z85) == -1)
            return deras_fail(DERAS_EINVAL, "CURVE secret key: not a valid Z85 key");
        memcpy(sec, secret_z85, 41);
    } else if ((rc = ZMQ_CHECK(zmq_curve_keypair(pub, sec)))) {
        return rc;
    }
    if ((rc = ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_z85, 40))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, pub, 40))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, sec, 40))))
        return rc;
    memset(sec, 0, sizeof sec);
    return DERAS_OK;
}

#endif
