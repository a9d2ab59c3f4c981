/* SPDX-License-Identifier: Apache-2.0 */
/* http_response.c - the HTTP/1.1 response parser (see http_response.h): a state machine
 * over the bytes fed; chunked framing is decoded across any split (a size line, its data,
 * the data's CRLF, and trailer lines after the last chunk). */
#include "tools/http_response.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/base/status.h"

enum framing { F_LENGTH, F_CHUNKED, F_CLOSE };
enum chunk_state { C_SIZE, C_DATA, C_DATA_END, C_TRAILER };

int http_buf_put(http_buf *b, const char *s, size_t n)
{
    if (b->off && b->off == b->n)
        b->off = b->n = 0;
    if (b->n + n > b->cap && b->off) { /* reuse the consumed front before growing */
        memmove(b->p, b->p + b->off, b->n - b->off);
        b->n -= b->off;
        b->off = 0;
    }
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        char *p = realloc(b->p, cap + 1);
        if (!p)
            return deras_fail(DERAS_ENOMEM, "out of memory");
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return DERAS_OK;
}

void http_buf_free(http_buf *b)
{
    free(b->p);
    *b = (http_buf){0};
}

void http_resp_begin(http_resp *r)
{
    r->head.off = r->head.n = r->body.off = r->body.n = 0;
    r->status = 0;
    r->done = r->failed = false;
    r->keep_alive = false;
    r->line_n = 0;
    r->remaining = 0;
}

void http_resp_free(http_resp *r)
{
    http_buf_free(&r->head);
    http_buf_free(&r->body);
}

static int bad(http_resp *r, int code, const char *fmt, const char *what)
{
    r->failed = true;
    r->keep_alive = false;
    return deras_fail(code, fmt, what);
}

/* The head (NUL-terminated, its blank line excluded): status line, framing, connection. */
static int parse_head(http_resp *r, const char *p)
{
    int minor, status;
    char sp;
    if (sscanf(p, "HTTP/1.%1d %3d%c", &minor, &status, &sp) != 3 || (sp != ' ' && sp != '\r') || status < 100 ||
        status > 999)
        return bad(r, DERAS_EFORMAT, "a malformed status line: '%.60s'", p);
    r->status = status;
    r->keep_alive = minor >= 1;
    r->framing = F_CLOSE;
    bool has_length = false;
    for (const char *line = strstr(p, "\r\n"); line; line = strstr(line, "\r\n")) {
        line += 2;
        const char *colon = strchr(line, ':'), *eol = strstr(line, "\r\n");
        if (!colon || (eol && colon > eol))
            continue;
        const char *v = colon + 1 + strspn(colon + 1, " \t");
        size_t kl = (size_t)(colon - line);
        if (kl == 14 && !strncasecmp(line, "Content-Length", 14)) {
            char *end;
            unsigned long long len = strtoull(v, &end, 10);
            if (end == v || (*end && *end != '\r' && *end != ' '))
                return bad(r, DERAS_EFORMAT, "a bad Content-Length: '%.20s'", v);
            r->remaining = (size_t)len;
            has_length = true;
        } else if (kl == 17 && !strncasecmp(line, "Transfer-Encoding", 17) &&
                   !strncasecmp(v, "chunked", 7)) {
            r->framing = F_CHUNKED;
            r->cs = C_SIZE;
        } else if (kl == 10 && !strncasecmp(line, "Connection", 10) &&
                   !strncasecmp(v, "close", 5)) {
            r->keep_alive = false;
        }
    }
    if (r->framing != F_CHUNKED && has_length)
        r->framing = F_LENGTH;
    if (r->framing == F_CLOSE)
        r->keep_alive = false;
    if (r->status == 204 || r->status == 304 || (r->framing == F_LENGTH && !r->remaining))
        r->done = true;
    return DERAS_OK;
}

