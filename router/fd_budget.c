/* SPDX-License-Identifier: Apache-2.0 */
/* fd_budget.c - the router's file descriptors: the limit raised at start, and how many
 * connections each listener may hold so that the process never runs out.
 *
 * Running out is not survivable in libzmq 4.3: an ipc listener that fails accept() with
 * EMFILE aborts the process (ipc_listener.cpp asserts), and a tcp listener retries in a
 * busy loop. So the router keeps every listener below the limit by construction: the soft
 * RLIMIT_NOFILE is raised to the hard limit (at most FD_WANT; systemd's units set
 * LimitNOFILE to that), a reserve is kept for what the router itself opens (worker and
 * admin connections, ZeroMQ's mailboxes and pollers, files), and the rest is split between
 * client connections and HTTP connections, each capped by a conn_guard (conn_guard.h) that
 * shuts down the oldest unproven connection beyond its cap. Costs: two system calls at
 * start.
 */
#include <stdio.h>
#include <sys/resource.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "router/router.h"

#define FD_WANT 65536          /* the soft limit asked for (the hard limit permitting) */
#define FD_RESERVE 256         /* kept for workers, admin, ZeroMQ internals and files */
#define HTTP_MAX_CONNECTIONS 4096

int fd_budget_init(fd_budget *b)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return deras_fail(DERAS_EIO, "getrlimit(RLIMIT_NOFILE) failed");
    rlim_t before = rl.rlim_cur, want = rl.rlim_max < FD_WANT ? rl.rlim_max : FD_WANT;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) || getrlimit(RLIMIT_NOFILE, &rl))
            rl.rlim_cur = before;
    }
    /* fds above FD_WANT are never tracked: the guards' tables stop there */
    int limit = rl.rlim_cur > FD_WANT ? FD_WANT : (int)rl.rlim_cur;
    int reserve = limit >= 2 * FD_RESERVE ? FD_RESERVE : limit / 2;
    int avail = limit - reserve;
    b->limit = limit;
    b->reserve = reserve;
    b->http_max = avail / 4 > HTTP_MAX_CONNECTIONS ? HTTP_MAX_CONNECTIONS : avail / 4;
    if (b->http_max < 4)
        b->http_max = 4;
    b->clients_max = avail - b->http_max;
    if (b->clients_max < 4)
        b->clients_max = 4;
    if (limit < 256)
        log_warn("file descriptors: the limit is %d (hard limit %llu): at most %d client and "
                 "%d HTTP connections; raise LimitNOFILE / ulimit -n", limit,
                 (unsigned long long)rl.rlim_max, b->clients_max, b->http_max);
    else
        log_info("file descriptors: limit %d%s; up to %d client and %d HTTP connections, %d "
                 "kept for workers, admin and the router's own", limit,
                 before < rl.rlim_cur ? " (raised from the soft limit)" : "", b->clients_max,
                 b->http_max, reserve);
    return DERAS_OK;
}
