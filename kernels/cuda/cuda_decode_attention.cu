/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_decode_attention.cu - paged decode attention, split over the context and combined in
 * a second pass (flash-decoding).
 *
 * Decode reads every cached key and value of every sequence once per step and does little
 * arithmetic with them, so its floor is the K/V bytes over memory bandwidth; the kernel is
 * organised to keep enough 16-byte loads in flight on every multiprocessor:
 *
 *   grid  = (context splits, kv heads x head groups, sequences)
 *   block = 128 threads, split into lane groups of head_dim / 8 lanes; a lane group owns
 *           one key at a time and each lane holds 8 of its dimensions, so one K or V row
 *           is one 16-byte load per lane, coalesced across the group.
 *
 * Grouped-query attention: a block computes all G query heads that share its kv head
 * (G <= 8 per block; larger ratios use several head groups), so each K/V row is read once
 * for the whole group. A tensor-parallel rank's slice of the heads (attn_args q_head0,
 * q_per_kv) may cut its first and last group short; blocks skip the missing heads. Each
 * lane group walks its keys UNR at a time (all loads of a tile issued before the first
 * use), computes the G scores with shuffles inside the group, and folds the tile into a
 * running max, sum and accumulator (online softmax, base 2, with the softmax scale and
 * log2(e) folded into q). The lane groups' states are merged in shared memory at the end.
 *
 * With one split the block writes the output; otherwise it writes its normalised partial
 * output and log-sum-exp to the backend's scratch, and a combine kernel weighs the splits.
 * The split count grows until the grid covers the multiprocessors several times, bounded
 * by the scratch size and by a minimum of 256 keys per split. Cost: K/V bytes + 2 x
 * splits x rows x heads x (head_dim + 1) x 4 bytes of partials.
 */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

#define DEC_THREADS 128
#define DEC_MAX_G 8
#define DEC_MIN_SPLIT_KEYS 256
#define DEC_CTAS_PER_SM 8

template <typename T, int D, int G, int UNR>
__global__ void __launch_bounds__(DEC_THREADS)
decode_kernel(T *__restrict__ out, float *__restrict__ part_o, float *__restrict__ part_lse,
              const T *__restrict__ q, int q_stride, const T *__restrict__ k_cache,
              const T *__restrict__ v_cache, const int32_t *__restrict__ q_start,
              const int32_t *__restrict__ ctx_len, const int32_t *__restrict__ block_tables,
              int max_blocks, int n_heads, int n_kv_heads, int block_size, int window,
              float scale_log2, int chunk, int n_rows, int rep, int head0)
{
    constexpr int LPK = D / 8;                /* lanes per key row */
    constexpr int NLG = DEC_THREADS / LPK;    /* lane groups per block */
    const int split = blockIdx.x, s = blockIdx.z;
    const int n_hg = (rep + G - 1) / G;
    const int kvh = blockIdx.y / n_hg, hg = blockIdx.y % n_hg;
    /* local query heads of KV head kvh: [g_lo, g_lo + rep) clipped to [0, n_heads) (a
     * tensor-parallel slice may cut its first and last group short); this block takes
     * G of them from h0, the valid ones being [h_begin, h_end) */
    const int g_lo = kvh * rep - head0 % rep;
    const int h0 = g_lo + hg * G;
    const int h_begin = max(h0, 0), h_end = min(min(h0 + G, g_lo + rep), n_heads);
    if (h_begin >= h_end)
        return; /* the whole block: nothing of this group on this rank */
    const int lane = threadIdx.x % LPK, lg = threadIdx.x / LPK;

    const int row = q_start[s];
    const int ctx = ctx_len[s];
    const int pos = ctx - 1;
    const int lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    const int t_begin = lo + split * chunk;
    const int t_end = min(t_begin + chunk, ctx);
    const int32_t *table = block_tables + (size_t)s * max_blocks;

    float qf[G][8], acc[G][8], m[G], l[G];
#pragma unroll
    for (int r = 0; r < G; r++) {
        /* heads outside [h_begin, h_end) recompute h_begin and are not written */
        const int h = h0 + r >= h_begin && h0 + r < h_end ? h0 + r : h_begin;
        uint4 u = *reinterpret_cast<const uint4 *>(q + (size_t)row * q_stride + (size_t)h * D +
                                                   lane * 8);
        const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            qf[r][i] = to_f32(e[i]) * scale_log2;
            acc[r][i] = 0.0f;
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }

    /* every thread runs the same iterations: the shuffles below need whole warps */
    for (int t0 = t_begin; t0 < t_end; t0 += NLG * UNR) {
        uint4 kr[UNR], vr[UNR];
        bool ok[UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const int t = t0 + u * NLG + lg;
            ok[u] = t < t_end;
            const int tt = ok[u] ? t : t_begin;
            const size_t base =
                (((size_t)table[tt / block_size] * n_kv_heads + kvh) * block_size +
                 tt % block_size) * D + lane * 8;
            kr[u] = *reinterpret_cast<const uint4 *>(k_cache + base);
            vr[u] = *reinterpret_cast<const uint4 *>(v_cache + base);
        }
        float sc[UNR][G];
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const T *ke = reinterpret_cast<const T *>(&kr[u]);
            float kf[8];
#pragma unroll
            for (int i = 0; i < 8; i++)
                kf[i] = to_f32(ke[i]);
#pragma unroll
            for (int r = 0; r < G; r++) {
                float d = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++)
                    d = fmaf(qf[r][i], kf[i], d);
#pragma unroll
                for (int o = LPK / 2; o > 0; o >>= 1)
                    d += __shfl_xor_sync(0xffffffffu, d, o, LPK);
                sc[u][r] = ok[u] ? d : -INFINITY;
            }
        }
