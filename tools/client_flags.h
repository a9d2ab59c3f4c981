/* SPDX-License-Identifier: Apache-2.0 */
/* client_flags.h - command-line flags shared by the router clients (`deras complete`,
 * `deras bench`): where the router is, how long to wait, and the request's sampling fields.
 *
 * A command puts its own getopt_long options first and appends these with
 * client_flags_options(); its own option of the same name wins (bench's --max-tokens takes
 * a range). Flags not given leave the request field at the protocol default, so the encoder
 * omits it and the router's default applies.
 */
#ifndef DERAS_CLIENT_FLAGS_H
#define DERAS_CLIENT_FLAGS_H

#include <getopt.h>
#include <stdio.h>

#include "common/wire/protocol.h"
#include "tools/client/deras_client.h"

#define CLIENT_FLAGS_MAX_OPTIONS 64

typedef struct client_flags {
    const char *address;          /* --address, else $DERAS_ADDRESS, else the default */
    const char *curve_server_key; /* --curve-server-key, else $DERAS_CURVE_SERVER_KEY */
    const char *curve_key_file;   /* --curve-client-key, else $DERAS_CURVE_CLIENT_KEY: a file
                                     holding this client's CURVE secret key */
    double timeout_s;             /* --timeout: longest silence from the router (default 120) */
    proto_request req;            /* sampling and request fields; no prompt, no id */
} client_flags;

/* Defaults, reading the environment. */
void client_flags_init(client_flags *f);

/* Fill out[] (capacity CLIENT_FLAGS_MAX_OPTIONS) with `own` (zero-terminated) followed by
 * the shared options whose names neither `own` uses nor `exclude` (NULL-terminated names,
 * or NULL) lists, zero-terminated. */
void client_flags_options(const struct option *own, const char *const *exclude,
                          struct option *out);

/* Apply getopt code c with its argument: 1 if it is a shared flag and was applied, 0 if it
 * is not a shared flag, -1 on a bad value (message printed: exit with status 2). */
int client_flags_apply(client_flags *f, int c, const char *arg);

/* Connect as the flags say, reading the client key file if one is named (its secret key
 * alone on a line or as `secret-key = "..."`, the zcert format; the file must not be
 * readable by group or others). *out is NULL on failure, with deras_errmsg() set. */
int client_flags_connect(const client_flags *f, int max_in_flight, deras_client_t **out);

/* Print the help of the shared flags that client_flags_options() added for the same
 * `own` and `exclude`. */
void client_flags_usage(FILE *f, const struct option *own, const char *const *exclude);

#endif
