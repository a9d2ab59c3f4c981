/* SPDX-License-Identifier: Apache-2.0 */
/* test_kv_sizing.c - KV cache size from a byte budget, a fraction of available memory
 * (cgroup limits included, on a fake /proc and cgroup tree), or a token count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "engine/host_memory.h"
#include "engine/kv_sizing.h"

/* SmolLM2-135M: 30 layers, 3 KV heads x 64 */
static model_config smollm2(void)
{
    model_config c = {.arch = MODEL_ARCH_LLAMA, .n_layers = 30, .d_model = 576, .n_heads = 9,
                      .n_kv_heads = 3, .head_dim = 64, .d_ff = 1536, .vocab_size = 49152,
                      .max_seq_len = 8192, .norm_eps = 1e-5f, .rope_theta = 1e5f,
                      .tied_embeddings = true};
    return c;
}

static void byte_budget_is_cut_into_whole_blocks(void **state)
{
    (void)state;
    model_config c = smollm2();
    kv_sizing s;
    assert_int_equal(kv_sizing_from_budget(&c, DT_F32, 16, "64MiB", &s), DERAS_OK);
    assert_int_equal(s.token_bytes, 2 * 30 * 3 * 64 * 4);        /* 46080 */
    assert_int_equal(s.block_bytes, 16 * 46080);                 /* 737280 */
    assert_int_equal(s.n_blocks, (64 << 20) / 737280);           /* 91 */
    assert_int_equal(s.n_tokens, (int64_t)(s.n_blocks - 1) * 16);
    assert_true(s.budget_used > 0.99 && s.budget_used <= 1.0);
    kv_sizing_log(&s);
}

static void fraction_uses_available_memory(void **state)
{
    (void)state;
    model_config c = smollm2();
    kv_sizing s;
    assert_int_equal(kv_sizing_from_budget(&c, DT_F16, 16, "0.01", &s), DERAS_OK);
    assert_true(s.n_blocks >= 2);
    assert_int_equal(s.token_bytes, 2 * 30 * 3 * 64 * 2);
}

/* The element type: each dtype's bytes; the device rule of kv_sizing_dtype (CPU: f32 by
 * default, f16/bf16 on request; CUDA: its activation type) with --kv-dtype's spellings. */
static void kv_dtype_sets_the_bytes_and_follows_the_device(void **state)
{
    (void)state;
    model_config c = smollm2();
    kv_sizing s;
    assert_int_equal(kv_sizing_from_budget(&c, DT_BF16, 16, "64MiB", &s), DERAS_OK);
    assert_int_equal(s.token_bytes, 23040);
    assert_int_equal(s.kv_dtype, DT_BF16);
    kv_sizing_log(&s);
    assert_int_equal(kv_sizing_from_budget(&c, DT_Q8_0, 16, "64MiB", &s), DERAS_EINVAL);
    static const struct {
        const char *device, *name;
        int rc, dtype;
    } rules[] = {
        {"cpu", NULL, DERAS_OK, DT_F32},       {"cpu", "", DERAS_OK, DT_F32},
        {"cpu", "f16", DERAS_OK, DT_F16},      {"cpu", "half", DERAS_OK, DT_F16},
        {"cpu", "BF16", DERAS_OK, DT_BF16},    {"cpu", "float32", DERAS_OK, DT_F32},
        {"cpu", "fp8", DERAS_EUNSUPPORTED, 0}, {"cpu", "int4", DERAS_EINVAL, 0},
        {"cuda:0", NULL, DERAS_OK, DT_BF16},   {"cuda:0", "bf16", DERAS_OK, DT_BF16},
        {"cuda:0", "f32", DERAS_EUNSUPPORTED, 0}, {"cuda:3:fp16", NULL, DERAS_OK, DT_F16},
        {"gpu", NULL, DERAS_EINVAL, 0},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        int dt = -1;
        int rc = kv_sizing_dtype(rules[i].device, rules[i].name, &dt);
        if (rc != rules[i].rc || (rc == DERAS_OK && dt != rules[i].dtype))
            fail_msg("%s / %s: status %d dtype %d, expected %d / %d (%s)", rules[i].device,
                     rules[i].name ? rules[i].name : "(default)", rc, dt, rules[i].rc,
                     rules[i].dtype, rc ? deras_errmsg() : "");
    }
}

