/* SPDX-License-Identifier: Apache-2.0 */
/* sdnotify.c - sd_notify for deras-router and deras-worker (see sdnotify.h).
 *
 * A notification that cannot be delivered is logged once and otherwise ignored: systemd
 * then times the start out or the watchdog fires, which says more than an error here.
 */
#include "sdnotify.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "common/base/log.h"

#define STATUS_MAX 512

static void notify(const char *head, const char *fmt, va_list ap)
{
    static bool warned;
    char msg[STATUS_MAX + 64];
    int n = snprintf(msg, sizeof msg, "%sSTATUS=", head);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    int rc = sd_notify(0, msg);
    if (rc < 0 && !warned) {
        warned = true;
        log_warn("sd_notify to $NOTIFY_SOCKET failed: %s (further failures are not logged)",
                 strerror(-rc));
    }
}

void sdnotify_ready(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    notify("READY=1\n", fmt, ap);
    va_end(ap);
}

void sdnotify_status(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    notify("", fmt, ap);
    va_end(ap);
}

void sdnotify_stopping(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    notify("STOPPING=1\n", fmt, ap);
    va_end(ap);
}

void sdnotify_watchdog_init(sdnotify_watchdog *w, int64_t now_us)
{
    uint64_t usec = 0;
    w->period_us = sd_watchdog_enabled(0, &usec) > 0 && usec > 1 ? (int64_t)(usec / 2) : 0;
    w->next_us = now_us;
    if (w->period_us)
        log_info("systemd watchdog: %.1f s, pinged every %.1f s from the main loop",
                 (double)usec / 1e6, (double)w->period_us / 1e6);
}

int64_t sdnotify_watchdog_tick(sdnotify_watchdog *w, int64_t now_us)
{
    if (!w->period_us)
        return INT64_MAX;
    if (now_us >= w->next_us) {
        sd_notify(0, "WATCHDOG=1");
        w->next_us = now_us + w->period_us;
    }
    return w->next_us;
}
