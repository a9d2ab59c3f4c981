/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_prefill_attention.cu - flash-attention prefill over the paged KV cache, on tensor
 * cores (mma.sync m16n8k16, bf16 or fp16 in, f32 accumulate).
 *
 * One block = 128 query rows of one sequence and one query head; each warp owns whole rows
 * (16 in the default variant, 8 warps; 32 in variant 2, 4 warps), so the softmax needs no
 * cross-warp exchange. The block walks the keys its rows can see in tiles of 64 (32 for
 * variant 2 at head dim 128):
 *
 *   S = Q K^T        Q fragments stay in registers for the whole walk (variant 1) or are
 *                    re-read from shared memory per tile (variant 2)
 *   online softmax   running max and sum per row, base 2, scale folded in; the S
 *                    accumulators become P's A fragments directly (no shared memory)
 *   O += P V         V fragments by ldmatrix.trans from the row-major tile
 *
 * K and V tiles are gathered through the block table (each key row's block looked up
 * separately, so any block size works) with cp.async into two shared-memory stages, so
 * the next K tile and this V tile load while the tensor cores work. Shared-memory rows
 * are 16-byte-chunk swizzled (chunk ^ row % 8), which keeps ldmatrix free of bank
 * conflicts. Rows past the sequence's new tokens, and keys past the last row's position,
 * are zero-filled and never written out; masking (causal, sliding window) is applied only
 * on tiles that straddle a boundary.
 *
 * Queries sit at an offset into the cached context (positions ctx - n_q .. ctx - 1), so
 * the same kernel serves whole prompts, chunked prefill, prefix-cache hits, speculative
 * verification and mixed batches. Blocks are launched longest-first (the last query
 * blocks of a causal prompt see the most keys). Cost per block: one pass over the visible
 * K/V; 4 x rows x keys x head_dim FLOPs (half of it masked away on diagonal tiles).
 */
#include <math.h>

#include <type_traits>

#include "kernels/cuda/cuda_internal.cuh"

#define PF_BM 128

/* Keys per tile: 64, except 32 where 64 would push the variant-2 kernel past 255
 * registers (head dim 128: two M tiles of S and O accumulators). */
template <int D, int MT> __host__ __device__ constexpr int pf_bn()
{
    return MT == 2 && D == 128 ? 32 : 64;
}

/* Q tile + two K stages + two V stages */
template <int D, int MT> static constexpr size_t pf_smem_bytes()
{
    return (size_t)(PF_BM + 4 * pf_bn<D, MT>()) * D * 2;
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0; /* 0: zero-fill, nothing read */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, const void *smem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, const void *smem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

/* c (16x8 f32) += a (16x16) b (16x8) */
template <typename T>
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    uint32_t r;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        r = *reinterpret_cast<uint32_t *>(&v);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        r = *reinterpret_cast<uint32_t *>(&v);
    }
    return r;
}

/* Element offset of 16-byte chunk c of row r in a swizzled tile of D columns. */
template <int D> __device__ __forceinline__ int swz(int r, int c)
{
    return (r * (D / 8) + (c ^ (r & 7))) * 8;
}

/* Gather a tile of BN keys starting at key n0 into shared memory with NTH threads; keys
 * >= kv_end are zero-filled. */
template <typename T, int D, int NTH, int BN>
__device__ __forceinline__ void load_kv_tile(T *dst, const T *cache, const int32_t *table, int n0,
                                             int kv_end, int kvh, int n_kv_heads, int block_size)
{
    constexpr int CH = D / 8;
    /* block sizes are powers of two in practice (16): shift and mask instead of an integer
     * division by a run-time value, tens of ALU instructions per 16-byte chunk; the ALU
     * was the busiest pipe in the first H100 profile */
    const bool pow2 = (block_size & (block_size - 1)) == 0;
    const int shift = __ffs(block_size) - 1;
#pragma unroll
    for (int it = 0; it < BN * CH / NTH; it++) {
        const int idx = it * NTH + threadIdx.x;
        const int r = idx / CH, c = idx % CH;
        const int t = n0 + r;
        const bool ok = t < kv_end;
        const T *src = cache;
        if (ok) {
            const int blk = pow2 ? t >> shift : t / block_size;
            const int off = pow2 ? t & (block_size - 1) : t % block_size;
            src = cache + (((size_t)table[blk] * n_kv_heads + kvh) * block_size + off) * D + c * 8;
        }
        cp_async16(dst + swz<D>(r, c), src, ok);
    }
}

