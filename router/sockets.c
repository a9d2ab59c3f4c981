/* SPDX-License-Identifier: Apache-2.0 */
/* sockets.c - what the router's three ROUTER sockets (clients, workers, admin) share: the
 * options set before bind, and the socket monitor through which the client and worker
 * sockets learn that a connection closed.
 *
 * Every socket is ZMQ_ROUTER_MANDATORY (a send to a peer that is gone fails instead of
 * vanishing) and lingers 0 while open (each *_close sets its own linger for the last
 * frames); the rest (frame cap, queue depths, ZMTP heartbeats, TCP keepalive) is the
 * caller's. Setup is a handful of system calls per socket; reading costs one
 * zmq_msg_recv per frame (router_recv_frames) or per event part (router_monitor_next)
 * and allocates nothing beyond what libzmq does for the frames.
 */
#include <errno.h>
#include <string.h>

#include "common/base/status.h"
#include "common/wire/zmq_check.h"
#include "router/router.h"

int router_socket_open(router_t *rt, const router_sock_opts *o, void **out)
{
    int rc = ZMQ_CHECK_PTR(*out, zmq_socket(rt->zctx, ZMQ_ROUTER));
    if (rc)
        return rc;
    void *s = *out;
    int64_t maxmsg = o->max_msg_bytes;
    if ((rc = ZMQ_SET_INT(s, ZMQ_ROUTER_MANDATORY, 1)) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg))) ||
        (rc = ZMQ_SET_INT(s, ZMQ_SNDHWM, o->sndhwm)) ||
        (o->rcvhwm && (rc = ZMQ_SET_INT(s, ZMQ_RCVHWM, o->rcvhwm))) ||
        (rc = ZMQ_SET_INT(s, ZMQ_LINGER, 0)))
        return rc;
    if (o->heartbeat_ivl_ms &&
        ((rc = ZMQ_SET_INT(s, ZMQ_HEARTBEAT_IVL, o->heartbeat_ivl_ms)) ||
         (rc = ZMQ_SET_INT(s, ZMQ_HEARTBEAT_TIMEOUT, o->heartbeat_timeout_ms))))
        return rc;
    if (o->keepalive_idle_s && !strncmp(o->endpoint, "tcp://", 6) &&
        ((rc = ZMQ_SET_INT(s, ZMQ_TCP_KEEPALIVE, 1)) ||
         (rc = ZMQ_SET_INT(s, ZMQ_TCP_KEEPALIVE_IDLE, o->keepalive_idle_s)) ||
         (rc = ZMQ_SET_INT(s, ZMQ_TCP_KEEPALIVE_INTVL, o->keepalive_intvl_s)) ||
         (o->keepalive_cnt && (rc = ZMQ_SET_INT(s, ZMQ_TCP_KEEPALIVE_CNT, o->keepalive_cnt)))))
        return rc;
    return DERAS_OK;
}

int router_monitor_open(router_t *rt, void *sock, const char *addr, int events, void **mon)
{
    int rc;
    if ((rc = ZMQ_CHECK(zmq_socket_monitor(sock, addr, events))) ||
        (rc = ZMQ_CHECK_PTR(*mon, zmq_socket(rt->zctx, ZMQ_PAIR))) ||
        (rc = ZMQ_SET_INT(*mon, ZMQ_LINGER, 0)) ||
        (rc = ZMQ_CHECK(zmq_connect(*mon, addr))))
        return rc;
    return DERAS_OK;
}

bool router_monitor_next(void *mon, uint16_t *event, uint32_t *value)
{
    zmq_msg_t ev;
    zmq_msg_init(&ev);
    if (zmq_msg_recv(&ev, mon, ZMQ_DONTWAIT) == -1) {
        zmq_msg_close(&ev);
        return false;
    }
    *event = 0;
    *value = 0;
    if (zmq_msg_size(&ev) >= 6) {
        memcpy(event, zmq_msg_data(&ev), 2);
        memcpy(value, (char *)zmq_msg_data(&ev) + 2, 4);
    }
    bool more = zmq_msg_more(&ev);
    zmq_msg_close(&ev);
    if (more) { /* the endpoint's address: not needed */
        zmq_msg_t addr;
        zmq_msg_init(&addr);
        zmq_msg_recv(&addr, mon, ZMQ_DONTWAIT);
        zmq_msg_close(&addr);
    }
    return true;
}

int router_recv_frames(void *sock, zmq_msg_t *f, int max, int *extra)
{
    int n = 0;
    bool more = true;
    *extra = 0;
    while (more) {
        zmq_msg_t tmp, *m = n < max ? &f[n] : &tmp;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) == -1) {
            int err = zmq_errno();
            zmq_msg_close(m);
            errno = err; /* for the caller's message when nothing came */
            break;       /* after the first frame: multipart messages arrive whole */
        }
        more = zmq_msg_more(m);
        if (m == &tmp) {
            (*extra)++;
            zmq_msg_close(m);
        } else {
            n++;
        }
    }
    return n;
}
