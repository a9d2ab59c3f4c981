/* SPDX-License-Identifier: Apache-2.0 */
/* test_kvcalc_cli.c - `deras kvcalc` end to end: the binary's output and exit statuses.
 *
 * Runs $DERAS_BUILD_DIR/tools/deras as a child process (skips when it is absent) and checks
 * what a user sees: the 2 GiB line for Llama-2-7B at 4096 tokens, the same numbers in
 * --json (parsed), configs read from files, and exit 2 / 1 with a message naming the bad
 * option or file for usage errors and unreadable models. And that kvcalc's bytes are a
 * worker's: for each KV dtype the engine a deras-worker builds (engine/loader.h, the
 * worker's own path) allocates exactly kvcalc's bytes per token for every cache slot.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "engine/loader.h"
#include "engine/model.h"
#include "test_util.h"

static char deras_bin[4096];

typedef struct run_result {
    int status; /* exit status, or -1 if killed */
    char out[65536], err[8192];
} run_result;

static void read_all(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    ssize_t got;
    while (n + 1 < cap && (got = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)got;
    buf[n] = '\0';
    char sink[4096]; /* drain the rest so the child never blocks */
    while (read(fd, sink, sizeof sink) > 0)
        ;
}

/* Run `deras kvcalc ARGS...` (NULL-terminated); stderr goes to a file to avoid two pipes. */
static void run(run_result *r, ...)
{
    const char *argv[64];
    int argc = 0;
    argv[argc++] = deras_bin;
    argv[argc++] = "kvcalc";
    va_list ap;
    va_start(ap, r);
    const char *a;
    while ((a = va_arg(ap, const char *)) && argc < 63)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    char err_path[] = "/tmp/deras-kvcalc-err-XXXXXX";
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
        execv(deras_bin, (char *const *)argv);
        _exit(127);
    }
    close(pipe_fd[1]);
    read_all(pipe_fd[0], r->out, sizeof r->out);
    close(pipe_fd[0]);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    lseek(err_fd, 0, SEEK_SET);
    read_all(err_fd, r->err, sizeof r->err);
    close(err_fd);
    unlink(err_path);
}

static void expect_status(const run_result *r, int want, const char *what)
{
    if (r->status != want)
        fail_msg("%s: expected exit %d, got %d\nstdout:\n%s\nstderr:\n%s", what, want, r->status,
                 r->out, r->err);
}

static void expect_in(const char *haystack, const char *needle, const char *what)
{
    if (!strstr(haystack, needle))
        fail_msg("%s: expected '%s' in:\n%s", what, needle, haystack);
}

static void test_llama2_7b_sequence_of_4096_is_2_GiB(void **state)
{
    run_result *r = malloc(sizeof *r);
    run(r, "--preset", "llama-2-7b", "--seq-len", "4096", "--dtype", "fp16", NULL);
    expect_status(r, 0, "llama-2-7b");
    expect_in(r->out, "= 512.00 KiB (524288 bytes)", "per token line");
    expect_in(r->out, "4096 tokens = 256 blocks = 2.00 GiB (2147483648 bytes)", "per sequence");
    free(r);
}

static void test_json_carries_the_same_numbers(void **state)
{
    run_result *r = malloc(sizeof *r);
    run(r, "--preset", "llama-2-7b", "--seq-len", "4096", "--dtype", "fp16", "--device-memory",
        "80GiB", "--json", NULL);
    expect_status(r, 0, "--json");
    json_error_t e;
    json_t *o = json_loads(r->out, 0, &e);
    if (!o)
        fail_msg("--json output is not JSON (%s):\n%s", e.text, r->out);
    json_int_t per_token = -1, per_seq = -1, blocks = -1, params = -1;
    int fits = -1;
    if (json_unpack(o, "{s:{s:I, s:I}, s:{s:{s:I}}, s:{s:I, s:b}}", "kv_cache",
                    "bytes_per_token", &per_token, "bytes_per_seq", &per_seq, "weights",
                    "params", "total", &params, "device", "kv_blocks", &blocks, "batch_fits",
                    &fits))
        fail_msg("--json output lacks the expected fields:\n%s", r->out);
    assert_int_equal(per_token, 524288);
    assert_int_equal(per_seq, 2147483648ll);
    assert_int_equal(params, 6738415616ll);
    assert_int_equal(blocks, 7609);
    assert_int_equal(fits, 1);
    json_decref(o);
    free(r);
}

