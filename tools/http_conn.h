/* SPDX-License-Identifier: Apache-2.0 */
/* http_conn.h - a small HTTP/1.1 client connection over a plain socket, for the tools that
 * talk to the router's HTTP API (`deras bench --http`).
 *
 * One connection carries one request at a time and is reused (keep-alive) when the
 * server allows it. It never blocks: the caller polls http_conn_fd() for
 * http_conn_events() and calls http_conn_io() when the socket is ready; what arrives goes
 * through the response parser (http_response.h), whose decoded body the caller reads as
 * it grows and consumes from the front, so a stream of server-sent events is handled as
 * it arrives. http_get() is the blocking convenience for one request at start-up (GET
 * /v1/models).
 *
 * No TLS (http:// only; put the client next to the server or behind a proxy), no
 * redirects, no proxies.
 *
 * Costs: a read is one recv() into the connection's read buffer and a copy of the decoded
 * bytes into the body buffer, which keeps its capacity (no allocation once warm); O(bytes).
 */
#ifndef DERAS_TOOLS_HTTP_CONN_H
#define DERAS_TOOLS_HTTP_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* http://HOST[:PORT][/PREFIX]: resolved once (getaddrinfo), the prefix without a trailing
 * "/" or "/v1" (the tools add the API's paths). */
typedef struct http_url {
    char host[256];          /* as given; brackets kept off an IPv6 literal */
    char hostport[300];      /* the Host header */
    char prefix[256];        /* "" or "/something" */
    struct sockaddr_storage addr;
    socklen_t addr_len;
} http_url;

/* Parse and resolve s. DERAS_EINVAL naming what is wrong (not http://, a bad port, a host
 * that does not resolve). */
int http_url_parse(const char *s, http_url *out);

typedef struct http_conn http_conn_t;

/* A new connection to u, connecting (non-blocking). DERAS_EIO when the socket cannot be
 * made or the connect fails at once, DERAS_ENOMEM. */
int http_conn_new(const http_url *u, http_conn_t **out);
void http_conn_destroy(http_conn_t **c);

/* Queue a whole request (head and body, bytes copied) and reset the response. The
 * connection must be idle: new, or its last response complete and reusable. DERAS_ENOMEM,
 * DERAS_EINVAL when busy. */
int http_conn_send(http_conn_t *c, const char *req, size_t n);

int http_conn_fd(const http_conn_t *c);
/* POLLOUT while connecting or sending, POLLIN while waiting for the response. */
short http_conn_events(const http_conn_t *c);

enum { HTTP_IO_AGAIN = 0, HTTP_IO_DONE = 1 };
/* Read and write what the socket allows. HTTP_IO_AGAIN (more to come), HTTP_IO_DONE (the
 * response is complete), or DERAS_EIO (connect failed, reset, closed before the response
 * ended, a response the parser refuses) or DERAS_ENOMEM, with the message set; after an
 * error the connection is not reusable. */
int http_conn_io(http_conn_t *c);

/* The response's status, 0 until its head has arrived. */
int http_conn_status(const http_conn_t *c);
/* Decoded body bytes not yet consumed, and their count. */
const char *http_conn_body(const http_conn_t *c, size_t *n);
void http_conn_consume(http_conn_t *c, size_t n);
/* Whether any byte of the response arrived (a reused connection the server had closed
 * fails before one does: the request can be sent again on a new connection). */
bool http_conn_heard(const http_conn_t *c);
/* Whether the last response is complete and the server keeps the connection open. */
bool http_conn_reusable(const http_conn_t *c);
/* Requests sent on this connection. */
int http_conn_uses(const http_conn_t *c);

/* One request, blocking up to timeout_ms in all: the status and the whole body (malloc'ed,
 * NUL-terminated; the caller frees it). DERAS_ETIMEOUT, else as above. */
int http_get(const http_url *u, const char *request, size_t n, int timeout_ms, int *status,
             char **body, size_t *len);

#endif
