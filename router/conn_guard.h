/* SPDX-License-Identifier: Apache-2.0 */
/* conn_guard.h - a cap on the open connections of one listener, kept by evicting the
 * connections that have not proven themselves.
 *
 * A connection is opened (accepted), may be proven (a ZMTP handshake done, an HTTP request
 * received) and is closed. While more than `max` connections are open, the guard names one
 * to shut down: the oldest unproven one (a slowloris, a raw TCP connection that never
 * speaks, a half-open flood), so that a new peer always gets in and a probe that asks at
 * once is answered; when every other connection is proven, the new one itself. Unproven
 * connections older than a timeout are named too. The caller shuts the named connection
 * down (shutdown(2), after which its owner - libzmq or libmicrohttpd - closes it) and
 * reports the close as for any other.
 *
 * Connections are identified by their file descriptor; the table is indexed by it and
 * sized for the process's descriptor limit (fd_cap entries of 24 bytes), the unproven ones
 * kept in a list by opening time: every call is O(1) and nothing allocates after
 * conn_guard_new. Not thread-safe (the router's loop owns it).
 */
#ifndef DERAS_ROUTER_CONN_GUARD_H
#define DERAS_ROUTER_CONN_GUARD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct conn_guard conn_guard_t;

/* A guard for at most `max` open connections of fds 0 .. fd_cap-1. DERAS_EINVAL for
 * max < 1 or fd_cap < 1, DERAS_ENOMEM. */
int conn_guard_new(int max, int fd_cap, conn_guard_t **out);
void conn_guard_destroy(conn_guard_t **g);

/* fd was accepted at `now` (seconds, any monotonic clock). Returns the fd to shut down to
 * stay within the cap (possibly fd itself), or -1. An fd outside [0, fd_cap) is returned
 * as its own victim (it cannot be tracked). A named fd counts as open until
 * conn_guard_closed, but is never named again. */
int conn_guard_open(conn_guard_t *g, int fd, double now);

/* fd proved itself (handshake, request); it is named only when nothing unproven is left. */
void conn_guard_proven(conn_guard_t *g, int fd);

/* fd was closed (for whatever reason). Unknown fds are ignored. */
void conn_guard_closed(conn_guard_t *g, int fd);

/* The oldest unproven connection opened before now - timeout, named (and marked as such);
 * -1 if none. Call until -1. */
int conn_guard_expired(conn_guard_t *g, double now, double timeout);

/* Whether fd is open and was named for shutdown and not yet closed. */
bool conn_guard_named(const conn_guard_t *g, int fd);

typedef struct conn_guard_stats {
    int open;            /* open connections, named ones included */
    int unproven;        /* of which unproven and not named */
    uint64_t evicted;    /* named to keep the cap */
    uint64_t expired;    /* named by conn_guard_expired */
} conn_guard_stats;
void conn_guard_get_stats(const conn_guard_t *g, conn_guard_stats *s);

#endif
