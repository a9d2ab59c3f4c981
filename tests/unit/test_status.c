/* SPDX-License-Identifier: Apache-2.0 */
/* test_status.c - the status convention: stable names, messages per thread, context prefix. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <string.h>

#include "common/base/status.h"

static void status_names_are_stable_snake_case(void **state)
{
    (void)state;
    assert_string_equal(deras_status_name(DERAS_OK), "ok");
    assert_string_equal(deras_status_name(DERAS_EFORMAT), "format_error");
    assert_string_equal(deras_status_name(DERAS_EUNSUPPORTED), "unsupported");
    assert_string_equal(deras_status_name(DERAS_EBUSY), "busy");
    assert_string_equal(deras_status_name(DERAS_ECONTEXT), "context_length_exceeded");
    assert_string_equal(deras_status_name(12345), "unknown");
}

static void fail_records_message_and_returns_status(void **state)
{
    (void)state;
    deras_errclear();
    assert_string_equal(deras_errmsg(), "");
    assert_int_equal(deras_fail(DERAS_EFORMAT, "%s: bad magic %d", "x.gguf", 7), DERAS_EFORMAT);
    assert_string_equal(deras_errmsg(), "x.gguf: bad magic 7");
    assert_int_equal(deras_fail_ctx(DERAS_EFORMAT, "loading %s: ", "model"), DERAS_EFORMAT);
    assert_string_equal(deras_errmsg(), "loading model: x.gguf: bad magic 7");
}

static void *other_thread(void *arg)
{
    (void)arg;
    deras_fail(DERAS_EIO, "from the other thread");
    return NULL;
}

static void messages_are_per_thread(void **state)
{
    (void)state;
    deras_fail(DERAS_EINVAL, "mine");
    pthread_t th;
    pthread_create(&th, NULL, other_thread, NULL);
    pthread_join(th, NULL);
    assert_string_equal(deras_errmsg(), "mine");
}

static void long_messages_are_truncated_not_overflowed(void **state)
{
    (void)state;
    char big[4000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    deras_fail(DERAS_EINVAL, "%s", big);
    size_t n = strlen(deras_errmsg());
    assert_true(n > 0 && n < sizeof big);
    deras_fail_ctx(DERAS_EINVAL, "%s", big);
    assert_true(strlen(deras_errmsg()) == n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_names_are_stable_snake_case),
        cmocka_unit_test(fail_records_message_and_returns_status),
        cmocka_unit_test(messages_are_per_thread),
        cmocka_unit_test(long_messages_are_truncated_not_overflowed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
