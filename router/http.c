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
 * Anything else is 404; methods other than GET and HEAD are 405. The OpenAI-compatible
 * routes (/v1/..., /tokenize, /detokenize) are http_api.c's, which reads their bodies.
 *
 * --metrics-listen HOST:PORT (default 127.0.0.1:9400; "none" turns HTTP off) takes a
 * numeric IPv4 or [IPv6] address or localhost; beyond loopback only with
 * --allow-insecure-bind (metrics carry no secrets, but they say a lot about the
 * service).
 *
 * Slow and idle clients cannot starve the probes (an orchestrator restarts a router whose
 * /live does not answer). The router accepts connections itself (the listening socket is
 * ours; libmicrohttpd gets each with MHD_add_connection) under a conn_guard: at most
 * fds.http_max connections (from the descriptor budget, fd_budget.c); beyond, the oldest
 * connection that has not yet sent a whole request head is shut down, so a new one always
 * gets in and a probe, which asks at once, is answered in the loop turn that accepts it.
 * A request head must arrive within HTTP_HEAD_TIMEOUT_S of the connection; an idle
 * connection is closed after HTTP_IDLE_TIMEOUT_S; libmicrohttpd bounds a connection's
 * memory (32 KiB: longer heads are answered 431); only the API's routes read a body
 * (at most 4 MiB, http_api.c). Accepting
 * is paused for a moment when the process is out of descriptors, instead of spinning.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "router/conn_guard.h"
#include "router/http_api.h"
#include "router/router.h"

#define HTTP_HEAD_TIMEOUT_S 5.0   /* from accept to a whole request head */
#define HTTP_IDLE_TIMEOUT_S 10    /* a kept-alive connection with nothing to do */
#define HTTP_NAMED_SLACK 256      /* shut-down connections libmicrohttpd has not closed yet */
#define HTTP_ACCEPT_PAUSE_S 0.1   /* after EMFILE/ENFILE */

struct http {
    struct MHD_Daemon *d;
    int fd;                /* libmicrohttpd's epoll fd */
    int listen_fd;
    conn_guard_t *guard;
    double accept_paused_until, next_log;
    uint64_t evicted_logged;
};

static double now_s(void)
{
    return router_now_us() / 1e6;
}

/* Shut fd down (libmicrohttpd sees the end and closes it); said once per 10 s. */
static void shut(http_t *h, int fd, const char *why)
{
    shutdown(fd, SHUT_RDWR);
    double t = now_s();
    if (t >= h->next_log) {
        h->next_log = t + 10.0;
        log_warn("HTTP: shutting down connections that sent no request (%s)", why);
    }
}

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
    router_t *rt = cls;
    if (!*con_cls) { /* the first call: a whole head arrived */
        rt->st.http_requests++;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci)
            conn_guard_proven(rt->http->guard, ci->connect_fd);
    }
    if (*con_cls || http_api_route(url))
        return http_api_request(rt, c, url, method, upload_data, upload_size, con_cls);
    *upload_size = 0; /* these routes read no body */
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

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    http_api_completed(cls, con_cls);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    (void)socket_context;
    http_t *h = cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED && ci)
        conn_guard_closed(h->guard, ci->connect_fd);
}

