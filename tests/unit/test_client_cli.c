/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_cli.c - `deras complete` and `deras bench` end to end against a fake router.
 *
 * Runs $DERAS_BUILD_DIR/tools/deras as a child process (skips when it is absent) against
 * the fake router thread (fake_frontend.c) and checks what a user sees: the streamed text on
 * stdout, usage on stderr, exit statuses 0 / 1 (server error, timeout) / 2 (usage), and
 * bench's --json report (parsed) with request counts, failures by code and percentiles.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_frontend.h"
#include "test_util.h"

static char deras_bin[4096];
static fake_frontend *router;

typedef struct run_result {
    int status; /* exit status, or -1 if killed */
    char out[65536], err[16384];
} run_result;

static void read_all(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    ssize_t got;
    while (n + 1 < cap && (got = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    char sink[4096];
    while (read(fd, sink, sizeof sink) > 0)
        ;
}

/* Run `deras ARGS...` (NULL-terminated); stderr goes to a file to avoid two pipes. */
static void run(run_result *r, ...)
{
    const char *argv[64];
    int argc = 0;
    argv[argc++] = deras_bin;
    va_list ap;
    va_start(ap, r);
    const char *a;
    while ((a = va_arg(ap, const char *)) && argc < 63)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    char err_path[] = "/tmp/deras-client-cli-err-XXXXXX";
    int err_fd = mkstemp(err_path);
    assert_true(err_fd >= 0);
    int pipe_fd[2];
    assert_int_equal(pipe(pipe_fd), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pipe_fd[1], 1);
        dup2(err_fd, 2);
        close(pipe_fd[0]);
        close(pipe_fd[1]);
        unsetenv("DERAS_ADDRESS");
        unsetenv("DERAS_CURVE_SERVER_KEY");
        execv(deras_bin, (char *const *)argv);
        _exit(127);
    }
    close(pipe_fd[1]);
    read_all(pipe_fd[0], r->out, sizeof r->out);
    close(pipe_fd[0]);
    int st;
    waitpid(pid, &st, 0);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    lseek(err_fd, 0, SEEK_SET);
    read_all(err_fd, r->err, sizeof r->err);
    close(err_fd);
    unlink(err_path);
}

static void expect_status(const run_result *r, int want)
{
    if (r->status != want)
        fail_msg("expected exit status %d, got %d\nstdout: %s\nstderr: %s", want, r->status,
                 r->out, r->err);
}

static void test_complete_streams_text_and_reports_usage(void **state)
{
    static run_result r;
    run(&r, "complete", "--address", fake_frontend_address(router), "--max-tokens", "4",
        "--temperature", "0", "hello there", NULL);
    expect_status(&r, 0);
    assert_string_equal(r.out, "w0 w1 w2 w3 \n");
    assert_non_null(strstr(r.err, "prompt 2 tokens, completion 4 tokens; finish: length"));
    assert_non_null(strstr(r.err, "router: queue"));
}

static void test_complete_no_stream_and_n_samples(void **state)
{
    static run_result r;
    run(&r, "complete", "--address", fake_frontend_address(router), "--no-stream", "stop:2",
        NULL);
    expect_status(&r, 0);
    assert_string_equal(r.out, "w0 w1 \n");
    assert_non_null(strstr(r.err, "finish: stop"));
    run(&r, "complete", "--address", fake_frontend_address(router), "--n", "2", "--max-tokens",
        "2", "p", NULL);
    expect_status(&r, 0);
    assert_string_equal(r.out, "[0] w0 w1 \n[1] w0 w1 \n");
    assert_non_null(strstr(r.err, "completion 4 tokens; finish: length,length"));
}

static void test_complete_server_error_exits_1_with_its_code(void **state)
{
    static run_result r;
    run(&r, "complete", "--address", fake_frontend_address(router), "error:busy", NULL);
    expect_status(&r, 1);
    assert_non_null(strstr(r.err, "error busy: fake failure"));
}

static void test_complete_silent_router_exits_1_after_the_timeout(void **state)
{
    static run_result r;
    run(&r, "complete", "--address", fake_frontend_address(router), "--timeout", "0.3", "silent",
        NULL);
    expect_status(&r, 1);
    assert_non_null(strstr(r.err, "no reply"));
    assert_non_null(strstr(r.err, "timeout"));
}

static void test_complete_usage_errors_exit_2(void **state)
{
    static run_result r;
    run(&r, "complete", NULL);
    expect_status(&r, 2);
    assert_non_null(strstr(r.err, "PROMPT is required"));
    run(&r, "complete", "--temperature", "hot", "p", NULL);
    expect_status(&r, 2);
    assert_non_null(strstr(r.err, "--temperature"));
    run(&r, "complete", "--curve-server-key", "abc", "p", NULL);
    expect_status(&r, 2);
    run(&r, "complete", "--help", NULL);
    expect_status(&r, 0);
    assert_non_null(strstr(r.out, "--no-stream"));
}

static void test_bench_json_counts_requests_tokens_and_failures(void **state)
{
    static run_result r;
    run(&r, "bench", "--address", fake_frontend_address(router), "--requests", "30",
        "--concurrency", "8", "--max-tokens", "3:9", "--seed", "7", "--json", "--quiet", NULL);
    expect_status(&r, 0);
    json_error_t je;
    json_t *o = json_loads(r.out, 0, &je);
    if (!o)
        fail_msg("bench --json output is not JSON (%s): %s", je.text, r.out);
    assert_int_equal(json_integer_value(json_object_get(o, "requests")), 30);
    assert_int_equal(json_integer_value(json_object_get(o, "ok")), 30);
    assert_int_equal(json_integer_value(json_object_get(o, "failed")), 0);
    json_int_t tokens = json_integer_value(json_object_get(o, "output_tokens"));
    if (tokens < 30 * 3 || tokens > 30 * 9)
        fail_msg("output_tokens %lld outside [90, 270]", (long long)tokens);
    const char *dists[] = {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"};
    for (int i = 0; i < 4; i++) {
        json_t *d = json_object_get(o, dists[i]);
        assert_non_null(d);
        double p50 = json_real_value(json_object_get(d, "p50"));
        double p99 = json_real_value(json_object_get(d, "p99"));
        if (!(p50 >= 0 && p99 >= p50))
            fail_msg("%s: expected 0 <= p50 <= p99, got p50 %g p99 %g", dists[i], p50, p99);
    }
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "e2e_ms"), "n")), 30);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "itl_ms"), "n")),
                     tokens - 30);
    assert_true(json_real_value(json_object_get(o, "output_tokens_per_s")) > 0);
    json_decref(o);
}

