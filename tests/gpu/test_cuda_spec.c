/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda_spec.c - choosing the CUDA backend: device specs and the CUDA-only entry points,
 * on any machine (no `gpu` label: it runs, and must pass, with or without a device).
 *
 * Malformed specs are refused with DERAS_EINVAL before CUDA is touched. "cuda:0" gives a
 * bf16 backend named "cuda:0" where a device exists, and DERAS_EUNSUPPORTED naming the
 * reason where none does (this CI machine: nvcc but no driver). The cuda_ops.h functions
 * refuse a CPU backend with DERAS_EINVAL instead of treating its memory as device memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "gpu_test.h"

static void malformed_cuda_specs_are_refused_before_cuda_is_touched(void **state)
{
    const char *bad[] = {"cuda:", "cuda:x", "cuda:0:fp8", "cuda:-1", "cuda:99999", "cuda:0:",
                         "cuda:0:bf16:", "cuda:1x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        backend_t *b = NULL;
        int rc = backend_new(bad[i], 0, &b);
        if (rc != DERAS_EINVAL || b)
            fail_msg("backend_new('%s'): expected %d (DERAS_EINVAL) and no backend, got %d (%s)",
                     bad[i], DERAS_EINVAL, rc, deras_errmsg());
        if (!strstr(deras_errmsg(), "cuda:N"))
            fail_msg("backend_new('%s'): expected the message to show the cuda:N form, got '%s'",
                     bad[i], deras_errmsg());
    }
}

static void cuda_spec_gives_a_device_backend_or_says_why_not(void **state)
{
    char why[200] = "";
    const int n_dev = cuda_device_count(why, sizeof why);
    const char *specs[] = {"cuda:0", "cuda:0:bf16", "cuda:0:fp16"};
    const char *names[] = {"cuda:0", "cuda:0", "cuda:0:fp16"};
    for (size_t i = 0; i < 3; i++) {
        backend_t *b = NULL;
        int rc = backend_new(specs[i], 0, &b);
        if (n_dev == 0) {
            if (rc != DERAS_EUNSUPPORTED || b)
                fail_msg("backend_new('%s') without a device (%s): expected %d "
                         "(DERAS_EUNSUPPORTED), got %d (%s)",
                         specs[i], why, DERAS_EUNSUPPORTED, rc, deras_errmsg());
            if (!strstr(deras_errmsg(), "CUDA"))
                fail_msg("expected the reason to mention CUDA, got '%s'", deras_errmsg());
            continue;
        }
        if (rc)
            fail_msg("backend_new('%s') with %d device(s): got %d (%s)", specs[i], n_dev, rc,
                     deras_errmsg());
        assert_string_equal(backend_name(b), names[i]);
        assert_int_equal(backend_elem_size(b), 2);
        assert_true(backend_is_cuda(b));
        backend_destroy(&b);
        assert_null(b);
    }
    backend_t *b = NULL;
    char spec[32];
    snprintf(spec, sizeof spec, "cuda:%d", n_dev);
    int rc = backend_new(spec, 0, &b);
    int want = n_dev == 0 ? DERAS_EUNSUPPORTED : DERAS_EINVAL;
    if (rc != want || b)
        fail_msg("backend_new('%s') with %d device(s): expected %d, got %d (%s)", spec, n_dev,
                 want, rc, deras_errmsg());
}

static void cuda_entry_points_refuse_a_cpu_backend(void **state)
{
    backend_t *cpu = NULL;
    GPU_OK(backend_new("cpu", 1, &cpu));
    assert_false(backend_is_cuda(cpu));
    assert_null(backend_cuda_stream(cpu));
    void *buf;
    GPU_OK(backend_alloc(cpu, 4096, &buf));
    cuda_sample_params p = {1.0f, 0, 1.0f, 0.0f, 0.5f};
    char name[64];
    int n_sms;
    int rcs[] = {
        backend_cuda_sample(cpu, buf, buf, &p, 1, 16),
        backend_cuda_dequant(cpu, buf, buf, 8, 32),
        backend_cuda_download(cpu, name, buf, 4),
        backend_cuda_set_decode_splits(cpu, 2),
        backend_cuda_set_prefill_variant(cpu, 2),
        backend_cuda_device_info(cpu, name, sizeof name, &n_sms),
    };
#ifdef DERAS_HAVE_CUDA
    const int want = DERAS_EINVAL;
#else
    const int want = DERAS_EUNSUPPORTED; /* a build without nvcc answers this to all */
#endif
    for (size_t i = 0; i < sizeof rcs / sizeof rcs[0]; i++)
        if (rcs[i] != want)
            fail_msg("CUDA entry point %zu on a CPU backend: expected %d, got %d", i, want,
                     rcs[i]);
    backend_free(cpu, buf);
    backend_destroy(&cpu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(malformed_cuda_specs_are_refused_before_cuda_is_touched),
        cmocka_unit_test(cuda_spec_gives_a_device_backend_or_says_why_not),
        cmocka_unit_test(cuda_entry_points_refuse_a_cpu_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
