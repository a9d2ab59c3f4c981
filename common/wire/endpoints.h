/* SPDX-License-Identifier: Apache-2.0 */
/* endpoints.h - where deras processes find each other when nobody says otherwise.
 *
 * The router binds three ZeroMQ sockets: one for clients, one for workers and one for
 * administration (derasctl). By default all are ipc:// sockets in a per-user runtime
 * directory, /tmp/deras-<uid>/, so one user's router, workers and `deras serve` meet
 * without configuration and two users on one machine never collide. $DERAS_RUNTIME_DIR
 * replaces the directory (tests, systemd's RuntimeDirectory). The router, deras-worker,
 * `deras serve` and derasctl all take their defaults from here, so they cannot disagree.
 *
 * No ZeroMQ here: these are strings and a mkdir.
 */
#ifndef DERAS_ENDPOINTS_H
#define DERAS_ENDPOINTS_H

#include <stdbool.h>
#include <stddef.h>

#define ENDPOINT_MAX 512

/* The runtime directory: $DERAS_RUNTIME_DIR if set and non-empty, else /tmp/deras-<uid>.
 * DERAS_ERANGE if it does not fit in cap. */
int endpoints_runtime_dir(char *buf, size_t cap);

/* The runtime directory, created (mode 0700) if missing and then trusted only if it is a
 * real directory (not a symbolic link) owned by this user and writable by nobody else
 * (group or other write refused; read and search by the group allowed, as systemd's
 * RuntimeDirectoryMode=0750 leaves it). DERAS_EINVAL naming the directory, its owner and
 * mode otherwise: another user who made /tmp/deras-<uid> first must not be trusted. */
int endpoints_runtime_dir_checked(char *buf, size_t cap);

/* The same trust test on a directory path: owned by this user (or by root with the sticky
 * bit, like /tmp, where others cannot replace our files), not writable by others unless
 * sticky, not a link. DERAS_EINVAL with the reason, DERAS_EIO if it cannot be opened. */
int endpoints_dir_trusted(const char *dir);

/* "ipc://<runtime dir>/workers.sock": the router's worker socket (deras-worker --router,
 * deras-router --workers). DERAS_ERANGE if it does not fit in cap. */
int endpoints_default_workers(char *buf, size_t cap);

/* "ipc://<runtime dir>/clients.sock": the router's client socket. */
int endpoints_default_clients(char *buf, size_t cap);

/* "ipc://<runtime dir>/admin.sock": the router's admin socket (derasctl). */
int endpoints_default_admin(char *buf, size_t cap);

/* The runtime directory of the systemd units (RuntimeDirectory=deras). */
#define ENDPOINTS_UNITS_RUNTIME_DIR "/run/deras"

/* The admin socket derasctl tries: the runtime directory's when $DERAS_RUNTIME_DIR is set;
 * without it, the units' (/run/deras/admin.sock) when a router accepts connections there,
 * so an operator's shell finds the service's router (a connect(2), the only cost); else
 * /tmp/deras-<uid>/admin.sock. DERAS_ERANGE. */
int endpoints_default_admin_for_client(char *buf, size_t cap);

/* For a process about to bind an ipc:// endpoint: create its directory (mode 0700, one
 * level) if missing. Other transports: nothing to do. DERAS_EIO naming the directory when
 * it cannot be created. */
int endpoints_prepare_bind(const char *endpoint);

/* Whether a process accepts connections on the unix socket at path, a file name (not an
 * ipc:// endpoint): a stale file left by a killed process does not; nor does a path too
 * long for a unix socket. One connect attempt, O(1). */
bool endpoints_ipc_live(const char *path);

/* A tcp:// endpoint split into its one host and one port. HOST: an IPv4 literal, an IPv6
 * literal in brackets (returned without them), a host or interface name, or "*" (every
 * interface); PORT: 1..65535, or "*" (an ephemeral port: *port is 0). Everything else is
 * DERAS_EINVAL with the reason: libzmq's "SOURCE;DESTINATION" form, empty or extra parts,
 * characters no host name has. host_cap >= 256 holds any valid host. O(length). */
int endpoint_tcp_parse(const char *endpoint, char *host, size_t host_cap, int *port);

/* Whether a tcp:// endpoint reaches loopback only: every address its host resolves to is
 * in 127.0.0.0/8 or ::1 (the interface "lo" counts; "*", any other interface and a name
 * that does not resolve do not: the caller then asks for CURVE). DERAS_EINVAL as
 * endpoint_tcp_parse. May block on name resolution (numeric hosts never do). */
int endpoint_tcp_loopback(const char *endpoint, bool *loopback);

#endif