#pragma unroll
        for (int r = 0; r < G; r++) {
            float mx = m[r];
#pragma unroll
            for (int u = 0; u < UNR; u++)
                mx = fmaxf(mx, sc[u][r]);
            const float mu = mx == -INFINITY ? 0.0f : mx;
            const float corr = exp2f(m[r] - mu);
            m[r] = mx;
            l[r] *= corr;
#pragma unroll
            for (int i = 0; i < 8; i++)
                acc[r][i] *= corr;
#pragma unroll
            for (int u = 0; u < UNR; u++) {
                const float p = exp2f(sc[u][r] - mu);
                l[r] += p;
                const T *ve = reinterpret_cast<const T *>(&vr[u]);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    acc[r][i] = fmaf(p, to_f32(ve[i]), acc[r][i]);
            }
        }
    }

    /* merge the lane groups: every group's (m, l, acc) through shared memory */
    __shared__ float sm_m[NLG][G], sm_l[NLG][G];
    __shared__ float sm_acc[NLG][G][D];
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < G; r++) {
            sm_m[lg][r] = m[r];
            sm_l[lg][r] = l[r];
        }
    }
#pragma unroll
    for (int r = 0; r < G; r++)
#pragma unroll
        for (int i = 0; i < 8; i++)
            sm_acc[lg][r][lane * 8 + i] = acc[r][i];
    __syncthreads();

    for (int e = threadIdx.x; e < G * D; e += DEC_THREADS) {
        const int r = e / D, d = e % D;
        if (h0 + r < h_begin || h0 + r >= h_end)
            continue;
        float mx = -INFINITY;
        for (int g = 0; g < NLG; g++)
            mx = fmaxf(mx, sm_m[g][r]);
        const float mu = mx == -INFINITY ? 0.0f : mx;
        float sum = 0.0f, o = 0.0f;
        for (int g = 0; g < NLG; g++) {
            const float w = exp2f(sm_m[g][r] - mu);
            sum += sm_l[g][r] * w;
            o += sm_acc[g][r][d] * w;
        }
        const int h = h0 + r;
        if (part_o) {
            const size_t pr = (size_t)split * n_rows * n_heads + (size_t)row * n_heads + h;
            part_o[pr * D + d] = sum > 0.0f ? o / sum : 0.0f;
            if (d == 0)
                part_lse[pr] = sum > 0.0f ? mx + log2f(sum) : -INFINITY;
        } else {
            out[((size_t)row * n_heads + h) * D + d] = from_f32<T>(o / sum);
        }
    }
}

/* out (rows, heads, D) = the splits' partial outputs weighed by exp2(lse - max lse). */
template <typename T, int D>
__global__ void decode_combine_kernel(T *__restrict__ out, const float *__restrict__ part_o,
                                      const float *__restrict__ part_lse, int n_splits,
                                      int n_row_heads)
{
    const int rh = blockIdx.x, d = threadIdx.x;
    float mx = -INFINITY;
    for (int i = 0; i < n_splits; i++)
        mx = fmaxf(mx, part_lse[(size_t)i * n_row_heads + rh]);
    float sum = 0.0f, o = 0.0f;
    for (int i = 0; i < n_splits; i++) {
        const float w = exp2f(part_lse[(size_t)i * n_row_heads + rh] - mx);
        sum += w;
        o += w * part_o[((size_t)i * n_row_heads + rh) * D + d];
    }
    out[(size_t)rh * D + d] = from_f32<T>(o / sum);
}

