/* SPDX-License-Identifier: Apache-2.0 */
/* test_endpoints.c - the router's default endpoints, shared by router, worker and deras
 * serve, and the tcp:// parser and loopback rule every bind and connect goes through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/wire/endpoints.h"
#include "common/base/status.h"

static void default_is_per_user_ipc_in_tmp(void **state)
{
    unsetenv("DERAS_RUNTIME_DIR");
    char ep[ENDPOINT_MAX], want[ENDPOINT_MAX];
    assert_int_equal(endpoints_default_workers(ep, sizeof ep), DERAS_OK);
    snprintf(want, sizeof want, "ipc:///tmp/deras-%u/workers.sock", (unsigned)getuid());
    assert_string_equal(ep, want);
    assert_int_equal(endpoints_default_clients(ep, sizeof ep), DERAS_OK);
    snprintf(want, sizeof want, "ipc:///tmp/deras-%u/clients.sock", (unsigned)getuid());
    assert_string_equal(ep, want);
    assert_int_equal(endpoints_default_admin(ep, sizeof ep), DERAS_OK);
    snprintf(want, sizeof want, "ipc:///tmp/deras-%u/admin.sock", (unsigned)getuid());
    assert_string_equal(ep, want);
}

static void runtime_dir_comes_from_the_environment(void **state)
{
    setenv("DERAS_RUNTIME_DIR", "/run/deras", 1);
    char ep[ENDPOINT_MAX];
    assert_int_equal(endpoints_default_workers(ep, sizeof ep), DERAS_OK);
    assert_string_equal(ep, "ipc:///run/deras/workers.sock");
    char small[16];
    assert_int_equal(endpoints_default_workers(small, sizeof small), DERAS_ERANGE);
    unsetenv("DERAS_RUNTIME_DIR");
}

static void prepare_bind_creates_the_private_directory(void **state)
{
    char dir[64], ep[128];
    snprintf(dir, sizeof dir, "/tmp/deras-ep-XXXXXX");
    assert_non_null(mkdtemp(dir));
    rmdir(dir);
    snprintf(ep, sizeof ep, "ipc://%s/workers.sock", dir);
    assert_int_equal(endpoints_prepare_bind(ep), DERAS_OK);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(endpoints_prepare_bind(ep), DERAS_OK); /* exists: fine */
    assert_int_equal(endpoints_prepare_bind("tcp://127.0.0.1:5556"), DERAS_OK);
    assert_int_equal(endpoints_prepare_bind("ipc:///nonexistent-root/a/b.sock"), DERAS_EIO);
    assert_non_null(strstr(deras_errmsg(), "/nonexistent-root/a"));
    rmdir(dir);
}

static void tcp_endpoints_parse_to_one_host_and_port(void **state)
{
    (void)state;
    char host[256];
    int port;
    assert_int_equal(endpoint_tcp_parse("tcp://127.0.0.1:5555", host, sizeof host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 5555);
    assert_int_equal(endpoint_tcp_parse("tcp://[::1]:1", host, sizeof host, &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(endpoint_tcp_parse("tcp://*:*", host, sizeof host, &port), 0);
    assert_string_equal(host, "*");
    assert_int_equal(port, 0);
    assert_int_equal(endpoint_tcp_parse("tcp://gpu-node-7.example:65535", host, sizeof host,
                                        &port), 0);
    static const char *const bad[] = {
        "tcp://127.0.0.1:1;0.0.0.0:5555", /* libzmq's SOURCE;DESTINATION: binds 0.0.0.0 */
        "tcp://127.0.0.1;0.0.0.0:5555", "tcp://127.0.0.1:", "tcp://:5555", "tcp://127.0.0.1",
        "tcp://127.0.0.1:0", "tcp://127.0.0.1:65536", "tcp://127.0.0.1:99999999999",
        "tcp://127.0.0.1:55 55", "tcp://127.0.0.1:5555/x", "tcp://a b:1", "tcp://[::1:1",
        "tcp://::1:5555", "tcp://a*:1", "ipc:///tmp/x", "tcp://", "tcp://[]:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (endpoint_tcp_parse(bad[i], host, sizeof host, &port) != DERAS_EINVAL)
            fail_msg("'%s' was accepted as %s:%d", bad[i], host, port);
    assert_int_equal(endpoint_tcp_parse("tcp://127.0.0.1:1;0.0.0.0:5555", host, sizeof host,
                                        &port), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "SOURCE;DESTINATION"));
}

static void loopback_rule_looks_at_resolved_addresses(void **state)
{
    (void)state;
    static const struct {
        const char *ep;
        bool loopback;
    } cases[] = {
        {"tcp://127.0.0.1:5555", true}, {"tcp://127.1.2.3:5555", true},
        {"tcp://[::1]:5555", true},     {"tcp://localhost:5555", true},
        {"tcp://lo:5555", true},        {"tcp://0.0.0.0:5555", false},
        {"tcp://*:5555", false},        {"tcp://10.1.2.3:5555", false},
        {"tcp://[::]:5555", false},     {"tcp://eth0:5555", false}, /* an interface: fail closed */
        {"tcp://128.0.0.1:5555", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool lb = !cases[i].loopback;
        if (endpoint_tcp_loopback(cases[i].ep, &lb) != DERAS_OK || lb != cases[i].loopback)
            fail_msg("%s: loopback %d, expected %d (%s)", cases[i].ep, lb, cases[i].loopback,
                     deras_errmsg());
    }
    bool lb;
    assert_int_equal(endpoint_tcp_loopback("tcp://127.0.0.1:1;0.0.0.0:5555", &lb), DERAS_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_is_per_user_ipc_in_tmp),
        cmocka_unit_test(runtime_dir_comes_from_the_environment),
        cmocka_unit_test(prepare_bind_creates_the_private_directory),
        cmocka_unit_test(tcp_endpoints_parse_to_one_host_and_port),
        cmocka_unit_test(loopback_rule_looks_at_resolved_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
