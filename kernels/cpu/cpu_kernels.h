/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_kernels.h - CPU kernels shared between files of the CPU backend (private). */
#ifndef DERAS_CPU_KERNELS_H
#define DERAS_CPU_KERNELS_H

#include <math.h>
#include <stdbool.h>

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
