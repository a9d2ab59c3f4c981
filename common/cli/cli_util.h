/* SPDX-License-Identifier: Apache-2.0 */
/* cli_util.h - small helpers shared by the command-line tools: strict number parsing,
 * the default model location, a load-progress printer, CURVE key files. */
#ifndef DERAS_CLI_UTIL_H
#define DERAS_CLI_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Parse the whole string as a number in [lo, hi]; on failure print
 * "OPTION: expected ... got '...'" to stderr and return -1. */
int cli_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_float(const char *opt, const char *s, double lo, double hi, double *out);
int cli_u64(const char *opt, const char *s, uint64_t *out);

/* The cached test model: $DERAS_MODELS (or ~/.cache/deras/models) + the file name that
 * tools/bootstrap fetches. */
void cli_default_model(char *buf, size_t cap);

/* model_opts.progress callback: "loading weights: 40%" on stderr, a line per 10%. */
void cli_progress(void *ctx, int done, int total);

/* Seconds on a monotonic clock. */
double cli_now(void);

/* A CURVE secret key (40 Z85 characters) from a file: alone on a line or as
 * `secret-key = "..."` (the zcert format). The file must not be readable by group or
 * others. DERAS_EIO, DERAS_EINVAL (mode), DERAS_EFORMAT (no key) with the reason. */
int cli_read_secret_key(const char *path, char out[41]);

#endif