static int heads_per_block(int rep)
{
    return rep >= 8 ? 8 : rep >= 4 ? 4 : rep >= 2 ? 2 : 1;
}

int cuda_decode_splits(const cuda_backend *cb, const attn_args *a)
{
    const int rep = attn_rep(a), G = heads_per_block(rep);
    const long ctas = (long)a->n_seqs * a->n_kv_heads * ((rep + G - 1) / G);
    const int range = a->window > 0 && a->window < a->max_ctx_len ? a->window : a->max_ctx_len;
    const int max_by_len = (range + DEC_MIN_SPLIT_KEYS - 1) / DEC_MIN_SPLIT_KEYS;
    const size_t per_split = (size_t)a->n_tokens * a->n_heads * (a->head_dim + 1) * sizeof(float);
    const int max_by_scratch = (int)(cb->attn_part_bytes / per_split);
    long n;
    if (cb->forced_splits > 0)
        n = cb->forced_splits < range ? cb->forced_splits : range;
    else {
        n = ((long)cb->n_sms * DEC_CTAS_PER_SM + ctas - 1) / ctas;
        n = n < max_by_len ? n : max_by_len;
    }
    n = n < max_by_scratch ? n : max_by_scratch;
    return n < 1 ? 1 : (int)n;
}

template <typename T, int D, int G>
static int launch_decode(cuda_backend *cb, const attn_args *a, int n_splits)
{
    constexpr int UNR = G >= 8 ? 2 : 4;
    const int rep = attn_rep(a);
    const int range = a->window > 0 && a->window < a->max_ctx_len ? a->window : a->max_ctx_len;
    const int chunk = (range + n_splits - 1) / n_splits;
    const dim3 grid(n_splits, a->n_kv_heads * ((rep + G - 1) / G), a->n_seqs);
    float *part_o = n_splits > 1 ? cb->attn_part : NULL;
    float *part_lse = part_o ? part_o + (size_t)n_splits * a->n_tokens * a->n_heads * D : NULL;
    const float scale_log2 = a->scale * 1.4426950408889634f;
    decode_kernel<T, D, G, UNR><<<grid, DEC_THREADS, 0, cb->stream>>>(
        (T *)a->out, part_o, part_lse, (const T *)a->q, a->q_stride, (const T *)a->k_cache,
        (const T *)a->v_cache, a->q_start, a->ctx_len, a->block_tables, a->max_blocks,
        a->n_heads, a->n_kv_heads, a->block_size, a->window, scale_log2, chunk, a->n_tokens,
        rep, attn_head0(a));
    CUDA_LAUNCHED("attention (decode)");
    if (n_splits > 1) {
        decode_combine_kernel<T, D><<<a->n_tokens * a->n_heads, D, 0, cb->stream>>>(
            (T *)a->out, part_o, part_lse, n_splits, a->n_tokens * a->n_heads);
        CUDA_LAUNCHED("attention (decode combine)");
    }
    return DERAS_OK;
}

template <typename T, int D>
static int dispatch_g(cuda_backend *cb, const attn_args *a, int n_splits)
{
    switch (heads_per_block(attn_rep(a))) {
    case 1: return launch_decode<T, D, 1>(cb, a, n_splits);
    case 2: return launch_decode<T, D, 2>(cb, a, n_splits);
    case 4: return launch_decode<T, D, 4>(cb, a, n_splits);
    default: return launch_decode<T, D, 8>(cb, a, n_splits);
    }
}

int cuda_attention_decode(backend_t *b, const attn_args *a)
{
    cuda_backend *cb = cuda_of(b);
    if (((uintptr_t)a->q | (uintptr_t)a->k_cache | (uintptr_t)a->v_cache) % 16 ||
        a->q_stride % 8)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "cuda attention: q, k_cache and v_cache must be 16-byte aligned and "
                          "q_stride (%d) a multiple of 8",
                          a->q_stride);
    const int n_splits = cuda_decode_splits(cb, a);
    CUDA_DISPATCH_DTYPE(cb, {
        if (a->head_dim == 64)
            return dispatch_g<T, 64>(cb, a, n_splits);
        return dispatch_g<T, 128>(cb, a, n_splits);
    });
    return DERAS_OK;
}
