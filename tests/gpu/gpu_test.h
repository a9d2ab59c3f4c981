/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_test.h - helpers shared by the CUDA kernel tests: skipping without a device, rounding
 * inputs to the device's element type, poisoning outputs, and dtype-aware tolerances.
 *
 * Every kernel is checked against the CPU backend on identical inputs: random f32 values
 * are first rounded to bf16/fp16 on the host, so the CPU (f32) and the GPU (bf16/fp16
 * storage) start from the same numbers and differ only by the GPU's arithmetic and its
 * output rounding. Output buffers are filled with 0xFF bytes (a NaN in bf16 and fp16)
 * before every run, so an element the kernel fails to write fails the comparison.
 *
 * Tolerances are in units of the element type's relative rounding step: ULP_REL is the
 * distance between 1 and the next representable value (2^-7 for bf16, 2^-10 for fp16); a
 * correctly rounded result is within half of it of the exact value.
 */
#ifndef DERAS_GPU_TEST_H
#define DERAS_GPU_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_ops.h"
#include "test_util.h"

/* Exit 77 (ctest: skipped) with the reason when no CUDA device is usable. */
static inline void gpu_require_device(void)
{
    char why[200] = "";
    if (cuda_device_count(why, sizeof why) == 0)
        test_skip("no CUDA device: %s", why);
}

static inline const char *gpu_spec(int dtype)
{
    return dtype == CUDA_DTYPE_FP16 ? "cuda:0:fp16" : "cuda:0";
}

/* The KV cache dtype of gpu_spec(dtype)'s backend (enum deras_dtype): its activation type. */
static inline int gpu_kv_dtype(int dtype)
{
    int kv = -1;
    if (backend_kv_dtype(gpu_spec(dtype), BACKEND_KV_DEFAULT, &kv))
        abort(); /* gpu_spec is always a valid spec */
    return kv;
}

static inline const char *gpu_dtype_name(int dtype)
{
    return dtype == CUDA_DTYPE_FP16 ? "fp16" : "bf16";
}

static inline double gpu_ulp_rel(int dtype)
{
    return dtype == CUDA_DTYPE_FP16 ? 1.0 / 1024 : 1.0 / 128;
}

/* The spacing of the type's subnormals (its smallest positive value): fp16 2^-24, bf16
 * 2^-133. Under the smallest normal the rounding error is half of this, not relative. */
static inline double gpu_subnormal_step(int dtype)
{
    return dtype == CUDA_DTYPE_FP16 ? ldexp(1.0, -24) : ldexp(1.0, -133);
}

/* Round to the nearest bf16 / fp16 value (ties to even), returned as f32. */
static inline float gpu_round(int dtype, float x)
{
    if (!isfinite(x))
        return x;
    if (dtype == CUDA_DTYPE_BF16) {
        uint32_t u;
        memcpy(&u, &x, 4);
        u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
        memcpy(&x, &u, 4);
        return x;
    }
    /* fp16: 11 significant bits, subnormals below 2^-14 */
    int e;
    double m = frexp(x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
    int bits = e - 1 >= -14 ? 11 : 11 - (-14 - (e - 1));
    if (bits < 0) /* below half the smallest subnormal */
        return 0.0f * x;
    double q = ldexp(nearbyint(ldexp(m, bits)), e - bits);
    return (float)(fabs(q) > 65504.0 ? copysign(INFINITY, q) : q);
}

static inline float *gpu_random(int dtype, size_t n, uint64_t *seed, float scale)
{
    float *x = malloc(n * sizeof(float));
    test_fill_random(x, n, seed, scale);
    for (size_t i = 0; i < n; i++)
        x[i] = gpu_round(dtype, x[i]);
    return x;
}

/* Fill `bytes` of a device buffer with 0xFF (NaN in bf16/fp16, -1 in int32). */
static inline void gpu_poison(backend_t *g, void *buf, size_t bytes)
{
    unsigned char *p = malloc(bytes);
    memset(p, 0xff, bytes);
    if (backend_upload(g, buf, p, bytes))
        fail_msg("poisoning a device buffer: %s", deras_errmsg());
    free(p);
}

#define GPU_OK(call)                                                                          \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_)                                                                              \
            fail_msg("%s: expected 0, got %d (%s)", #call, rc_, deras_errmsg());              \
    } while (0)

/* A buffer on each backend holding the same values: f32 on the CPU, the element type on
 * the GPU. */
typedef struct dual {
    void *c, *g;
    size_t n;
} dual;

static inline dual dual_new(backend_t *c, backend_t *g, const float *x, size_t n)
{
    dual d = {NULL, NULL, n};
    GPU_OK(backend_alloc(c, n * sizeof(float), &d.c));
    GPU_OK(backend_alloc(g, n * 2, &d.g));
    if (x) {
        GPU_OK(backend_upload_f32(c, d.c, x, n));
        GPU_OK(backend_upload_f32(g, d.g, x, n));
    }
    return d;
}

/* Same int32 array on both backends. */
static inline dual dual_i32(backend_t *c, backend_t *g, const int32_t *x, size_t n)
{
    dual d = {NULL, NULL, n};
    GPU_OK(backend_alloc(c, n * 4, &d.c));
    GPU_OK(backend_alloc(g, n * 4, &d.g));
    GPU_OK(backend_upload(c, d.c, x, n * 4));
    GPU_OK(backend_upload(g, d.g, x, n * 4));
    return d;
}

static inline void dual_free(backend_t *c, backend_t *g, dual *d)
{
    backend_free(c, d->c);
    backend_free(g, d->g);
    d->c = d->g = NULL;
}

/* Both sides as f32 host arrays (malloc'd); syncs the GPU first and fails on its error. */
static inline void dual_read(backend_t *c, backend_t *g, const dual *d, float **cpu, float **gpu)
{
    *cpu = malloc(d->n * sizeof(float));
    *gpu = malloc(d->n * sizeof(float));
    GPU_OK(backend_sync(g));
    GPU_OK(backend_download_f32(c, *cpu, d->c, d->n));
    GPU_OK(backend_download_f32(g, *gpu, d->g, d->n));
}

#endif
