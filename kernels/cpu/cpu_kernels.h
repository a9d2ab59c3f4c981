/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_kernels.h - CPU kernels shared between files of the CPU backend (private). */
#ifndef DERAS_CPU_KERNELS_H
#define DERAS_CPU_KERNELS_H

#include <math.h>

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

/* The backend's thread pool (kernels/cpu/cpu_pool.h), for ops in other files. */
struct cpu_pool *cpu_backend_pool(backend_t *b);

/* Paged causal attention (cpu_attention.c). */
int cpu_attention(backend_t *b, const attn_args *a);

#endif