static void exact_token_count_adds_the_null_block(void **state)
{
    (void)state;
    model_config c = smollm2();
    kv_sizing s;
    assert_int_equal(kv_sizing_for_tokens(&c, DT_F32, 16, 33, &s), DERAS_OK);
    assert_int_equal(s.n_blocks, 3 + 1);
    assert_int_equal(s.n_tokens, 48);
}

static void bad_budgets_are_refused_with_the_reason(void **state)
{
    (void)state;
    model_config c = smollm2();
    kv_sizing s;
    assert_int_equal(kv_sizing_from_budget(&c, DT_F32, 16, "1.5", &s), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "fraction"));
    assert_int_equal(kv_sizing_from_budget(&c, DT_F32, 16, "12 parsecs", &s), DERAS_EINVAL);
    assert_int_equal(kv_sizing_from_budget(&c, DT_F32, 16, "1MiB", &s), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "at least 2"));
    assert_int_equal(kv_sizing_from_budget(&c, DT_F32, 16, "", &s), DERAS_EINVAL);
}

static void fraction_before_loading_leaves_the_weights_out(void **state)
{
    (void)state;
    model_config c = smollm2();
    kv_sizing all, rest;
    const uint64_t gib = 1ull << 30;
    assert_int_equal(kv_sizing_from_budget_before(&c, DT_F32, 16, "0.5", 0, &all), DERAS_OK);
    assert_int_equal(kv_sizing_from_budget_before(&c, DT_F32, 16, "0.5", gib, &rest), DERAS_OK);
    /* half of (available - 1 GiB) is 512 MiB less than half of available (memory moves a
     * little between the two reads: allow 64 MiB) */
    int64_t diff = (int64_t)all.budget_bytes - (int64_t)rest.budget_bytes;
    assert_true(diff > (int64_t)(gib / 2 - (64 << 20)) && diff < (int64_t)(gib / 2 + (64 << 20)));
    /* sizes are what they say, pending weights or not */
    assert_int_equal(kv_sizing_from_budget_before(&c, DT_F32, 16, "64MiB", gib, &rest), DERAS_OK);
    assert_int_equal(rest.budget_bytes, 64 << 20);
    /* weights larger than the machine */
    assert_int_equal(kv_sizing_from_budget_before(&c, DT_F32, 16, "0.5", 1ull << 62, &rest),
                     DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "weights"));
}

static void spec_check_reads_no_memory(void **state)
{
    (void)state;
    assert_int_equal(kv_sizing_check_spec("0.4"), DERAS_OK);
    assert_int_equal(kv_sizing_check_spec("1"), DERAS_OK);
    assert_int_equal(kv_sizing_check_spec("4GiB"), DERAS_OK);
    assert_int_equal(kv_sizing_check_spec("0"), DERAS_EINVAL);
    assert_int_equal(kv_sizing_check_spec("80"), DERAS_EINVAL); /* a fraction, too big */
    assert_int_equal(kv_sizing_check_spec("4G"), DERAS_EINVAL);
    assert_int_equal(kv_sizing_check_spec(""), DERAS_EINVAL);
    assert_int_equal(kv_sizing_check_spec(NULL), DERAS_EINVAL);
}

/* ---- cgroup limits (engine/host_memory.h), on a fake /proc and /sys/fs/cgroup ---- */

