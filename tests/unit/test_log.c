/* SPDX-License-Identifier: Apache-2.0 */
/* test_log.c - the three log formats (text, journal priorities, JSON lines) and the refusal
 * of unknown DERAS_LOG / DERAS_LOG_FORMAT values. stderr is redirected to a file per case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/log.h"
#include "common/base/status.h"

typedef struct capture {
    char path[64];
    int saved;
} capture;

static void capture_begin(capture *c)
{
    strcpy(c->path, "/tmp/deras-log-XXXXXX");
    int fd = mkstemp(c->path);
    assert_true(fd >= 0);
    fflush(stderr);
    c->saved = dup(2);
    assert_int_equal(dup2(fd, 2), 2);
    close(fd);
}

/* Restore stderr; the captured text (malloc'd). */
static char *capture_end(capture *c)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    FILE *f = fopen(c->path, "r");
    assert_non_null(f);
    static char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(c->path);
    return strdup(buf);
}

static void json_lines_parse_and_escape(void **state)
{
    (void)state;
    log_set_name("test-log");
    log_set_level(LOG_INFO);
    log_set_format(LOG_JSON);
    capture c;
    capture_begin(&c);
    log_warn("quote \" backslash \\ newline \n tab \t ctrl \x01 utf-8 \xc3\xa9");
    log_debug("below the level: not written");
    log_info("second");
    char *out = capture_end(&c);
    char *nl = strchr(out, '\n');
    assert_non_null(nl);
    *nl = '\0';
    json_error_t err;
    json_t *o = json_loads(out, 0, &err);
    if (!o)
        fail_msg("not JSON: %s (%s)", out, err.text);
    assert_string_equal(json_string_value(json_object_get(o, "level")), "warn");
    assert_string_equal(json_string_value(json_object_get(o, "proc")), "test-log");
    assert_string_equal(json_string_value(json_object_get(o, "msg")),
                        "quote \" backslash \\ newline \n tab \t ctrl \x01 utf-8 \xc3\xa9");
    assert_int_equal(strlen(json_string_value(json_object_get(o, "ts"))), 24);
    json_decref(o);
    json_t *o2 = json_loads(nl + 1, JSON_DISABLE_EOF_CHECK, &err);
    assert_non_null(o2);
    assert_string_equal(json_string_value(json_object_get(o2, "msg")), "second");
    json_decref(o2);
    assert_null(strstr(nl + 1, "below the level"));
    free(out);
}

static void journal_priorities_when_stderr_is_the_journal(void **state)
{
    (void)state;
    capture c;
    capture_begin(&c);
    struct stat st;
    assert_int_equal(fstat(2, &st), 0);
    char js[64];
    snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    setenv("JOURNAL_STREAM", js, 1);
    setenv("DERAS_LOG", "debug", 1);
    unsetenv("DERAS_LOG_FORMAT");
    int rc = log_init();
    log_debug("d");
    log_info("i");
    log_warn("w");
    log_error("two\nlines");
    char *out = capture_end(&c);
    unsetenv("JOURNAL_STREAM");
    unsetenv("DERAS_LOG");
    assert_int_equal(rc, DERAS_OK);
    assert_int_equal(log_get_format(), LOG_JOURNAL);
    assert_string_equal(out, "<7>d\n<6>i\n<4>w\n<3>two lines\n");
    free(out);
    /* the same variable naming another stream (a child whose stderr was redirected): text */
    setenv("JOURNAL_STREAM", "1:2", 1);
    assert_int_equal(log_init(), DERAS_OK);
    assert_int_equal(log_get_format(), LOG_TEXT);
    unsetenv("JOURNAL_STREAM");
}

static void text_lines_carry_time_name_and_level(void **state)
{
    (void)state;
    log_set_name("test-log");
    log_set_level(LOG_INFO);
    log_set_format(LOG_TEXT);
    capture c;
    capture_begin(&c);
    log_error("boom %d", 7);
    char *out = capture_end(&c);
    /* "2026-11-25T12:00:00.123Z test-log E boom 7\n" */
    assert_int_equal(out[4], '-');
    assert_int_equal(out[23], 'Z');
    assert_string_equal(out + 24, " test-log E boom 7\n");
    free(out);
}

static void unknown_levels_and_formats_are_refused(void **state)
{
    (void)state;
    setenv("DERAS_LOG", "verbose", 1);
    assert_int_equal(log_init(), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "DERAS_LOG"));
    assert_non_null(strstr(deras_errmsg(), "debug, info, warn, error or off"));
    setenv("DERAS_LOG", "WARN", 1); /* case does not matter */
    setenv("DERAS_LOG_FORMAT", "xml", 1);
    assert_int_equal(log_init(), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "DERAS_LOG_FORMAT"));
    setenv("DERAS_LOG_FORMAT", "json", 1);
    assert_int_equal(log_init(), DERAS_OK);
    assert_int_equal(log_get_level(), LOG_WARN);
    assert_int_equal(log_get_format(), LOG_JSON);
    unsetenv("DERAS_LOG");
    unsetenv("DERAS_LOG_FORMAT");
    enum log_level l;
    assert_int_equal(log_parse_level(NULL, &l), DERAS_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(json_lines_parse_and_escape),
        cmocka_unit_test(journal_priorities_when_stderr_is_the_journal),
        cmocka_unit_test(text_lines_carry_time_name_and_level),
        cmocka_unit_test(unknown_levels_and_formats_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