static int listen_on(const struct sockaddr_storage *sa, bool ipv6)
{
    int fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ipv6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    socklen_t len = ipv6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (bind(fd, (const struct sockaddr *)sa, len) || listen(fd, 1024)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void http_free(http_t *h)
{
    if (h->d)
        MHD_stop_daemon(h->d);
    if (h->listen_fd >= 0)
        close(h->listen_fd);
    conn_guard_destroy(&h->guard);
    free(h);
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
    h->listen_fd = -1;
    if ((rc = conn_guard_new(rt->fds.http_max, rt->fds.limit, &h->guard))) {
        http_free(h);
        return rc;
    }
    h->listen_fd = listen_on(&sa, ipv6);
    if (h->listen_fd >= 0)
        h->d = MHD_start_daemon(
            MHD_USE_EPOLL | MHD_USE_NO_LISTEN_SOCKET | MHD_ALLOW_SUSPEND_RESUME |
                (ipv6 ? MHD_USE_IPv6 : 0),
            0, NULL, NULL,
            on_request, rt, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)(rt->fds.http_max + HTTP_NAMED_SLACK), MHD_OPTION_CONNECTION_TIMEOUT,
            (unsigned)HTTP_IDLE_TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, rt, MHD_OPTION_END);
    const union MHD_DaemonInfo *info = h->d ? MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD)
                                            : NULL;
    if (!info) {
        http_free(h);
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
    log_info("HTTP on %s: GET /metrics, /health, /live; the OpenAI-compatible API under /v1%s "
             "(up to %d connections)", rt->o.metrics_listen,
             rt->api && rt->o.api_key_file ? " (API keys required)" : "", rt->fds.http_max);
    return DERAS_OK;
}

void http_close(router_t *rt)
{
    if (!rt->http)
        return;
    http_free(rt->http);
    rt->http = NULL;
}

int http_fd(const router_t *rt)
{
    return rt->http ? rt->http->fd : -1;
}

int http_listen_fd(const router_t *rt)
{
    return rt->http && now_s() >= rt->http->accept_paused_until ? rt->http->listen_fd : -1;
}

/* Accept what is pending, each under the guard's cap. */
static void accept_all(http_t *h)
{
    double t = now_s();
    if (t < h->accept_paused_until)
        return;
    for (;;) {
        struct sockaddr_storage peer;
        socklen_t len = sizeof peer;
        int fd = accept4(h->listen_fd, (struct sockaddr *)&peer, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                h->accept_paused_until = t + HTTP_ACCEPT_PAUSE_S;
                if (t >= h->next_log) {
                    h->next_log = t + 10.0;
                    log_warn("HTTP: accept: %s; pausing new connections", strerror(errno));
                }
            }
            return; /* EAGAIN: nothing more; others (ECONNABORTED...): the next turn */
        }
        int victim = conn_guard_open(h->guard, fd, t);
        if (victim == fd) { /* untrackable fd, or every other connection proven */
            conn_guard_closed(h->guard, fd);
            close(fd);
            continue;
        }
        if (MHD_add_connection(h->d, fd, (struct sockaddr *)&peer, len) != MHD_YES) {
            conn_guard_closed(h->guard, fd); /* libmicrohttpd closed it */
            continue;
        }
        if (victim >= 0)
            shut(h, victim, "at the connection cap");
    }
}

void http_run(router_t *rt)
{
    http_t *h = rt->http;
    if (!h)
        return;
    accept_all(h);
    int fd;
    while ((fd = conn_guard_expired(h->guard, now_s(), HTTP_HEAD_TIMEOUT_S)) >= 0)
        shut(h, fd, "no request head within 5 s");
    http_api_check_gone(rt);
    http_api_take_resumed(rt);
    MHD_run(h->d);
}

int64_t http_next_timer(const router_t *rt, int64_t now_us)
{
    MHD_UNSIGNED_LONG_LONG ms;
    if (!rt->http)
        return INT64_MAX;
    int64_t t = INT64_MAX;
    if (MHD_get_timeout(rt->http->d, &ms) == MHD_YES && ms <= 86400000ull)
        t = now_us + (int64_t)ms * 1000;
    if (rt->http->accept_paused_until > now_s()) {
        int64_t resume = (int64_t)(rt->http->accept_paused_until * 1e6);
        t = resume < t ? resume : t;
    }
    /* the head timeout: checked at least twice a second while connections are open */
    conn_guard_stats gs;
    conn_guard_get_stats(rt->http->guard, &gs);
    if (gs.unproven > 0 && now_us + 500000 < t)
        t = now_us + 500000;
    if (http_api_resumed(rt)) /* resumed during this turn, after http_run */
        return now_us;
    /* calls waiting on their request: their clients' departures are looked for */
    if (http_api_waiting(rt) && now_us + 100000 < t)
        t = now_us + 100000;
    return t;
}
