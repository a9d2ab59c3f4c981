/* SPDX-License-Identifier: Apache-2.0 */
/* status.c - status names and the per-thread failure message.
 *
 * The message lives in a fixed thread-local buffer: recording a failure never allocates,
 * so it works when memory is exhausted, and threads never see each other's messages.
 * Messages longer than the buffer are truncated.
 */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define ERRMSG_CAP 1024

static _Thread_local char errmsg[ERRMSG_CAP];

const char *deras_status_name(int status)
{
    switch (status) {
    case DERAS_OK: return "ok";
    case DERAS_EINVAL: return "invalid_argument";
    case DERAS_ENOMEM: return "out_of_memory";
    case DERAS_EIO: return "io_error";
    case DERAS_EFORMAT: return "format_error";
    case DERAS_EUNSUPPORTED: return "unsupported";
    case DERAS_ENOTFOUND: return "not_found";
    case DERAS_ERANGE: return "out_of_range";
    case DERAS_EBACKEND: return "backend_error";
    case DERAS_ETIMEOUT: return "timeout";
    case DERAS_EBUSY: return "busy";
    case DERAS_ECLOSED: return "closed";
    case DERAS_EINTERNAL: return "internal_error";
    case DERAS_ECONTEXT: return "context_length_exceeded";
    default: return "unknown";
    }
}

int deras_fail(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return status;
}

int deras_fail_ctx(int status, const char *fmt, ...)
{
    char prev[ERRMSG_CAP];
    memcpy(prev, errmsg, sizeof prev);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof errmsg)
        snprintf(errmsg + n, sizeof errmsg - (size_t)n, "%s", prev);
    return status;
}

const char *deras_errmsg(void)
{
    return errmsg;
}

void deras_errclear(void)
{
    errmsg[0] = '\0';
}
