/* SPDX-License-Identifier: Apache-2.0 */
/* test_worker_process.c - deras-worker as a process: options, exit statuses, signals.
 *
 * Runs $DERAS_BUILD_DIR/worker/deras-worker as a child (skips when it is absent) on
 * tests/data/tiny-chat, with the test playing the router (fake_router.h): what an operator
 * sees - exit 2 naming the bad option, exit 1 with the reason for a model that does not load
 * or a router that never answers, the KV sizing line at start - and what a SIGTERM does
 * with work in flight (finish it, say BYE, exit 0) and what a second one does (drop it, say
 * BYE naming the signal, exit 0 at once).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_router.h"
#include "test_util.h"

#define WAIT_S 60.0 /* a hang guard: see test_worker_server.c */

static char worker_bin[4096];
static char *model_dir;

typedef struct child {
    pid_t pid;
    char err_path[64];
    int status;    /* exit status; -1 if killed by a signal */
    char err[16384]; /* stdout and stderr */
} child;

/* Start deras-worker ARGS... (NULL-terminated); stdout and stderr to one file. */
static void child_start(child *c, ...)
{
    const char *argv[64];
    int argc = 0;
    argv[argc++] = worker_bin;
    va_list ap;
    va_start(ap, c);
    const char *a;
    while ((a = va_arg(ap, const char *)) && argc < 63)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    snprintf(c->err_path, sizeof c->err_path, "/tmp/deras-worker-err-XXXXXX");
    int fd = mkstemp(c->err_path);
    assert_true(fd >= 0);
    fflush(stdout);
    fflush(stderr);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        execv(worker_bin, (char *const *)argv);
        _exit(127);
    }
    close(fd);
}

/* Wait for the child (at most timeout_s, then SIGKILL and fail) and read its stderr. */
static void child_wait(child *c, double timeout_s)
{
    double end = fr_now() + timeout_s;
    int ws;
    pid_t got;
    while ((got = waitpid(c->pid, &ws, WNOHANG)) == 0) {
        if (fr_now() > end) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &ws, 0);
            fail_msg("deras-worker did not exit within %.0f s", timeout_s);
        }
        usleep(10000);
    }
    assert_int_equal(got, c->pid);
    c->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    size_t len = 0;
    char *text = test_read_file(c->err_path, &len);
    snprintf(c->err, sizeof c->err, "%s", text ? text : "");
    free(text);
    unlink(c->err_path);
}

static void expect_exit(const child *c, int status, const char *needle, const char *what)
{
    if (c->status != status)
        fail_msg("%s: expected exit %d, got %d; stderr:\n%s", what, status, c->status, c->err);
    if (needle && !strstr(c->err, needle))
        fail_msg("%s: expected '%s' on stderr, got:\n%s", what, needle, c->err);
}

static void run_expect(int status, const char *needle, const char *what, ...)
{
    const char *args[16];
    int n = 0;
    va_list ap;
    va_start(ap, what);
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < 15)
        args[n++] = a;
    va_end(ap);
    while (n < 15)
        args[n++] = NULL;
    child c;
    child_start(&c, args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7],
                args[8], args[9], args[10], NULL);
    child_wait(&c, WAIT_S);
    expect_exit(&c, status, needle, what);
}

static void test_bad_options_exit_2_naming_the_option(void **state)
{
    run_expect(2, "--model is required", "no --model", "--threads", "1", NULL);
    run_expect(2, "needs --name", "--tp-size 2 without --name", "--model", model_dir,
               "--tp-size", "2", NULL);
    run_expect(2, "--tp-timeout", "--tp-timeout 0", "--model", model_dir, "--tp-timeout", "0",
               NULL);
    run_expect(2, "--tp-rank", "--tp-rank 1 of 1", "--model", model_dir, "--tp-rank", "1", NULL);
    run_expect(2, "--max-seqs", "--max-seqs 0", "--model", model_dir, "--max-seqs", "0", NULL);
    run_expect(2, "--max-batch-tokens", "batch below max-seqs", "--model", model_dir,
               "--max-seqs", "8", "--max-batch-tokens", "4", NULL);
    run_expect(2, "--kv-cache-memory", "bad budget", "--model", model_dir, "--kv-cache-memory",
               "12 parsecs", NULL);
    run_expect(2, "--device", "bad device", "--model", model_dir, "--device", "tpu", NULL);
    run_expect(2, "exact or q8", "bad matmul mode", "--model", model_dir, "--matmul-mode", "int4",
               NULL);
    run_expect(2, NULL, "unknown option", "--model", model_dir, "--frobnicate", NULL);
    run_expect(0, "--kv-cache-memory", "--help", "--help", NULL);
    run_expect(0, "--matmul-mode", "--help names the mode", "--help", NULL);
}

