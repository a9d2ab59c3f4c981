/* SPDX-License-Identifier: Apache-2.0 */
/* ref_attention.h - the dense attention reference the attention tests compare kernels
 * against (tests/unit/test_attention.c for the CPU backend, tests/gpu/test_cuda_attention.c
 * for CUDA): softmax(q k^T / sqrt(head_dim)) v in double, causal, with a sliding window. */
#ifndef DERAS_TEST_REF_ATTENTION_H
#define DERAS_TEST_REF_ATTENTION_H

#include <stddef.h>

typedef struct ref_attn_shape {
    int n_heads, n_kv_heads, head_dim;
    int window;          /* a query sees at most this many positions ending at its own; 0: all */
    /* a tensor-parallel slice of the heads: the global index of query head 0 and the
     * query heads per KV head of the whole model; both 0: the whole model,
     * n_heads / n_kv_heads per KV head */
    int q_head0, q_per_kv;
} ref_attn_shape;

/* One sequence: q rows (n_q of them, q_stride floats apart, n_heads x head_dim each) are
 * its last n_q positions of ctx; k and v are (ctx, n_kv_heads, head_dim); out gets
 * (n_q, n_heads, head_dim). O(n_q x ctx x n_heads x head_dim). */
void ref_attention(const ref_attn_shape *s, const float *q, size_t q_stride, const float *k,
                   const float *v, int ctx, int n_q, double *out);

#endif
