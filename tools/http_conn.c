/* SPDX-License-Identifier: Apache-2.0 */
/* http_conn.c - a small non-blocking HTTP/1.1 client connection (see http_conn.h): the
 * socket, the request's bytes going out, and the response parser (http_response.h) fed
 * with what comes back. */
#include "tools/http_conn.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "tools/http_response.h"

#define READ_BUF 65536

enum state { S_IDLE, S_CONNECTING, S_SENDING, S_RECEIVING, S_DONE, S_FAILED };

struct http_conn {
    int fd;
    enum state st;
    http_buf out;
    http_resp resp;
    char rd[READ_BUF];
    int uses;
    bool heard;
};

int http_url_parse(const char *s, http_url *out)
{
    memset(out, 0, sizeof *out);
    if (strncmp(s, "http://", 7))
        return deras_fail(DERAS_EINVAL, "%s: expected http://HOST:PORT (https is not supported: "
                          "run next to the server or behind a proxy)", s);
    const char *h = s + 7, *end = h + strcspn(h, "/"), *port = NULL, *hend;
    if (*h == '[') { /* [IPv6]:port */
        hend = memchr(h, ']', (size_t)(end - h));
        if (!hend)
            return deras_fail(DERAS_EINVAL, "%s: an unclosed [", s);
        h++;
        port = hend[1] == ':' ? hend + 2 : NULL;
    } else {
        hend = memchr(h, ':', (size_t)(end - h));
        port = hend ? hend + 1 : NULL;
        if (!hend)
            hend = end;
    }
    size_t hl = (size_t)(hend - h), pl = port ? (size_t)(end - port) : 0;
    if (!hl || hl >= sizeof out->host || (port && (pl == 0 || pl > 5)))
        return deras_fail(DERAS_EINVAL, "%s: a bad host or port", s);
    memcpy(out->host, h, hl);
    char portbuf[8] = "80";
    if (port) {
        memcpy(portbuf, port, pl);
        portbuf[pl] = '\0';
        char *e;
        long p = strtol(portbuf, &e, 10);
        if (*e || p < 1 || p > 65535)
            return deras_fail(DERAS_EINVAL, "%s: a bad port", s);
    }
    size_t plen = strlen(end);
    while (plen && end[plen - 1] == '/')
        plen--;
    if (plen >= 3 && !strncmp(end + plen - 3, "/v1", 3))
        plen -= 3;
    if (plen >= sizeof out->prefix)
        return deras_fail(DERAS_EINVAL, "%s: the path is too long", s);
    memcpy(out->prefix, end, plen);
    if (strchr(out->host, ':'))
        snprintf(out->hostport, sizeof out->hostport, "[%s]:%s", out->host, portbuf);
    else
        snprintf(out->hostport, sizeof out->hostport, "%s:%s", out->host, portbuf);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(out->host, portbuf, &hints, &ai);
    if (rc)
        return deras_fail(DERAS_EINVAL, "%s: cannot resolve %s (%s)", s, out->host,
                          gai_strerror(rc));
    memcpy(&out->addr, ai->ai_addr, ai->ai_addrlen);
    out->addr_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return DERAS_OK;
}

int http_conn_new(const http_url *u, http_conn_t **out)
{
    *out = NULL;
    http_conn_t *c = calloc(1, sizeof *c);
    if (!c)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    c->fd = socket(u->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        free(c);
        return deras_fail(DERAS_EIO, "socket: %s", strerror(errno));
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (const struct sockaddr *)&u->addr, u->addr_len) && errno != EINPROGRESS) {
        int e = errno;
        http_conn_destroy(&c);
        return deras_fail(DERAS_EIO, "connect to %s: %s", u->hostport, strerror(e));
    }
    c->st = S_IDLE;
    *out = c;
    return DERAS_OK;
}

void http_conn_destroy(http_conn_t **pc)
{
    if (!pc || !*pc)
        return;
    http_conn_t *c = *pc;
    if (c->fd >= 0)
        close(c->fd);
    http_buf_free(&c->out);
    http_resp_free(&c->resp);
    free(c);
    *pc = NULL;
}

int http_conn_send(http_conn_t *c, const char *req, size_t n)
{
    if (c->st != S_IDLE && !http_conn_reusable(c))
        return deras_fail(DERAS_EINVAL, "the connection is busy");
    c->out.off = c->out.n = 0;
    http_resp_begin(&c->resp);
    c->heard = false;
    c->st = c->uses++ == 0 ? S_CONNECTING : S_SENDING;
    return http_buf_put(&c->out, req, n);
}