static void test_load_failures_exit_1_with_the_reason(void **state)
{
    run_expect(1, "/nonexistent/model.gguf", "missing model", "--model",
               "/nonexistent/model.gguf", NULL);
    run_expect(1, "CUDA", "cuda in a CPU-only build", "--model", model_dir, "--device", "cuda:0",
               NULL);
}

static void test_no_router_exits_1_saying_what_to_check(void **state)
{
    char dir[64], ep[128];
    fr_unbound_endpoint(dir, sizeof dir, ep, sizeof ep);
    child c;
    child_start(&c, "--model", model_dir, "--router", ep, "--threads", "1", "--kv-cache-memory",
                "4MiB", "--handshake-timeout", "0.5", NULL);
    child_wait(&c, WAIT_S);
    char want[512];
    snprintf(want, sizeof want, "no WELCOME from the router at %s within 0.5 s: is deras-router "
             "running, is --router the address it binds for workers (its --workers option)", ep);
    expect_exit(&c, 1, want, "no router");
    expect_exit(&c, 1, "KV cache:", "the KV sizing line at start");
    rmdir(dir);
}

static void test_refused_worker_exits_1_with_the_reason(void **state)
{
    fake_router *r = fr_new();
    child c;
    child_start(&c, "--model", model_dir, "--router", r->endpoint, "--threads", "1",
                "--kv-cache-memory", "4MiB", "--name", "gpu7", NULL);
    fr_expect(r, WP_HELLO, WAIT_S);
    assert_string_equal(r->hello.name, "gpu7");
    fr_refuse(r, "duplicate name gpu7");
    child_wait(&c, WAIT_S);
    expect_exit(&c, 1, "duplicate name gpu7", "REFUSE");
    fr_destroy(&r);
}

/* Start a worker on r and register it; the default name is w<pid>. */
static void start_registered(child *c, fake_router *r)
{
    child_start(c, "--model", model_dir, "--router", r->endpoint, "--threads", "1",
                "--kv-cache-memory", "4MiB", "--max-seqs", "4", "--max-batch-tokens", "64", NULL);
    fr_expect(r, WP_HELLO, WAIT_S);
    char name[32];
    snprintf(name, sizeof name, "w%d", (int)c->pid);
    assert_string_equal(r->hello.name, name);
    fr_welcome(r, 50);
    fr_expect(r, WP_HEARTBEAT, WAIT_S);
}

/* utime + stime of a process, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    char text[1024];
    int fd = open(path, O_RDONLY); /* /proc files have no size: read, don't seek */
    assert_true(fd >= 0);
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    assert_true(len > 0);
    text[len] = '\0';
    const char *p = strrchr(text, ')'); /* after the command name, which may hold spaces */
    assert_non_null(p);
    long utime = 0, stime = 0;
    /* fields 3..13 skipped, then 14 utime and 15 stime */
    int n = sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime);
    assert_int_equal(n, 2);
    return utime + stime;
}

static void test_idle_worker_sleeps(void **state)
{
    fake_router *r = fr_new();
    child c;
    start_registered(&c, r);
    long t0 = cpu_ticks(c.pid), hz = sysconf(_SC_CLK_TCK);
    int hb0 = r->n_heartbeat;
    /* at least 1 s and at least 5 heartbeats (every 50 ms), however late they come on a
     * loaded machine; the CPU it used is then compared with the time that passed */
    double start = fr_now(), end = start + 1.0;
    while (fr_now() < end || r->n_heartbeat - hb0 < 5) {
        if (fr_now() > start + WAIT_S)
            fail_msg("%d heartbeats in %.0f s, expected one every 50 ms", r->n_heartbeat - hb0,
                     WAIT_S);
        fr_recv(r, 50);
    }
    double wall = fr_now() - start;
    long used = cpu_ticks(c.pid) - t0;
    if ((double)used / (double)hz > 0.2 * wall)
        fail_msg("an idle worker used %.2f s of CPU in %.2f s: it spins instead of sleeping in "
                 "poll", (double)used / (double)hz, wall);
    assert_int_equal(kill(c.pid, SIGTERM), 0);
    child_wait(&c, WAIT_S);
    expect_exit(&c, 0, "stopped", "SIGTERM when idle");
    fr_destroy(&r);
}

/* Start a worker whose every serving step takes ms longer (the test-only
 * DERAS_TEST_STEP_DELAY_MS), so a request runs as long as the test needs on any machine. */
static void start_registered_slow(child *c, fake_router *r, const char *ms)
{
    setenv("DERAS_TEST_STEP_DELAY_MS", ms, 1);
    start_registered(c, r);
    unsetenv("DERAS_TEST_STEP_DELAY_MS");
}