static void test_bench_counts_failures_by_code(void **state)
{
    char path[] = "/tmp/deras-bench-prompts-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *lines = "error:busy\nhello\n\nerror:no_workers\n";
    assert_int_equal(write(fd, lines, strlen(lines)), (ssize_t)strlen(lines));
    close(fd);
    static run_result r;
    run(&r, "bench", "--address", fake_frontend_address(router), "--requests", "40",
        "--prompts", path, "--max-tokens", "2", "--rate", "2000", "--json", "--quiet", NULL);
    unlink(path);
    expect_status(&r, 0);
    json_t *o = json_loads(r.out, 0, NULL);
    assert_non_null(o);
    json_t *by = json_object_get(o, "failed_by_code");
    json_int_t ok = json_integer_value(json_object_get(o, "ok"));
    json_int_t busy = json_integer_value(json_object_get(by, "busy"));
    json_int_t nw = json_integer_value(json_object_get(by, "no_workers"));
    if (ok + busy + nw != 40 || !ok || !busy || !nw)
        fail_msg("expected 40 = ok + busy + no_workers, each > 0; got %lld + %lld + %lld",
                 (long long)ok, (long long)busy, (long long)nw);
    assert_int_equal(json_integer_value(json_object_get(o, "failed")), busy + nw);
    json_decref(o);
}

static void test_bench_random_prompt_ids_and_table(void **state)
{
    static run_result r;
    run(&r, "bench", "--address", fake_frontend_address(router), "--requests", "10",
        "--random-prompt-tokens", "5:20", "--max-tokens", "4", "--ignore-eos", NULL);
    expect_status(&r, 0);
    assert_non_null(strstr(r.err, "10 ok, 0 failed"));
    assert_non_null(strstr(r.err, "TTFT"));
    assert_non_null(strstr(r.err, "inter-token"));
    assert_non_null(strstr(r.err, "40 tokens"));
}

static void test_bench_without_router_fails_by_timeout(void **state)
{
    static run_result r;
    run(&r, "bench", "--address", "tcp://127.0.0.1:1", "--requests", "3", "--timeout", "0.3",
        "--json", "--quiet", NULL);
    expect_status(&r, 1);
    json_t *o = json_loads(r.out, 0, NULL);
    assert_non_null(o);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "failed_by_code"),
                                                        "timeout")), 3);
    json_decref(o);
}

static void test_bench_usage_errors_exit_2(void **state)
{
    static run_result r;
    run(&r, "bench", "--max-tokens", "9:3", NULL);
    expect_status(&r, 2);
    assert_non_null(strstr(r.err, "MIN:MAX"));
    run(&r, "bench", "--prompts", "x", "--random-prompt-tokens", "1:2", NULL);
    expect_status(&r, 2);
}

int main(void)
{
    const char *dir = getenv("DERAS_BUILD_DIR");
    if (!dir || !*dir)
        test_skip("DERAS_BUILD_DIR is not set (run the tests through ctest)");
    snprintf(deras_bin, sizeof deras_bin, "%s/tools/deras", dir);
    if (access(deras_bin, X_OK))
        test_skip("%s not built", deras_bin);
    router = fake_frontend_start(NULL);
    if (!router) {
        fprintf(stderr, "FAIL: the fake router did not start\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_complete_streams_text_and_reports_usage),
        cmocka_unit_test(test_complete_no_stream_and_n_samples),
        cmocka_unit_test(test_complete_server_error_exits_1_with_its_code),
        cmocka_unit_test(test_complete_silent_router_exits_1_after_the_timeout),
        cmocka_unit_test(test_complete_usage_errors_exit_2),
        cmocka_unit_test(test_bench_json_counts_requests_tokens_and_failures),
        cmocka_unit_test(test_bench_counts_failures_by_code),
        cmocka_unit_test(test_bench_random_prompt_ids_and_table),
        cmocka_unit_test(test_bench_without_router_fails_by_timeout),
        cmocka_unit_test(test_bench_usage_errors_exit_2),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fake_frontend_stop(&router, NULL);
    return rc;
}
