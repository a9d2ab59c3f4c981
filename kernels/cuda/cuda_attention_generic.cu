/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_attention_generic.cu - paged causal attention for head dims the tensor-core and
 * split-decode kernels are not built for (anything even up to 256 other than 64 and 128:
 * the tiny test models' 8 and 16, or 80 and 96).
 *
 * One warp per (query row, query head); lane l holds dimensions l, l + 32, ... of q and of
 * the output accumulator. Keys are visited one at a time through the block table: a warp
 * reduction gives the score, then the online-softmax update (running max, sum, rescaled
 * accumulator, base 2). It reads K/V once per query head rather than once per kv head and
 * uses no tensor cores, so it is a correctness path, not a fast one; production head dims
 * (64, 128) never come here.
 */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

#define GEN_MAX_PER_LANE 8 /* head_dim <= 256 */
#define GEN_WARPS 4

template <typename T>
__global__ void __launch_bounds__(GEN_WARPS * 32)
generic_attention_kernel(T *__restrict__ out, const T *__restrict__ q, int q_stride,
                         const T *__restrict__ k_cache, const T *__restrict__ v_cache,
                         const int32_t *__restrict__ q_start, const int32_t *__restrict__ ctx_len,
                         const int32_t *__restrict__ block_tables, int n_seqs, int n_tokens,
                         int max_blocks, int n_heads, int n_kv_heads, int head_dim,
                         int block_size, int window, float scale_log2, int rep, int head0)
{
    const int warp = blockIdx.x * GEN_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp >= n_tokens * n_heads)
        return;
    const int row = warp / n_heads, h = warp % n_heads;
    /* the sequence owning this row: binary search over q_start */
    int lo_s = 0, hi_s = n_seqs - 1;
    while (lo_s < hi_s) {
        const int mid = (lo_s + hi_s + 1) / 2;
        if (q_start[mid] <= row)
            lo_s = mid;
        else
            hi_s = mid - 1;
    }
    const int s = lo_s;
    const int n_q = q_start[s + 1] - q_start[s];
    const int pos = ctx_len[s] - n_q + (row - q_start[s]);
    const int lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    const int kvh = attn_kv_of(h, head0, rep);
    const int32_t *table = block_tables + (size_t)s * max_blocks;

    float qf[GEN_MAX_PER_LANE], acc[GEN_MAX_PER_LANE];
#pragma unroll
    for (int i = 0; i < GEN_MAX_PER_LANE; i++) {
        const int d = lane + 32 * i;
        qf[i] = d < head_dim ? to_f32(q[(size_t)row * q_stride + (size_t)h * head_dim + d]) *
                                   scale_log2
                             : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int t = lo; t <= pos; t++) {
        const size_t base =
            (((size_t)table[t / block_size] * n_kv_heads + kvh) * block_size + t % block_size) *
            head_dim;
        float sc = 0.0f;
#pragma unroll
        for (int i = 0; i < GEN_MAX_PER_LANE; i++) {
            const int d = lane + 32 * i;
            if (d < head_dim)
                sc += qf[i] * to_f32(k_cache[base + d]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            sc += __shfl_xor_sync(0xffffffffu, sc, o);
        const float m_new = fmaxf(m, sc);
        const float corr = exp2f(m - m_new), p = exp2f(sc - m_new);
        l = l * corr + p;
        m = m_new;
#pragma unroll
        for (int i = 0; i < GEN_MAX_PER_LANE; i++) {
            const int d = lane + 32 * i;
            if (d < head_dim)
                acc[i] = acc[i] * corr + p * to_f32(v_cache[base + d]);
        }
    }
    const float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < GEN_MAX_PER_LANE; i++) {
        const int d = lane + 32 * i;
        if (d < head_dim)
            out[((size_t)row * n_heads + h) * head_dim + d] = from_f32<T>(acc[i] * inv);
    }
}

int cuda_attention_generic(backend_t *b, const attn_args *a)
{
    cuda_backend *cb = cuda_of(b);
    if (a->head_dim > 32 * GEN_MAX_PER_LANE)
        return deras_fail(DERAS_EUNSUPPORTED, "cuda attention: head_dim %d above %d",
                          a->head_dim, 32 * GEN_MAX_PER_LANE);
    const long warps = (long)a->n_tokens * a->n_heads;
    const float scale_log2 = a->scale * 1.4426950408889634f;
    CUDA_DISPATCH_DTYPE(cb, {
        generic_attention_kernel<T><<<cdiv(warps, GEN_WARPS), GEN_WARPS * 32, 0, cb->stream>>>(
            (T *)a->out, (const T *)a->q, a->q_stride, (const T *)a->k_cache,
            (const T *)a->v_cache, a->q_start, a->ctx_len, a->block_tables, a->n_seqs,
            a->n_tokens, a->max_blocks, a->n_heads, a->n_kv_heads, a->head_dim, a->block_size,
            a->window, scale_log2, attn_rep(a), attn_head0(a));
    });
    CUDA_LAUNCHED("attention (generic)");
    return DERAS_OK;
}