static void test_sigterm_finishes_work_in_flight_and_exits_0(void **state)
{
    fake_router *r = fr_new();
    child c;
    /* 500 tokens: at least 5 s, so still in flight when the worker reports draining (only a
     * 5 s stall of this test could miss it), and done well within the 30 s drain timeout */
    start_registered_slow(&c, r, "10");
    int32_t prompt[20];
    for (int i = 0; i < 20; i++)
        prompt[i] = 10 + i * 13;
    wp_submit q = fr_submit_defaults(1, prompt, 20, 500);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    uint64_t rid = 1;
    fr_until(r, WAIT_S, fr_cond_has_token, &rid, "a first token");
    assert_int_equal(kill(c.pid, SIGTERM), 0);
    fr_until(r, WAIT_S, fr_cond_draining, NULL, "the worker draining after SIGTERM");
    if (fr_cond_finished(r, &rid))
        fail_msg("the request finished before the worker drained: nothing was in flight");
    fr_until(r, WAIT_S, fr_cond_finished, &rid, "the request to finish after SIGTERM");
    const fr_sample *s = &fr_req_of(r, 1)->s[0];
    assert_int_equal(s->fin.reason, 1); /* length: finished, not aborted */
    assert_int_equal(s->n, 500);
    fr_until(r, WAIT_S, fr_cond_bye, NULL, "a BYE once the request finished");
    if (!strstr(r->bye, "nothing in flight"))
        fail_msg("BYE after a clean stop: expected \"... nothing in flight\", got \"%s\"", r->bye);
    child_wait(&c, WAIT_S);
    expect_exit(&c, 0, "SIGTERM", "SIGTERM with work in flight");
    assert_int_equal(r->n_after_bye, 0);
    fr_destroy(&r);
}

static void test_second_signal_says_bye_and_exits_at_once(void **state)
{
    fake_router *r = fr_new();
    child c;
    start_registered_slow(&c, r, "20"); /* 4000 tokens: at least 80 s */
    int32_t prompt[20];
    for (int i = 0; i < 20; i++)
        prompt[i] = 10 + i * 17;
    wp_submit q = fr_submit_defaults(2, prompt, 20, 4000);
    q.params.ignore_eos = true;
    fr_submit(r, &q);
    uint64_t rid = 2;
    fr_until(r, WAIT_S, fr_cond_has_token, &rid, "a first token");
    assert_int_equal(kill(c.pid, SIGINT), 0);
    /* the second signal only once the worker handled the first (its load says draining):
     * two signals pending together would be delivered as one */
    fr_until(r, WAIT_S, fr_cond_draining, NULL, "the worker draining after the first SIGINT");
    double t0 = fr_now();
    assert_int_equal(kill(c.pid, SIGINT), 0);
    /* 4000 tokens of at least 20 ms each (DERAS_TEST_STEP_DELAY_MS: 80 s): the request
     * cannot end by itself; the BYE's reason tells the second signal from the 30 s drain
     * timeout, so the wait is only a hang guard */
    fr_until(r, WAIT_S, fr_cond_bye, NULL, "a BYE after the second signal");
    if (!strstr(r->bye, "second SIGINT with 1 request in flight"))
        fail_msg("BYE reason: expected \"... second SIGINT with 1 request in flight\", got \"%s\"",
                 r->bye);
    /* dropped unreported: the router decides (re-dispatch, or worker_failed) on the BYE */
    assert_int_equal(fr_req_of(r, 2)->s[0].finished, 0);
    child_wait(&c, WAIT_S);
    expect_exit(&c, 0, "exiting now", "second SIGINT");
    printf("second SIGINT: BYE %.2f s later, process gone\n", fr_now() - t0);
    fr_destroy(&r);
}

int main(void)
{
    const char *dir = getenv("DERAS_BUILD_DIR");
    if (!dir || !*dir)
        test_skip("DERAS_BUILD_DIR is not set (run the tests through ctest)");
    snprintf(worker_bin, sizeof worker_bin, "%s/worker/deras-worker", dir);
    if (access(worker_bin, X_OK))
        test_skip("%s not built", worker_bin);
    model_dir = test_data_path("tiny-chat");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_options_exit_2_naming_the_option),
        cmocka_unit_test(test_load_failures_exit_1_with_the_reason),
        cmocka_unit_test(test_no_router_exits_1_saying_what_to_check),
        cmocka_unit_test(test_refused_worker_exits_1_with_the_reason),
        cmocka_unit_test(test_idle_worker_sleeps),
        cmocka_unit_test(test_sigterm_finishes_work_in_flight_and_exits_0),
        cmocka_unit_test(test_second_signal_says_bye_and_exits_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