static void test_configs_from_files(void **state)
{
    run_result *r = malloc(sizeof *r);
    char *cfg = test_data_path("config/mistral/config.json");
    char *gguf = test_data_path("ckpt/llama.gguf");
    char *dir = test_data_path("ckpt/qwen2_hf");
    struct stat st;
    if (stat(cfg, &st) || stat(gguf, &st) || stat(dir, &st))
        test_skip("test data missing under %s", getenv("DERAS_TEST_DATA"));
    run(r, "--config", cfg, "--seq-len", "1", NULL); /* --device cpu: fp32 by default */
    expect_status(r, 0, "--config mistral");
    expect_in(r->out, "(262144 bytes)", "mistral per token");
    expect_in(r->out, "sliding window 4096", "mistral window note");
    run(r, "--model", cfg, "--seq-len", "17", "--block-size", "16", NULL);
    expect_status(r, 0, "--model config.json");
    expect_in(r->out, "17 tokens = 2 blocks (rounded up to 32 token slots)", "rounding");
    run(r, "--model", gguf, NULL); /* 2 layers, 2 KV heads x 8, ctx 128; fp32 */
    expect_status(r, 0, "--model .gguf");
    expect_in(r->out, "= 256 B", "gguf per token");
    expect_in(r->out, "128 tokens = 8 blocks", "gguf default seq-len = context length");
    run(r, "--model", dir, "--tp", "2", NULL);
    expect_status(r, 0, "--model HF directory");
    expect_in(r->out, "1 KV head per rank", "qwen2 tp 2");
    free(cfg), free(gguf), free(dir), free(r);
}

/* The KV dtype follows the device rule deras-worker applies (engine/kv_sizing.h): cpu
 * keeps fp32 by default and fp16/bf16 on request, a CUDA device its activation type;
 * --device any is the rule-free what-if (fp8 too, fp16 by default). */
static void test_kv_dtype_follows_the_device(void **state)
{
    static const struct {
        const char *args[4];
        const char *dtype;
        json_int_t per_token; /* llama-2-7b: 2 x 32 x 32 x 128 x bytes */
    } cases[] = {
        {{NULL}, "fp32", 1048576},
        {{"--kv-dtype", "f16"}, "fp16", 524288},
        {{"--dtype", "bf16", "--device", "cpu"}, "bf16", 524288},
        {{"--device", "cuda:0"}, "bf16", 524288},
        {{"--device", "cuda:1:fp16"}, "fp16", 524288},
        {{"--device", "any"}, "fp16", 524288},
        {{"--device", "any", "--kv-dtype", "fp8"}, "fp8", 262144},
    };
    run_result *r = malloc(sizeof *r);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const *a = cases[i].args;
        run(r, "--preset", "llama-2-7b", "--seq-len", "16", "--json", a[0], a[1], a[2], a[3],
            NULL);
        expect_status(r, 0, cases[i].dtype);
        json_t *o = json_loads(r->out, 0, NULL);
        const char *dtype = NULL;
        json_int_t per_token = -1;
        if (!o || json_unpack(o, "{s:{s:s, s:I}}", "kv_cache", "dtype", &dtype, "bytes_per_token",
                              &per_token))
            fail_msg("case %zu: no kv_cache dtype / bytes_per_token in:\n%s", i, r->out);
        if (strcmp(dtype, cases[i].dtype) || per_token != cases[i].per_token)
            fail_msg("case %zu: %s, %lld B/token; expected %s, %lld", i, dtype,
                     (long long)per_token, cases[i].dtype, (long long)cases[i].per_token);
        json_decref(o);
    }
    free(r);
}