/* MT = 16-row M tiles per warp. MT 1: 8 warps, Q fragments loaded once into registers,
 * each K/V fragment feeds 2 MMAs. MT 2: 4 warps of 32 rows, Q fragments re-read from
 * shared memory per tile (registers go to the second tile's accumulators), each K/V
 * fragment feeds 4 MMAs: 160 instead of 256 bytes of shared-memory reads per MMA
 * (FlashAttention-2's shape). Which is faster on Hopper is for the benchmark to say. */
template <typename T, int D, int MT>
__global__ void __launch_bounds__(PF_BM / MT * 2, 1)
prefill_kernel(T *__restrict__ out, const T *__restrict__ q, int q_stride,
               const T *__restrict__ k_cache, const T *__restrict__ v_cache,
               const int32_t *__restrict__ q_start, const int32_t *__restrict__ ctx_len,
               const int32_t *__restrict__ block_tables, int max_blocks, int n_heads,
               int n_kv_heads, int block_size, int window, float scale_log2, int rep, int head0)
{
    constexpr int NTH = PF_BM / MT * 2; /* PF_BM / (16 MT) warps of 32 threads */
    constexpr int CH = D / 8;   /* 16-byte chunks per row */
    constexpr int KD = D / 16;  /* k-steps of S = Q K^T; also dim-tile pairs of O */
    constexpr int BN = pf_bn<D, MT>();
    constexpr int NT = BN / 8;
    constexpr int QR = MT == 1 ? KD : 1; /* k-steps of Q held in registers at a time */
    extern __shared__ __align__(16) unsigned char pf_smem[];
    T *sq = reinterpret_cast<T *>(pf_smem);
    T *sk = sq + PF_BM * D;       /* 2 stages */
    T *sv = sk + 2 * BN * D;   /* 2 stages */

    const int s = blockIdx.z, h = blockIdx.y;
    const int mb = gridDim.x - 1 - blockIdx.x; /* longest blocks first */
    const int row0 = q_start[s];
    const int n_q = q_start[s + 1] - row0;
    const int i0 = mb * PF_BM;
    if (i0 >= n_q)
        return;
    const int ctx = ctx_len[s];
    const int kvh = attn_kv_of(h, head0, rep);
    const int pos0 = ctx - n_q + i0;                       /* first row's position */
    const int pos_last = ctx - n_q + min(i0 + PF_BM, n_q) - 1;
    const int kv_end = pos_last + 1;
    const int lo_first = window > 0 ? max(0, pos0 - window + 1) : 0;
    const int lo_last = window > 0 ? max(0, pos_last - window + 1) : 0;
    const int n_begin = lo_first / BN * BN;
    const int n_tiles = (kv_end - n_begin + BN - 1) / BN;
    const int32_t *table = block_tables + (size_t)s * max_blocks;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wrow = warp * 16 * MT; /* this warp's first row in the tile */

    /* Q tile: rows past n_q zero-filled */
#pragma unroll
    for (int it = 0; it < PF_BM * CH / NTH; it++) {
        const int idx = it * NTH + threadIdx.x;
        const int r = idx / CH, c = idx % CH;
        const bool ok = i0 + r < n_q;
        const T *src = ok ? q + (size_t)(row0 + i0 + r) * q_stride + (size_t)h * D + c * 8 : q;
        cp_async16(sq + swz<D>(r, c), src, ok);
    }
    cp_async_commit();
    load_kv_tile<T, D, NTH, BN>(sk, k_cache, table, n_begin, kv_end, kvh, n_kv_heads, block_size);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    uint32_t qa[MT][QR][4];
    if constexpr (MT == 1) {
#pragma unroll
        for (int kk = 0; kk < KD; kk++)
            ldmatrix_x4(qa[0][kk], sq + swz<D>(wrow + lane % 16, kk * 2 + lane / 16));
    }

    float o[MT][2 * KD][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < 2 * KD; j++)
            o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.0f;
    float m_run[MT][2], l_run[MT][2];
#pragma unroll
    for (int m = 0; m < MT; m++)
        m_run[m][0] = m_run[m][1] = -INFINITY, l_run[m][0] = l_run[m][1] = 0.0f;

    for (int j = 0; j < n_tiles; j++) {
        const int n0 = n_begin + j * BN;
        T *kt = sk + (j & 1) * BN * D, *vt = sv + (j & 1) * BN * D;
        load_kv_tile<T, D, NTH, BN>(vt, v_cache, table, n0, kv_end, kvh, n_kv_heads, block_size);
        cp_async_commit();
        cp_async_wait<1>(); /* K tile j has landed */
        __syncthreads();

        float sc[MT][NT][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int t = 0; t < NT; t++)
                sc[m][t][0] = sc[m][t][1] = sc[m][t][2] = sc[m][t][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            const int qk = MT == 1 ? kk : 0;
            if constexpr (MT > 1) {
#pragma unroll
                for (int m = 0; m < MT; m++)
                    ldmatrix_x4(qa[m][0], sq + swz<D>(wrow + m * 16 + lane % 16, kk * 2 + lane / 16));
            }
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t b[4];
                const int mi = lane / 8;
                ldmatrix_x4(b, kt + swz<D>(np * 16 + (mi / 2) * 8 + lane % 8, kk * 2 + mi % 2));
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    mma16816<T>(sc[m][2 * np], qa[m][qk], b[0], b[1]);
                    mma16816<T>(sc[m][2 * np + 1], qa[m][qk], b[2], b[3]);
                }
            }
        }

        if (j + 1 < n_tiles)
            load_kv_tile<T, D, NTH, BN>(sk + ((j + 1) & 1) * BN * D, k_cache, table, n0 + BN,
                                    kv_end, kvh, n_kv_heads, block_size);
        cp_async_commit(); /* possibly empty: keeps the group count uniform */

        /* mask on tiles that straddle the diagonal or the window's lower edge */
        const bool need_mask = n0 + BN - 1 > pos0 || (window > 0 && n0 < lo_last);
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float v = sc[m][t][e] * scale_log2;
                    if (need_mask) {
                        const int key = n0 + t * 8 + (lane % 4) * 2 + (e & 1);
                        /* fragment rows lane/4 (e 0, 1) and lane/4 + 8 (e 2, 3) */
                        const int p = pos0 + wrow + m * 16 + lane / 4 + (e >> 1) * 8;
                        if (key > p || (window > 0 && key < p - window + 1))
                            v = -INFINITY;
                    }
                    sc[m][t][e] = v;
                }

        /* online softmax per row; the 4 lanes of a quad share a row */
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                float mx = m_run[m][hr];
#pragma unroll
                for (int t = 0; t < NT; t++)
                    mx = fmaxf(mx, fmaxf(sc[m][t][2 * hr], sc[m][t][2 * hr + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float mu = mx == -INFINITY ? 0.0f : mx;
                const float corr = exp2f(m_run[m][hr] - mu);
                m_run[m][hr] = mx;
                float sum = 0.0f;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    sc[m][t][2 * hr] = exp2f(sc[m][t][2 * hr] - mu);
                    sc[m][t][2 * hr + 1] = exp2f(sc[m][t][2 * hr + 1] - mu);
                    sum += sc[m][t][2 * hr] + sc[m][t][2 * hr + 1];
                }
                l_run[m][hr] = l_run[m][hr] * corr + sum; /* lane's share; quad-summed at the end */
#pragma unroll
                for (int d = 0; d < 2 * KD; d++) {
                    o[m][d][2 * hr] *= corr;
                    o[m][d][2 * hr + 1] *= corr;
                }
            }

        cp_async_wait<1>(); /* V tile j has landed */
        __syncthreads();

#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                pa[m][0] = pack2<T>(sc[m][2 * kk][0], sc[m][2 * kk][1]);
                pa[m][1] = pack2<T>(sc[m][2 * kk][2], sc[m][2 * kk][3]);
                pa[m][2] = pack2<T>(sc[m][2 * kk + 1][0], sc[m][2 * kk + 1][1]);
                pa[m][3] = pack2<T>(sc[m][2 * kk + 1][2], sc[m][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < KD; dp++) {
                uint32_t b[4];
                const int mi = lane / 8;
                ldmatrix_x4_trans(b, vt + swz<D>(kk * 16 + (mi % 2) * 8 + lane % 8, dp * 2 + mi / 2));
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    mma16816<T>(o[m][2 * dp], pa[m], b[0], b[1]);
                    mma16816<T>(o[m][2 * dp + 1], pa[m], b[2], b[3]);
                }
            }
        }
    }

    /* normalise and write this warp's valid rows */
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float l = l_run[m][hr];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int i = i0 + wrow + m * 16 + lane / 4 + hr * 8;
            if (i >= n_q)
                continue;
            const float inv = 1.0f / l;
            T *orow = out + ((size_t)(row0 + i) * n_heads + h) * D + (lane % 4) * 2;
