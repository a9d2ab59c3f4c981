/* SPDX-License-Identifier: Apache-2.0 */
/* sdnotify.h - telling systemd how a deras process is doing; nothing happens elsewhere.
 *
 * Under a Type=notify unit (systemd/), systemd sets $NOTIFY_SOCKET and waits for READY=1
 * before it counts the service as started (and starts what is ordered after it); with
 * WatchdogSec= it also sets $WATCHDOG_USEC and kills the process when no WATCHDOG=1 came
 * for that long. deras-router says READY once its sockets are bound, deras-worker once the
 * router WELCOMEd it; both say STOPPING when a drain begins, and ping the watchdog from
 * their main loop only (never from a helper thread), so a loop that hangs gets the process
 * killed and restarted.
 *
 * These wrap libsystemd's sd_notify, which does nothing when $NOTIFY_SOCKET is unset
 * (tests, a shell, `deras serve`). Cost: one datagram per call (libsystemd opens and closes
 * a socket each time); the watchdog pings at half its timeout, a few times a minute.
 */
#ifndef DERAS_SDNOTIFY_H
#define DERAS_SDNOTIFY_H

#include <stdint.h>

/* READY=1 with a STATUS= line (printf format). */
void sdnotify_ready(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* STATUS= only: what `systemctl status` shows. */
void sdnotify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* STOPPING=1 with a STATUS= line: the drain began. */
void sdnotify_stopping(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The watchdog of one main loop. Disabled (a no-op) unless systemd asked for it. */
typedef struct sdnotify_watchdog {
    int64_t period_us;  /* half of $WATCHDOG_USEC; 0: disabled */
    int64_t next_us;    /* when the next ping is due */
} sdnotify_watchdog;

/* Read $WATCHDOG_USEC (and $WATCHDOG_PID: another process's watchdog is not ours); the
 * first ping is due at once. */
void sdnotify_watchdog_init(sdnotify_watchdog *w, int64_t now_us);
/* Ping if due. Returns when the next ping is due (INT64_MAX when disabled), for the
 * caller's poll timeout. Times are the caller's monotonic clock in microseconds. */
int64_t sdnotify_watchdog_tick(sdnotify_watchdog *w, int64_t now_us);

#endif
