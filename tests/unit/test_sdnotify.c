/* SPDX-License-Identifier: Apache-2.0 */
/* test_sdnotify.c - common/service/sdnotify.h against a fake systemd: an AF_UNIX datagram socket
 * named by $NOTIFY_SOCKET, as systemd's own is. What arrives there is what systemd would
 * read: READY=1, STOPPING=1, STATUS= lines, and WATCHDOG=1 at half of $WATCHDOG_USEC only
 * when it is due; nothing at all without $NOTIFY_SOCKET or $WATCHDOG_USEC.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/service/sdnotify.h"

typedef struct fake_systemd {
    char dir[48], path[96];
    int fd;
} fake_systemd;

static int setup(void **state)
{
    fake_systemd *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/deras-sdnotify-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/notify", f->dir);
    f->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(f->fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f->path);
    assert_int_equal(bind(f->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    setenv("NOTIFY_SOCKET", f->path, 1);
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fake_systemd *f = *state;
    close(f->fd);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    return 0;
}

/* The next datagram within timeout_ms into buf, or "" when none came. */
static const char *next_msg(fake_systemd *f, int timeout_ms, char *buf, size_t cap)
{
    struct pollfd p = {.fd = f->fd, .events = POLLIN};
    buf[0] = '\0';
    if (poll(&p, 1, timeout_ms) == 1) {
        ssize_t n = recv(f->fd, buf, cap - 1, 0);
        buf[n > 0 ? n : 0] = '\0';
    }
    return buf;
}

static void ready_stopping_and_status_reach_the_notify_socket(void **state)
{
    fake_systemd *f = *state;
    char buf[1024];
    sdnotify_ready("listening on %s", "ipc:///run/deras/clients.sock");
    assert_string_equal(next_msg(f, 1000, buf, sizeof buf),
                        "READY=1\nSTATUS=listening on ipc:///run/deras/clients.sock");
    sdnotify_status("%d workers", 2);
    assert_string_equal(next_msg(f, 1000, buf, sizeof buf), "STATUS=2 workers");
    sdnotify_stopping("draining: %d requests live", 3);
    assert_string_equal(next_msg(f, 1000, buf, sizeof buf),
                        "STOPPING=1\nSTATUS=draining: 3 requests live");
}

static void watchdog_pings_at_half_its_timeout_and_only_when_due(void **state)
{
    fake_systemd *f = *state;
    char buf[256];
    setenv("WATCHDOG_USEC", "2000000", 1);
    sdnotify_watchdog w;
    sdnotify_watchdog_init(&w, 1000);
    assert_true(w.period_us == 1000000);
    /* the first ping is due at once */
    assert_true(sdnotify_watchdog_tick(&w, 1000) == 1001000);
    assert_string_equal(next_msg(f, 1000, buf, sizeof buf), "WATCHDOG=1");
    /* not due yet: nothing sent, the same deadline */
    assert_true(sdnotify_watchdog_tick(&w, 500000) == 1001000);
    if (*next_msg(f, 100, buf, sizeof buf))
        fail_msg("a ping before it was due: expected nothing, got \"%s\"", buf);
    assert_true(sdnotify_watchdog_tick(&w, 1001000) == 2001000);
    assert_string_equal(next_msg(f, 1000, buf, sizeof buf), "WATCHDOG=1");
}

static void watchdog_of_another_process_is_not_ours(void **state)
{
    fake_systemd *f = *state;
    char buf[256], pid[32];
    setenv("WATCHDOG_USEC", "2000000", 1);
    snprintf(pid, sizeof pid, "%d", (int)getpid() + 1); /* `deras serve`'s child, say */
    setenv("WATCHDOG_PID", pid, 1);
    sdnotify_watchdog w;
    sdnotify_watchdog_init(&w, 0);
    assert_true(w.period_us == 0);
    assert_true(sdnotify_watchdog_tick(&w, 5000000) == INT64_MAX);
    if (*next_msg(f, 100, buf, sizeof buf))
        fail_msg("WATCHDOG_PID names another process: expected no ping, got \"%s\"", buf);
}

static void without_systemd_nothing_is_sent_and_nothing_fails(void **state)
{
    fake_systemd *f = *state;
    char buf[256];
    unsetenv("NOTIFY_SOCKET");
    sdnotify_watchdog w;
    sdnotify_watchdog_init(&w, 0);
    assert_true(sdnotify_watchdog_tick(&w, 0) == INT64_MAX);
    sdnotify_ready("x");
    sdnotify_stopping("y");
    if (*next_msg(f, 100, buf, sizeof buf))
        fail_msg("no $NOTIFY_SOCKET: expected nothing, got \"%s\"", buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(ready_stopping_and_status_reach_the_notify_socket, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(watchdog_pings_at_half_its_timeout_and_only_when_due,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(watchdog_of_another_process_is_not_ours, setup, teardown),
        cmocka_unit_test_setup_teardown(without_systemd_nothing_is_sent_and_nothing_fails, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