static void test_bad_input_exits_2_naming_the_option(void **state)
{
    static const struct {
        const char *args[6];
        const char *needle; /* in stderr */
    } cases[] = {
        {{"--preset", "llama-2-7b", "--bogus"}, "--bogus"},
        {{"--preset", "llama-2-7b", "--seq-len", "abc"}, "--seq-len"},
        {{"--preset", "llama-2-7b", "--seq-len", "0"}, "--seq-len"},
        {{"--preset", "llama-2-7b", "--dtype", "int4"}, "int4"},
        {{"--preset", "llama-2-7b", "--kv-dtype", "fp8"}, "fp8"}, /* not on cpu */
        {{"--preset", "llama-2-7b", "--device", "cuda:0", "--kv-dtype", "fp32"}, "cuda:0"},
        {{"--preset", "llama-2-7b", "--device", "tpu"}, "tpu"},
        {{"--preset", "llama-2-7b", "--weight-dtype", "q4"}, "--weight-dtype"},
        {{"--preset", "llama-2-7b", "--device-memory", "80G"}, "80G"},
        {{"--preset", "llama-2-7b", "--device-memory", "0"}, "--device-memory"},
        {{"--preset", "llama-2-7b", "--memory-utilization", "1.5"}, "--memory-utilization"},
        {{"--preset", "llama-2-7b", "--tp", "3"}, "--tp 3"},
        {{"--preset", "llama-2-7b", "--block-size", "-1"}, "--block-size"},
        {{"--preset", "no-such-model"}, "no-such-model"},
        {{"--preset", "llama-2-7b", "--preset", "x", "stray"}, "stray"},
        {{"--preset", "llama-2-7b", "--config", "x.json"}, "only one"},
        {{"--seq-len", "10"}, "--preset"},
    };
    run_result *r = malloc(sizeof *r);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const *a = cases[i].args;
        run(r, a[0], a[1], a[2], a[3], a[4], a[5], NULL);
        char what[128];
        snprintf(what, sizeof what, "kvcalc %s %s %s %s", a[0], a[1], a[2] ? a[2] : "",
                 a[2] && a[3] ? a[3] : "");
        expect_status(r, 2, what);
        expect_in(r->err, cases[i].needle, what);
    }
    free(r);
}

static void test_unreadable_model_exits_1(void **state)
{
    run_result *r = malloc(sizeof *r);
    run(r, "--model", "/nonexistent/model.gguf", NULL);
    expect_status(r, 1, "--model missing");
    expect_in(r->err, "/nonexistent/model.gguf", "--model missing");
    char *gguf = test_data_path("ckpt/llama.gguf");
    struct stat st;
    if (!stat(gguf, &st)) {
        run(r, "--config", gguf, NULL); /* a GGUF is not a config.json */
        expect_status(r, 1, "--config with a gguf");
        expect_in(r->err, "--config", "--config with a gguf");
    }
    free(gguf);
    free(r);
}

static void test_help_and_list_presets(void **state)
{
    run_result *r = malloc(sizeof *r);
    run(r, "--help", NULL);
    expect_status(r, 0, "--help");
    expect_in(r->out, "--device-memory", "--help");
    run(r, "--list-presets", NULL);
    expect_status(r, 0, "--list-presets");
    expect_in(r->out, "smollm2-135m", "--list-presets");
    expect_in(r->out, "llama-3.1-70b", "--list-presets");
    free(r);
}

/* kvcalc's JSON bytes per token (and dtype name) for `model` on the CPU with `kv` (NULL:
 * the default). */
static json_int_t kvcalc_token_bytes(run_result *r, const char *model, const char *kv,
                                     char *dtype, size_t cap)
{
    if (kv)
        run(r, "--model", model, "--device", "cpu", "--kv-dtype", kv, "--json", NULL);
    else
        run(r, "--model", model, "--json", NULL);
    expect_status(r, 0, kv ? kv : "default dtype");
    json_t *o = json_loads(r->out, 0, NULL);
    const char *name = NULL;
    json_int_t bytes = -1;
    if (!o || json_unpack(o, "{s:{s:s, s:I}}", "kv_cache", "dtype", &name, "bytes_per_token", &bytes))
        fail_msg("kvcalc --json: no kv_cache dtype / bytes_per_token in:\n%s", r->out);
    snprintf(dtype, cap, "%s", name);
    json_decref(o);
    return bytes;
}

