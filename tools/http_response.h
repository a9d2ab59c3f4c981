/* SPDX-License-Identifier: Apache-2.0 */
/* http_response.h - an HTTP/1.1 response parser fed with bytes as they arrive, for the
 * tools' HTTP client (http_conn.h). No sockets here, so tests and the fuzz target feed it
 * directly.
 *
 * The head is gathered until its blank line (at most HTTP_RESP_MAX_HEAD bytes) and parsed
 * at once: the status, Content-Length, Transfer-Encoding: chunked, Connection: close; a
 * 1xx head is skipped. The body is then decoded by its framing (chunked across any split,
 * by length, or until the server closes) into a buffer the caller reads as it grows and
 * consumes from the front, so a stream of server-sent events is handled as it arrives.
 *
 * Costs: O(bytes fed); the head and body buffers keep their capacity between responses
 * (no allocation once warm).
 */
#ifndef DERAS_TOOLS_HTTP_RESPONSE_H
#define DERAS_TOOLS_HTTP_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>

#define HTTP_RESP_MAX_HEAD 65536

typedef struct http_buf {
    char *p;
    size_t off, n, cap;          /* bytes p[off..n) are live; p[n] is '\0' */
} http_buf;

/* Append s[0..n) (keeping a NUL after the live bytes). DERAS_ENOMEM. */
int http_buf_put(http_buf *b, const char *s, size_t n);
void http_buf_free(http_buf *b);

typedef struct http_resp {
    http_buf head, body;
    int status;                  /* 0 until the head is parsed */
    bool done, failed, keep_alive;
    int framing, cs;             /* private: body framing, chunk decoder state */
    size_t remaining;            /* private */
    char line[80];               /* private: a chunk-size or trailer line */
    size_t line_n;
} http_resp;

/* Ready for a new response (buffers kept). */
void http_resp_begin(http_resp *r);
void http_resp_free(http_resp *r);

enum { HTTP_RESP_MORE = 0, HTTP_RESP_DONE = 1 };
/* Feed received bytes. HTTP_RESP_MORE, HTTP_RESP_DONE (the response is complete: bytes
 * after it are ignored), or DERAS_EFORMAT (a malformed status line, a head over the cap,
 * bad chunk framing) / DERAS_ENOMEM with the message set; after an error, feeding fails. */
int http_resp_feed(http_resp *r, const char *p, size_t n);
/* The server closed the connection: HTTP_RESP_DONE for a body delimited by the close,
 * else DERAS_EFORMAT (it ended early). */
int http_resp_eof(http_resp *r);

/* Decoded body bytes not yet consumed, and their count; consume from the front. */
const char *http_resp_body(const http_resp *r, size_t *n);
void http_resp_consume(http_resp *r, size_t n);

#endif