static void write_file(const char *dir, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    for (char *p = path + strlen(dir) + 1; *p; p++) /* make the parents */
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A fake system: 16 GiB MemAvailable, and the process in `cgroup_line`'s group. */
static void fake_system(char *dir, const char *cgroup_line)
{
    strcpy(dir, "/tmp/deras-cgroup-XXXXXX");
    assert_non_null(mkdtemp(dir));
    write_file(dir, "meminfo", "MemTotal: 33554432 kB\nMemAvailable: 16777216 kB\n");
    write_file(dir, "self_cgroup", cgroup_line);
    char path[512];
    snprintf(path, sizeof path, "%s/meminfo", dir);
    setenv("DERAS_MEMINFO", path, 1);
    snprintf(path, sizeof path, "%s/self_cgroup", dir);
    setenv("DERAS_PROC_CGROUP", path, 1);
    snprintf(path, sizeof path, "%s/sys", dir);
    setenv("DERAS_CGROUP_ROOT", path, 1);
}

static void clear_fake_system(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    unsetenv("DERAS_MEMINFO");
    unsetenv("DERAS_PROC_CGROUP");
    unsetenv("DERAS_CGROUP_ROOT");
}

static void cgroup_v2_limit_bounds_the_fraction(void **state)
{
    (void)state;
    char dir[64];
    fake_system(dir, "0::/deras.slice/w0.service\n");
    write_file(dir, "sys/cgroup.controllers", "cpu memory\n");
    /* the slice: 2 GiB, 512 MiB in use of which 256 MiB is reclaimable page cache; the
     * service under it: no limit of its own */
    write_file(dir, "sys/deras.slice/memory.max", "2147483648\n");
    write_file(dir, "sys/deras.slice/memory.current", "536870912\n");
    write_file(dir, "sys/deras.slice/memory.stat", "anon 268435456\ninactive_file 268435456\n");
    write_file(dir, "sys/deras.slice/w0.service/memory.max", "max\n");
    write_file(dir, "sys/deras.slice/w0.service/memory.current", "536870912\n");
    model_config c = smollm2();
    kv_sizing s;
    assert_int_equal(kv_sizing_from_budget(&c, DT_F32, 16, "0.5", &s), DERAS_OK);
    const uint64_t room = 2147483648ull - 268435456ull; /* limit - (usage - reclaimable) */
    assert_int_equal(s.mem_available, room);
    assert_int_equal(s.budget_bytes, room / 2);
    assert_non_null(strstr(s.mem_source, "/deras.slice"));
    assert_non_null(strstr(s.mem_source, "memory.max"));
    kv_sizing_log(&s);
    clear_fake_system(dir);
}

static void cgroup_v1_limit_and_no_limit(void **state)
{
    (void)state;
    char dir[64];
    /* a v1 memory controller with a 1 GiB limit, 100 MiB in use */
    fake_system(dir, "9:cpu,cpuacct:/x\n4:memory:/x\n");
    write_file(dir, "sys/memory/x/memory.limit_in_bytes", "1073741824\n");
    write_file(dir, "sys/memory/x/memory.usage_in_bytes", "104857600\n");
    write_file(dir, "sys/memory/x/memory.stat", "cache 0\ntotal_inactive_file 0\n");
    write_file(dir, "sys/memory/memory.limit_in_bytes", "9223372036854771712\n"); /* root: none */
    write_file(dir, "sys/memory/memory.usage_in_bytes", "999999999\n");
    host_memory hm;
    assert_int_equal(host_memory_available(&hm), DERAS_OK);
    assert_int_equal(hm.available, 1073741824ull - 104857600ull);
    assert_non_null(strstr(hm.source, "v1 /x"));
    clear_fake_system(dir);
    /* the same process without any limit: MemAvailable */
    fake_system(dir, "0::/\n");
    assert_int_equal(host_memory_available(&hm), DERAS_OK);
    assert_int_equal(hm.available, 16777216ull * 1024);
    assert_string_equal(hm.source, "MemAvailable");
    clear_fake_system(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(byte_budget_is_cut_into_whole_blocks),
        cmocka_unit_test(fraction_uses_available_memory),
        cmocka_unit_test(exact_token_count_adds_the_null_block),
        cmocka_unit_test(kv_dtype_sets_the_bytes_and_follows_the_device),
        cmocka_unit_test(bad_budgets_are_refused_with_the_reason),
        cmocka_unit_test(fraction_before_loading_leaves_the_weights_out),
        cmocka_unit_test(spec_check_reads_no_memory),
        cmocka_unit_test(cgroup_v2_limit_bounds_the_fraction),
        cmocka_unit_test(cgroup_v1_limit_and_no_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
