/* test_endpoints.c - the router's default endpoints, shared by router, worker and deras serve. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_is_per_user_ipc_in_tmp),
        cmocka_unit_test(runtime_dir_comes_from_the_environment),
        cmocka_unit_test(prepare_bind_creates_the_private_directory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