#pragma unroll
            for (int d = 0; d < 2 * KD; d++)
                *reinterpret_cast<uint32_t *>(orow + d * 8) =
                    pack2<T>(o[m][d][2 * hr] * inv, o[m][d][2 * hr + 1] * inv);
        }
}

template <typename T, int D, int MT> static int raise_smem_limit()
{
    CUDA_TRY(cudaFuncSetAttribute(prefill_kernel<T, D, MT>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)pf_smem_bytes<D, MT>()));
    return DERAS_OK;
}

int cuda_prefill_init(cuda_backend *cb)
{
    int rc;
    if ((rc = raise_smem_limit<__nv_bfloat16, 64, 1>()) ||
        (rc = raise_smem_limit<__nv_bfloat16, 128, 1>()) ||
        (rc = raise_smem_limit<__half, 64, 1>()) || (rc = raise_smem_limit<__half, 128, 1>()) ||
        (rc = raise_smem_limit<__nv_bfloat16, 64, 2>()) ||
        (rc = raise_smem_limit<__nv_bfloat16, 128, 2>()) ||
        (rc = raise_smem_limit<__half, 64, 2>()) || (rc = raise_smem_limit<__half, 128, 2>()))
        return rc;
    return DERAS_OK;
}

template <typename T, int D, int MT> static int launch_prefill(cuda_backend *cb, const attn_args *a)
{
    const dim3 grid(cdiv(a->max_q_len, PF_BM), a->n_heads, a->n_seqs);
    const float scale_log2 = a->scale * 1.4426950408889634f;
    prefill_kernel<T, D, MT><<<grid, PF_BM / MT * 2, pf_smem_bytes<D, MT>(), cb->stream>>>(
        (T *)a->out, (const T *)a->q, a->q_stride, (const T *)a->k_cache, (const T *)a->v_cache,
        a->q_start, a->ctx_len, a->block_tables, a->max_blocks, a->n_heads, a->n_kv_heads,
        a->block_size, a->window, scale_log2, attn_rep(a), attn_head0(a));
    CUDA_LAUNCHED("attention (prefill)");
    return DERAS_OK;
}

int cuda_attention_prefill(backend_t *b, const attn_args *a)
{
    cuda_backend *cb = cuda_of(b);
    if (((uintptr_t)a->q | (uintptr_t)a->k_cache | (uintptr_t)a->v_cache | (uintptr_t)a->out) %
            16 ||
        a->q_stride % 8)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "cuda attention: q, out and the caches must be 16-byte aligned and "
                          "q_stride (%d) a multiple of 8",
                          a->q_stride);
    const bool mt2 = cb->prefill_variant == 2;
    CUDA_DISPATCH_DTYPE(cb, {
        if (a->head_dim == 64)
            return mt2 ? launch_prefill<T, 64, 2>(cb, a) : launch_prefill<T, 64, 1>(cb, a);
        return mt2 ? launch_prefill<T, 128, 2>(cb, a) : launch_prefill<T, 128, 1>(cb, a);
    });
    return DERAS_OK;
}
