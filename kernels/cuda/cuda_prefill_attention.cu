/* cuda_prefill_attention.cu - flash-attention prefill over the paged KV cache, on tensor
 * cores (mma.sync m16n8k16, bf16 or fp16 in, f32 accumulate).
 *
 * One block = 128 query rows of one sequence and one query head, 8 warps of 16 rows
 * (FlashAttention-2's split: each warp owns whole rows, so the softmax needs no
 * cross-warp exchange). The block walks the keys its rows can see in tiles of 64:
 *
 *   S = Q K^T        Q fragments stay in registers for the whole walk (ldmatrix once)
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
#define PF_BN 64
#define PF_WARPS 8
#define PF_THREADS (PF_WARPS * 32)

template <int D> static constexpr size_t pf_smem_bytes()
{
    return (size_t)(PF_BM + 4 * PF_BN) * D * 2;
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

/* Gather a tile of PF_BN keys starting at key n0 into shared memory; keys >= kv_end are
 * zero-filled. */
template <typename T, int D>
__device__ __forceinline__ void load_kv_tile(T *dst, const T *cache, const int32_t *table, int n0,
                                             int kv_end, int kvh, int n_kv_heads, int block_size)
{
    constexpr int CH = D / 8;
#pragma unroll
    for (int it = 0; it < PF_BN * CH / PF_THREADS; it++) {
        const int idx = it * PF_THREADS + threadIdx.x;
        const int r = idx / CH, c = idx % CH;
        const int t = n0 + r;
        const bool ok = t < kv_end;
        const T *src = cache;
        if (ok)
            src = cache + (((size_t)table[t / block_size] * n_kv_heads + kvh) * block_size +
                           t % block_size) * D + c * 8;
        cp_async16(dst + swz<D>(r, c), src, ok);
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(PF_THREADS, 1)
prefill_kernel(T *__restrict__ out, const T *__restrict__ q, int q_stride,
               const T *__restrict__ k_cache, const T *__restrict__ v_cache,
               const int32_t *__restrict__ q_start, const int32_t *__restrict__ ctx_len,
               const int32_t *__restrict__ block_tables, int max_blocks, int n_heads,
               int n_kv_heads, int block_size, int window, float scale_log2)
{
    constexpr int CH = D / 8;   /* 16-byte chunks per row */
    constexpr int KD = D / 16;  /* k-steps of S = Q K^T; also dim-tile pairs of O */
    constexpr int NT = PF_BN / 8;
    extern __shared__ __align__(16) unsigned char pf_smem[];
    T *sq = reinterpret_cast<T *>(pf_smem);
    T *sk = sq + PF_BM * D;       /* 2 stages */
    T *sv = sk + 2 * PF_BN * D;   /* 2 stages */

    const int s = blockIdx.z, h = blockIdx.y;
    const int mb = gridDim.x - 1 - blockIdx.x; /* longest blocks first */
    const int row0 = q_start[s];
    const int n_q = q_start[s + 1] - row0;
    const int i0 = mb * PF_BM;
    if (i0 >= n_q)
        return;
    const int ctx = ctx_len[s];
    const int kvh = h / (n_heads / n_kv_heads);
    const int pos0 = ctx - n_q + i0;                       /* first row's position */
    const int pos_last = ctx - n_q + min(i0 + PF_BM, n_q) - 1;
    const int kv_end = pos_last + 1;
    const int lo_first = window > 0 ? max(0, pos0 - window + 1) : 0;
    const int lo_last = window > 0 ? max(0, pos_last - window + 1) : 0;
    const int n_begin = lo_first / PF_BN * PF_BN;
    const int n_tiles = (kv_end - n_begin + PF_BN - 1) / PF_BN;
    const int32_t *table = block_tables + (size_t)s * max_blocks;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    /* Q tile: rows past n_q zero-filled */
#pragma unroll
    for (int it = 0; it < PF_BM * CH / PF_THREADS; it++) {
        const int idx = it * PF_THREADS + threadIdx.x;
        const int r = idx / CH, c = idx % CH;
        const bool ok = i0 + r < n_q;
        const T *src = ok ? q + (size_t)(row0 + i0 + r) * q_stride + (size_t)h * D + c * 8 : q;
        cp_async16(sq + swz<D>(r, c), src, ok);
    }
    cp_async_commit();
    load_kv_tile<T, D>(sk, k_cache, table, n_begin, kv_end, kvh, n_kv_heads, block_size);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    uint32_t qa[KD][4];
#pragma unroll
    for (int kk = 0; kk < KD; kk++)
        ldmatrix_x4(qa[kk], sq + swz<D>(warp * 16 + lane % 16, kk * 2 + lane / 16));

    float o[2 * KD][4];
#pragma unroll
    for (int j = 0; j < 2 * KD; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    /* this lane's two rows (fragment rows lane/4 and lane/4 + 8) */
    const int my_pos[2] = {pos0 + warp * 16 + lane / 4, pos0 + warp * 16 + lane / 4 + 8};

    for (int j = 0; j < n_tiles; j++) {
        const int n0 = n_begin + j * PF_BN;
        T *kt = sk + (j & 1) * PF_BN * D, *vt = sv + (j & 1) * PF_BN * D;
        load_kv_tile<T, D>(vt, v_cache, table, n0, kv_end, kvh, n_kv_heads, block_size);
        cp_async_commit();
        cp_async_wait<1>(); /* K tile j has landed */
        __syncthreads();

        float sc[NT][4];
#pragma unroll
        for (int t = 0; t < NT; t++)
            sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t b[4];
                const int mi = lane / 8;
                ldmatrix_x4(b, kt + swz<D>(np * 16 + (mi / 2) * 8 + lane % 8, kk * 2 + mi % 2));
                mma16816<T>(sc[2 * np], qa[kk], b[0], b[1]);
                mma16816<T>(sc[2 * np + 1], qa[kk], b[2], b[3]);
            }
        }

        if (j + 1 < n_tiles)
            load_kv_tile<T, D>(sk + ((j + 1) & 1) * PF_BN * D, k_cache, table, n0 + PF_BN, kv_end,
                               kvh, n_kv_heads, block_size);
        cp_async_commit(); /* possibly empty: keeps the group count uniform */

        /* mask on tiles that straddle the diagonal or the window's lower edge */
        const bool need_mask = n0 + PF_BN - 1 > pos0 || (window > 0 && n0 < lo_last);
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = sc[t][e] * scale_log2;
                if (need_mask) {
                    const int key = n0 + t * 8 + (lane % 4) * 2 + (e & 1);
                    const int p = my_pos[e >> 1];
                    if (key > p || (window > 0 && key < p - window + 1))
                        v = -INFINITY;
                }
                sc[t][e] = v;
            }

        /* online softmax for this lane's two rows; the 4 lanes of a quad share a row */
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float mx = m_run[hr];
#pragma unroll
            for (int t = 0; t < NT; t++)
                mx = fmaxf(mx, fmaxf(sc[t][2 * hr], sc[t][2 * hr + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mu = mx == -INFINITY ? 0.0f : mx;
            const float corr = exp2f(m_run[hr] - mu);
            m_run[hr] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                sc[t][2 * hr] = exp2f(sc[t][2 * hr] - mu);
                sc[t][2 * hr + 1] = exp2f(sc[t][2 * hr + 1] - mu);
                sum += sc[t][2 * hr] + sc[t][2 * hr + 1];
            }
            l_run[hr] = l_run[hr] * corr + sum; /* this lane's share; quad-summed at the end */
#pragma unroll
            for (int d = 0; d < 2 * KD; d++) {
                o[d][2 * hr] *= corr;
                o[d][2 * hr + 1] *= corr;
            }
        }

        cp_async_wait<1>(); /* V tile j has landed */
        __syncthreads();

#pragma unroll
        for (int kk = 0; kk < PF_BN / 16; kk++) {
            uint32_t pa[4];
            pa[0] = pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
            pa[1] = pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
            pa[2] = pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
            pa[3] = pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
            for (int dp = 0; dp < KD; dp++) {
                uint32_t b[4];
                const int mi = lane / 8;
                ldmatrix_x4_trans(b, vt + swz<D>(kk * 16 + (mi % 2) * 8 + lane % 8, dp * 2 + mi / 2));
                mma16816<T>(o[2 * dp], pa, b[0], b[1]);
                mma16816<T>(o[2 * dp + 1], pa, b[2], b[3]);
            }
        }
    }

    /* normalise and write this warp's valid rows */
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        float l = l_run[hr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int i = i0 + warp * 16 + lane / 4 + hr * 8;
        if (i >= n_q)
            continue;
        const float inv = 1.0f / l;
        T *orow = out + ((size_t)(row0 + i) * n_heads + h) * D + (lane % 4) * 2;
#pragma unroll
        for (int d = 0; d < 2 * KD; d++)
            *reinterpret_cast<uint32_t *>(orow + d * 8) =
                pack2<T>(o[d][2 * hr] * inv, o[d][2 * hr + 1] * inv);
    }
}

int cuda_prefill_init(cuda_backend *cb)
{
    CUDA_TRY(cudaFuncSetAttribute(prefill_kernel<__nv_bfloat16, 64>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)pf_smem_bytes<64>()));
    CUDA_TRY(cudaFuncSetAttribute(prefill_kernel<__nv_bfloat16, 128>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)pf_smem_bytes<128>()));
    CUDA_TRY(cudaFuncSetAttribute(prefill_kernel<__half, 64>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)pf_smem_bytes<64>()));
    CUDA_TRY(cudaFuncSetAttribute(prefill_kernel<__half, 128>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)pf_smem_bytes<128>()));
    return DERAS_OK;
}

template <typename T, int D> static int launch_prefill(cuda_backend *cb, const attn_args *a)
{
    const dim3 grid(cdiv(a->max_q_len, PF_BM), a->n_heads, a->n_seqs);
    const float scale_log2 = a->scale * 1.4426950408889634f;
    prefill_kernel<T, D><<<grid, PF_THREADS, pf_smem_bytes<D>(), cb->stream>>>(
        (T *)a->out, (const T *)a->q, a->q_stride, (const T *)a->k_cache, (const T *)a->v_cache,
        a->q_start, a->ctx_len, a->block_tables, a->max_blocks, a->n_heads, a->n_kv_heads,
        a->block_size, a->window, scale_log2);
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
    CUDA_DISPATCH_DTYPE(cb, {
        if (a->head_dim == 64)
            return launch_prefill<T, 64>(cb, a);
        return launch_prefill<T, 128>(cb, a);
    });
    return DERAS_OK;
}