/* Body bytes p[0..n) by the framing. */
static int feed_body(http_resp *r, const char *p, size_t n)
{
    int rc;
    if (r->framing == F_CLOSE)
        return http_buf_put(&r->body, p, n);
    if (r->framing == F_LENGTH) {
        size_t take = n < r->remaining ? n : r->remaining;
        if ((rc = http_buf_put(&r->body, p, take)))
            return rc;
        if (!(r->remaining -= take))
            r->done = true;
        return DERAS_OK;
    }
    for (size_t i = 0; i < n && !r->done;) {
        if (r->cs == C_DATA) {
            size_t take = n - i < r->remaining ? n - i : r->remaining;
            if ((rc = http_buf_put(&r->body, p + i, take)))
                return rc;
            i += take;
            if (!(r->remaining -= take))
                r->cs = C_DATA_END;
            continue;
        }
        char ch = p[i++];
        if (ch != '\n') { /* a size line, the CRLF after data, or a trailer line */
            if (ch != '\r' && r->line_n < sizeof r->line - 1)
                r->line[r->line_n++] = ch;
            continue;
        }
        r->line[r->line_n] = '\0';
        size_t len = r->line_n;
        r->line_n = 0;
        if (r->cs == C_DATA_END) {
            if (len)
                return bad(r, DERAS_EFORMAT, "bad chunked framing: '%.20s' after a chunk",
                           r->line);
            r->cs = C_SIZE;
        } else if (r->cs == C_SIZE) {
            char *e;
            unsigned long long size = strtoull(r->line, &e, 16);
            if (e == r->line || (*e && *e != ';') || r->line[0] == '-' || r->line[0] == '+' ||
                size > ((size_t)1 << 40))
                return bad(r, DERAS_EFORMAT, "bad chunked framing: a size line '%.20s'",
                           r->line);
            r->remaining = (size_t)size;
            r->cs = size ? C_DATA : C_TRAILER;
        } else if (!len) { /* C_TRAILER: the blank line ends the message */
            r->done = true;
        }
    }
    return DERAS_OK;
}

int http_resp_feed(http_resp *r, const char *p, size_t n)
{
    int rc;
    if (r->failed)
        return deras_fail(DERAS_EFORMAT, "the response was malformed earlier");
    while (!r->done && !r->status && n) { /* the head */
        size_t before = r->head.n;
        if ((rc = http_buf_put(&r->head, p, n)))
            return rc;
        size_t from = before > 3 ? before - 3 : 0;
        char *end = memmem(r->head.p + from, r->head.n - from, "\r\n\r\n", 4);
        if (!end || end - r->head.p > HTTP_RESP_MAX_HEAD) {
            if (r->head.n > HTTP_RESP_MAX_HEAD)
                return bad(r, DERAS_EFORMAT, "a response head over %s bytes", "65536");
            return HTTP_RESP_MORE;
        }
        *end = '\0';
        size_t used = (size_t)(end + 4 - r->head.p) - before;
        if ((rc = parse_head(r, r->head.p)))
            return rc;
        p += used;
        n -= used;
        if (r->status < 200) { /* 100 Continue and the like: the real head follows */
            r->status = 0;
            r->done = false;
            r->head.n = r->head.off = 0;
        }
    }
    if (r->status && !r->done && n && (rc = feed_body(r, p, n)))
        return rc;
    return r->done ? HTTP_RESP_DONE : HTTP_RESP_MORE;
}

int http_resp_eof(http_resp *r)
{
    if (r->done)
        return HTTP_RESP_DONE;
    if (r->status && !r->failed && r->framing == F_CLOSE) {
        r->done = true;
        return HTTP_RESP_DONE;
    }
    return bad(r, DERAS_EFORMAT, "the server closed the connection %s",
               r->status ? "inside the response" : "before answering");
}

const char *http_resp_body(const http_resp *r, size_t *n)
{
    *n = r->body.n - r->body.off;
    return r->body.p ? r->body.p + r->body.off : "";
}

void http_resp_consume(http_resp *r, size_t n)
{
    size_t live = r->body.n - r->body.off;
    r->body.off += n < live ? n : live;
    if (r->body.off >= r->body.n)
        r->body.off = r->body.n = 0;
}
