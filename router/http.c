/* SPDX-License-Identifier: Apache-2.0 */
/* http.c - the router's HTTP endpoint: GET /metrics (Prometheus), /health, /live.
 *
 * libmicrohttpd in "external polling" mode with epoll: no thread of its own. Its one
 * epoll fd sits among the event loop's zmq_poll items as a raw fd, the loop's timeout
 * includes MHD_get_timeout, and http_run (MHD_run) runs after every poll, as the
 * library requires when it has a timeout pending; with nothing ready it is one
 * epoll_wait(0). So a scrape renders the metrics in the router's thread, between two
 * events, and reads every counter without a lock.
 *
 *   GET /metrics   Prometheus text (version 0.0.4), as `derasctl metrics`
 *   GET /health    readiness: 200 "ready" while some worker is ready and the router is not
 *                  stopping, else 503 with the reason (also /ready)
 *   GET /live      liveness: 200 "live" whenever the loop answers
 * Anything else is 404; methods other than GET and HEAD are 405.
 *
 * --metrics-listen HOST:PORT (default 127.0.0.1:9400; "none" turns HTTP off) takes a
 * numeric IPv4 or [IPv6] address or localhost; beyond loopback only with
 * --allow-insecure-bind (metrics carry no secrets, but they say a lot about the
 * service). Plain HTTP, bounded: at most HTTP_MAX_CONNECTIONS connections, each closed
 * after HTTP_CONN_TIMEOUT_S idle seconds.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "router/router.h"

#define HTTP_MAX_CONNECTIONS 32
#define HTTP_CONN_TIMEOUT_S 10

struct http {
    struct MHD_Daemon *d;
    int fd;
};

static int parse_listen(const char *addr, bool allow_insecure, struct sockaddr_storage *sa,
                        bool *ipv6)
{
    char host[ROUTER_ADDR_MAX];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host)
        return deras_fail(DERAS_EINVAL, "--metrics-listen %s: expected HOST:PORT or none", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || port < 0 || port > 65535)
        return deras_fail(DERAS_EINVAL, "--metrics-listen %s: port must be 0..65535", addr);
    memset(sa, 0, sizeof *sa);
    bool loopback;
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host[n - 1] = '\0';
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
            return deras_fail(DERAS_EINVAL, "--metrics-listen %s: not an IPv6 address", addr);
        loopback = IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
        *ipv6 = true;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, !strcmp(host, "localhost") ? "127.0.0.1" : host,
                      &s4->sin_addr) != 1)
            return deras_fail(DERAS_EINVAL,
                              "--metrics-listen %s: host must be a numeric IPv4 address, "
                              "[IPv6] or localhost", addr);
        loopback = (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
        *ipv6 = false;
    }
    if (!loopback && !allow_insecure)
        return deras_fail(DERAS_EINVAL,
                          "--metrics-listen %s: plain HTTP beyond loopback lets anyone on the "
                          "network read the metrics; use --allow-insecure-bind on a trusted "
                          "network, or a reverse proxy", addr);
    return DERAS_OK;
}

int http_check_listen(const char *addr, bool allow_insecure)
{
    struct sockaddr_storage sa;
    bool ipv6;
    return strcmp(addr, "none") ? parse_listen(addr, allow_insecure, &sa, &ipv6) : DERAS_OK;
}

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
                               const char *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

#define TEXT "text/plain; charset=utf-8"

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)con_cls;
    router_t *rt = cls;
    rt->st.http_requests++;
    *upload_size = 0; /* a body is never read */
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return respond(c, MHD_HTTP_METHOD_NOT_ALLOWED, TEXT, "GET or HEAD\n", 12);
    if (!strcmp(url, "/metrics")) {
        const char *text;
        size_t len;
        if (admin_metrics_text(rt, &text, &len)) {
            log_error("GET /metrics: %s", deras_errmsg());
            return respond(c, MHD_HTTP_INTERNAL_SERVER_ERROR, TEXT, "out of memory\n", 14);
        }
        return respond(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len);
    }
    if (!strcmp(url, "/health") || !strcmp(url, "/ready")) {
        if (admin_ready(rt))
            return respond(c, MHD_HTTP_OK, TEXT, "ready\n", 6);
        const char *why = rt->draining ? "not ready: the router is stopping\n"
                                       : "not ready: no worker is ready\n";
        return respond(c, MHD_HTTP_SERVICE_UNAVAILABLE, TEXT, why, strlen(why));
    }
    if (!strcmp(url, "/live"))
        return respond(c, MHD_HTTP_OK, TEXT, "live\n", 5);
    return respond(c, MHD_HTTP_NOT_FOUND, TEXT, "not found: /metrics, /health, /live\n", 36);
}

int http_open(router_t *rt)
{
    if (!strcmp(rt->o.metrics_listen, "none"))
        return DERAS_OK;
    struct sockaddr_storage sa;
    bool ipv6;
    int rc = parse_listen(rt->o.metrics_listen, rt->o.allow_insecure_bind, &sa, &ipv6);
    if (rc)
        return rc;
    http_t *h = calloc(1, sizeof *h);
    if (!h)
        return deras_fail(DERAS_ENOMEM, "http: out of memory");
    h->d = MHD_start_daemon(MHD_USE_EPOLL | (ipv6 ? MHD_USE_IPv6 : 0), 0, NULL, NULL, on_request,
                            rt, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNECTIONS,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_CONN_TIMEOUT_S,
                            MHD_OPTION_END);
    const union MHD_DaemonInfo *info = h->d ? MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD)
                                            : NULL;
    if (!info) {
        if (h->d)
            MHD_stop_daemon(h->d);
        free(h);
        if (rt->o.metrics_listen_given)
            return deras_fail(DERAS_EIO, "cannot serve HTTP on %s (address in use?)",
                              rt->o.metrics_listen);
        log_warn("cannot serve HTTP on %s (address in use?): /metrics and /health are off; the "
                 "admin socket still answers derasctl metrics and health (--metrics-listen "
                 "picks another address)", rt->o.metrics_listen);
        return DERAS_OK;
    }
    h->fd = info->epoll_fd;
    rt->http = h;
    log_info("HTTP on %s: GET /metrics, /health, /live", rt->o.metrics_listen);
    return DERAS_OK;
}

void http_close(router_t *rt)
{
    if (!rt->http)
        return;
    MHD_stop_daemon(rt->http->d);
    free(rt->http);
    rt->http = NULL;
}

int http_fd(const router_t *rt)
{
    return rt->http ? rt->http->fd : -1;
}

void http_run(router_t *rt)
{
    if (rt->http)
        MHD_run(rt->http->d);
}

int64_t http_next_timer(const router_t *rt, int64_t now_us)
{
    MHD_UNSIGNED_LONG_LONG ms;
    if (!rt->http || MHD_get_timeout(rt->http->d, &ms) != MHD_YES)
        return INT64_MAX;
    return ms > 86400000ull ? INT64_MAX : now_us + (int64_t)ms * 1000;
}
