/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_kernels.h - CPU kernels shared between files of the CPU backend (private). */
#ifndef DERAS_CPU_KERNELS_H
#define DERAS_CPU_KERNELS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/backend.h"

/* out (d) = x / sqrt(mean(x^2) + eps) * w; out may equal x. */
static inline void cpu_rmsnorm_row(float *out, const float *x, const float *w, int d, float eps)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int j = 0; j < d; j++)
        ss += x[j] * x[j];
    float inv = 1.0f / sqrtf(ss / (float)d + eps);
#pragma omp simd
    for (int j = 0; j < d; j++)
        out[j] = w[j] * (x[j] * inv);
}

/* e^x: Cephes' expf, x = n ln2 + r with n rounded to nearest and ln2 split in two so r is
 * exact, |r| <= ln2 / 2, a degree-6 polynomial, then 2^n through the exponent bits;
 * within 2 ulp of e^x. x is first clamped to [-87.33, 88.37] (2^n stays a normal number):
 * e^x of a larger |x| comes out as e^88.37 = 2.4e38 or e^-87.33 = 1.2e-38, which the
 * caller here (silu) turns into what the exact value gives; a NaN stays NaN. Every step is
 * one IEEE operation (fmaf where fused), so cpu_backend.c's 8-lane AVX2 copy of it gives
 * the same bits. */
#define CPU_EXP_LO (-87.3365447504f)
#define CPU_EXP_HI 88.3762626647949f
#define CPU_EXP_ROUND 12582912.0f /* 1.5 * 2^23: adding and taking it away rounds to integer */
#define CPU_EXP_LOG2E 1.44269504088896341f
#define CPU_EXP_LN2_HI 0.693359375f
#define CPU_EXP_LN2_LO (-2.12194440e-4f)
static const float cpu_exp_poly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

static inline float cpu_expf(float x)
{
    x = x < CPU_EXP_LO ? CPU_EXP_LO : x;
    x = x > CPU_EXP_HI ? CPU_EXP_HI : x;
    const float n = fmaf(x, CPU_EXP_LOG2E, CPU_EXP_ROUND) - CPU_EXP_ROUND;
    const float r = fmaf(-n, CPU_EXP_LN2_LO, fmaf(-n, CPU_EXP_LN2_HI, x));
    float p = cpu_exp_poly[0];
    for (int k = 1; k < 6; k++)
        p = fmaf(p, r, cpu_exp_poly[k]);
    p = fmaf(p, r * r, r) + 1.0f;
    const int32_t ni = n == n ? (int32_t)n : 0; /* n in [-126, 127]; a NaN's p is NaN anyway */
    const union {
        uint32_t i;
        float f;
    } two_n = {.i = (uint32_t)(ni + 127) << 23};
    return p * two_n.f;
}

/* The backend's thread pool (kernels/cpu/cpu_pool.h), for ops in other files. */
struct cpu_pool *cpu_backend_pool(backend_t *b);

/* Paged causal attention (cpu_attention.c). */
int cpu_attention(backend_t *b, const attn_args *a);

/* The attention kernel path that runs for this head_dim now ("scalar", "avx2",
 * "avx512"; qmatmul.h's switch, narrowed to a kernel that takes the head_dim), for tests
 * and benchmarks. The qmm_isa_active() error when $DERAS_CPU_ISA is bad. */
int cpu_attention_path(int head_dim, const char **name);

/* The KV cache (cpu_kv.c): the element types kept, writes, copy-on-write copies. */
bool cpu_keeps_kv(int dtype);
int cpu_kv_write(backend_t *b, void *k_cache, void *v_cache, const void *k, const void *v,
                 int row_stride, const int32_t *slots, int n, int n_kv_heads, int head_dim,
                 int block_size, int kv_dtype);
int cpu_copy_blocks(backend_t *b, void *cache, const int32_t *pairs, int n, size_t block_bytes);

#endif