/* The engine a worker builds (loader: open, size from a budget, model, engine) holds
 * model_kv_bytes = kvcalc's bytes per token x every slot of its blocks. */
static void check_worker_allocation(run_result *r, const char *model, const char *kv)
{
    char dtype[16];
    const json_int_t per_token = kvcalc_token_bytes(r, model, kv, dtype, sizeof dtype);
    loader_opts lo = {.model = model, .device = "cpu", .threads = 1, .kv_dtype = kv,
                      .max_seqs = 2, .max_batch_tokens = 16, .model_only = true};
    loader_t *l = NULL;
    if (loader_open(&lo, &l) || loader_size_budget(l, "2MiB") || loader_build_model(l) ||
        loader_build_engine(l, &(engine_callbacks){0}, NULL, NULL))
        fail_msg("%s, --kv-dtype %s: %s", model, kv ? kv : "(default)", deras_errmsg());
    const kv_sizing *kvs = loader_kv(l);
    const model_opts *mo = model_get_opts(loader_model(l));
    const uint64_t slots = (uint64_t)mo->n_kv_blocks * (uint64_t)mo->block_size;
    const uint64_t got = model_kv_bytes(loader_model(l));
    printf("%s --kv-dtype %-9s kvcalc %s %lld B/token; the worker's engine: %s, %llu bytes for "
           "%llu slots = %llu B/token\n", strrchr(model, '/') + 1, kv ? kv : "(default)",
           dtype, (long long)per_token, dtype_name(mo->kv_dtype), (unsigned long long)got,
           (unsigned long long)slots, (unsigned long long)(got / slots));
    if (got != (uint64_t)per_token * slots || kvs->token_bytes != (uint64_t)per_token ||
        (uint64_t)mo->n_kv_blocks * kvs->block_bytes != got)
        fail_msg("%s, --kv-dtype %s: kvcalc says %lld B/token, the engine allocated %llu bytes "
                 "for %llu slots (its sizing said %llu B/token)", model, kv ? kv : "(default)",
                 (long long)per_token, (unsigned long long)got, (unsigned long long)slots,
                 (unsigned long long)kvs->token_bytes);
    loader_destroy(&l);
}

static void test_worker_allocates_what_kvcalc_says(void **state)
{
    static const char *const kvs[] = {NULL, "f32", "f16", "bf16"};
    run_result *r = malloc(sizeof *r);
    char *gguf = test_data_path("ckpt/llama.gguf");
    struct stat st;
    if (stat(gguf, &st))
        test_skip("test data missing under %s", getenv("DERAS_TEST_DATA"));
    for (size_t i = 0; i < sizeof kvs / sizeof kvs[0]; i++)
        check_worker_allocation(r, gguf, kvs[i]);
    /* the test model (46,080 B/token in f32, 23,040 in 16 bits), where it is cached */
    const char *m = getenv("DERAS_TEST_MODEL");
    if (m && !stat(m, &st))
        for (size_t i = 0; i < sizeof kvs / sizeof kvs[0]; i += 2)
            check_worker_allocation(r, m, kvs[i]);
    free(gguf), free(r);
}

int main(void)
{
    const char *dir = getenv("DERAS_BUILD_DIR");
    if (!dir || !*dir)
        test_skip("DERAS_BUILD_DIR is not set (run the tests through ctest)");
    snprintf(deras_bin, sizeof deras_bin, "%s/tools/deras", dir);
    if (access(deras_bin, X_OK))
        test_skip("%s not built", deras_bin);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama2_7b_sequence_of_4096_is_2_GiB),
        cmocka_unit_test(test_json_carries_the_same_numbers),
        cmocka_unit_test(test_configs_from_files),
        cmocka_unit_test(test_kv_dtype_follows_the_device),
        cmocka_unit_test(test_worker_allocates_what_kvcalc_says),
        cmocka_unit_test(test_bad_input_exits_2_naming_the_option),
        cmocka_unit_test(test_unreadable_model_exits_1),
        cmocka_unit_test(test_help_and_list_presets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
