/* SPDX-License-Identifier: Apache-2.0 */
/* zmq_check.h - ZeroMQ calls checked: a failure becomes a status code and a message that
 * names the call, the file and the line.
 *
 *   if ((rc = ZMQ_CHECK(zmq_connect(sock, endpoint))))
 *       goto fail;
 *
 * ZMQ_CHECK is for calls that return -1 on failure (most of libzmq); ZMQ_CHECK_PTR for
 * those that return NULL (zmq_ctx_new, zmq_socket). ZMQ_SET_INT sets an int socket option
 * and names the option and the value when it fails (always DERAS_EIO: a refused option is
 * a setup error). ETERM (context shut down) maps to
 * DERAS_ECLOSED, EAGAIN to DERAS_EBUSY, EINTR to DERAS_ETIMEOUT (interrupted wait; callers
 * that care retry), ENOMEM to DERAS_ENOMEM, anything else to DERAS_EIO.
 *
 * Header-only and included only by code that links libzmq (router/, worker/server.c,
 * tools/): common/'s libraries stay free of ZeroMQ.
 */
#ifndef DERAS_ZMQ_CHECK_H
#define DERAS_ZMQ_CHECK_H

#include <errno.h>
#include <zmq.h>

#include "common/base/status.h"

static inline int zmq_check_fail(const char *call, const char *file, int line)
{
    int err = zmq_errno();
    int st = err == ETERM ? DERAS_ECLOSED
           : err == EAGAIN ? DERAS_EBUSY
           : err == EINTR ? DERAS_ETIMEOUT
           : err == ENOMEM ? DERAS_ENOMEM
                           : DERAS_EIO;
    return deras_fail(st, "%s: %s (%s:%d)", call, zmq_strerror(err), file, line);
}

#define ZMQ_CHECK(call) ((call) == -1 ? zmq_check_fail(#call, __FILE__, __LINE__) : DERAS_OK)
#define ZMQ_CHECK_PTR(ptr, call) \
    (((ptr) = (call)) == NULL ? zmq_check_fail(#call, __FILE__, __LINE__) : DERAS_OK)

/* zmq_setsockopt of an int: ZMQ_SET_INT(sock, ZMQ_SNDHWM, 1000). DERAS_EIO on failure. */
#define ZMQ_SET_INT(sock, opt, v) zmq_set_int((sock), (opt), (v), #opt)

static inline int zmq_set_int(void *sock, int opt, int v, const char *name)
{
    if (zmq_setsockopt(sock, opt, &v, sizeof v) == -1)
        return deras_fail(DERAS_EIO, "zmq_setsockopt(%s=%d): %s", name, v,
                          zmq_strerror(zmq_errno()));
    return DERAS_OK;
}

#endif