int http_conn_fd(const http_conn_t *c)
{
    return c->fd;
}

short http_conn_events(const http_conn_t *c)
{
    return c->st == S_CONNECTING || c->st == S_SENDING ? POLLOUT : POLLIN;
}

int http_conn_status(const http_conn_t *c)
{
    return c->resp.status;
}

const char *http_conn_body(const http_conn_t *c, size_t *n)
{
    return http_resp_body(&c->resp, n);
}

void http_conn_consume(http_conn_t *c, size_t n)
{
    http_resp_consume(&c->resp, n);
}

bool http_conn_heard(const http_conn_t *c)
{
    return c->heard;
}

bool http_conn_reusable(const http_conn_t *c)
{
    return c->st == S_DONE && c->resp.keep_alive;
}

int http_conn_uses(const http_conn_t *c)
{
    return c->uses;
}

static int failed(http_conn_t *c, int code, const char *fmt, const char *what)
{
    c->st = S_FAILED;
    return deras_fail(code, fmt, what);
}

int http_conn_io(http_conn_t *c)
{
    if (c->st == S_FAILED)
        return deras_fail(DERAS_EIO, "the connection failed earlier");
    if (c->st == S_CONNECTING) {
        struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
        if (poll(&pfd, 1, 0) == 0)
            return HTTP_IO_AGAIN; /* still connecting */
        int err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) || err)
            return failed(c, DERAS_EIO, "connect: %s", strerror(err ? err : errno));
        c->st = S_SENDING;
    }
    while (c->st == S_SENDING) {
        ssize_t w = send(c->fd, c->out.p + c->out.off, c->out.n - c->out.off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return HTTP_IO_AGAIN;
            /* the server may have answered before reading everything (413): read that */
            if (errno != EPIPE && errno != ECONNRESET)
                return failed(c, DERAS_EIO, "send: %s", strerror(errno));
            c->out.off = c->out.n;
        } else {
            c->out.off += (size_t)w;
        }
        if (c->out.off == c->out.n)
            c->st = S_RECEIVING;
    }
    int rc = HTTP_RESP_MORE;
    while (c->st == S_RECEIVING && rc == HTTP_RESP_MORE) {
        ssize_t r = recv(c->fd, c->rd, sizeof c->rd, 0);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return HTTP_IO_AGAIN;
            return failed(c, DERAS_EIO, "recv: %s", strerror(errno));
        }
        if (r > 0)
            c->heard = true;
        rc = r ? http_resp_feed(&c->resp, c->rd, (size_t)r) : http_resp_eof(&c->resp);
        if (rc < 0)
            return failed(c, rc == DERAS_ENOMEM ? rc : DERAS_EIO, "%s", deras_errmsg());
        if (!r && rc == HTTP_RESP_DONE)
            c->resp.keep_alive = false; /* closed: nothing more on it */
    }
    if (rc == HTTP_RESP_DONE)
        c->st = S_DONE;
    return c->st == S_DONE ? HTTP_IO_DONE : HTTP_IO_AGAIN;
}

int http_get(const http_url *u, const char *request, size_t n, int timeout_ms, int *status,
             char **body, size_t *len)
{
    http_conn_t *c;
    *body = NULL;
    *len = 0;
    int rc = http_conn_new(u, &c);
    if (rc || (rc = http_conn_send(c, request, n)))
        goto out;
    double deadline = cli_now() + timeout_ms / 1e3;
    while ((rc = http_conn_io(c)) == HTTP_IO_AGAIN) {
        int left = (int)((deadline - cli_now()) * 1e3);
        if (left <= 0) {
            rc = deras_fail(DERAS_ETIMEOUT, "no answer from %s within %d ms", u->hostport,
                            timeout_ms);
            goto out;
        }
        struct pollfd pfd = {.fd = c->fd, .events = http_conn_events(c)};
        poll(&pfd, 1, left);
    }
    if (rc < 0)
        goto out;
    size_t bn;
    const char *b = http_conn_body(c, &bn);
    if (!(*body = malloc(bn + 1))) {
        rc = deras_fail(DERAS_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(*body, b, bn);
    (*body)[bn] = '\0';
    *len = bn;
    *status = c->resp.status;
    rc = DERAS_OK;
out:
    http_conn_destroy(&c);
    return rc;
}
