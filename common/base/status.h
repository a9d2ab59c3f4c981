/* SPDX-License-Identifier: Apache-2.0 */
/* status.h - the one status convention of deras, and the error message that goes with it.
 *
 * Every fallible function returns 0 (DERAS_OK) on success or a negative value from
 * enum deras_status on failure; results travel through out-parameters, and so do the
 * objects constructors make (int x_new(..., x_t **out), *out NULL on failure; see
 * docs/architecture.md, "Conventions"). A failing function also records a human-readable message naming what
 * failed and why ("model.gguf: tensor 'blk.3.attn_q.weight': data ends past the end of
 * the file"), kept per thread, so callers can report it without threading buffers
 * through every signature. The message belongs to the most recent failure in this thread.
 *
 * Status names returned by deras_status_name() are stable snake_case codes: they are
 * part of the protocol and of log output, so never rename one.
 */
#ifndef DERAS_STATUS_H
#define DERAS_STATUS_H

#include <stddef.h>

enum deras_status {
    DERAS_OK = 0,
    DERAS_EINVAL = -1,       /* invalid argument from the caller */
    DERAS_ENOMEM = -2,       /* allocation failed */
    DERAS_EIO = -3,          /* open, read, write or mmap failed */
    DERAS_EFORMAT = -4,      /* malformed file, message or text */
    DERAS_EUNSUPPORTED = -5, /* well-formed but not supported (dtype, architecture) */
    DERAS_ENOTFOUND = -6,    /* missing key, tensor, file or id */
    DERAS_ERANGE = -7,       /* value out of its allowed range */
    DERAS_EBACKEND = -8,     /* compute backend or device failure */
    DERAS_ETIMEOUT = -9,     /* a wait ran past its deadline */
    DERAS_EBUSY = -10,       /* capacity exhausted; retry later */
    DERAS_ECLOSED = -11,     /* peer or object already shut down */
    DERAS_EINTERNAL = -12,   /* a broken invariant of our own */
    DERAS_ECONTEXT = -13,    /* a request longer than the context (prompt + max_tokens) */
};

/* Stable snake_case code for a status ("ok", "invalid_argument", ...); "unknown" for
 * values outside the enum. Never NULL. */
const char *deras_status_name(int status);

/* Record a failure message for this thread (printf-style) and return `status`, so a
 * failing path reads `return deras_fail(DERAS_EFORMAT, "%s: bad magic", path);`. */
int deras_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prefix the current message with more context ("loading model: " + message) and
 * return `status`. Used where a lower layer already said what failed. */
int deras_fail_ctx(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The message of the most recent failure in this thread; "" if none. Never NULL. The
 * pointer stays valid until the next deras_fail* call in this thread. */
const char *deras_errmsg(void);

/* Forget the current message. */
void deras_errclear(void);

#endif
