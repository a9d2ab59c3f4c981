/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_elementwise.cu - the memory-bound layer ops: embedding gather, RMSNorm (fused with
 * the residual add), RoPE and its table, SiLU-and-multiply, bias add, row gather, KV cache
 * writes and block copies.
 *
 * Each op reads its inputs once and writes its outputs once, so its floor is bytes over
 * copy bandwidth; the kernels therefore move 16 bytes per thread per access (8 bf16/fp16
 * elements) whenever the row length and the pointers allow it, and fall back to one
 * element per access otherwise (odd head dims, unaligned strides), which is correct but
 * slower. Arithmetic is f32 on values read from bf16/fp16, rounded once on the store, as
 * the CPU reference computes in f32 on the same (already rounded) inputs.
 *
 * Copies (embedding rows, gathers, cache writes, block copies) do not look at the element
 * type at all: they move 2-byte units. The embedding gather checks token ids on the device
 * and records the first bad one in the backend's error record, which backend_sync turns
 * into DERAS_ERANGE; the bad row is filled with NaN so nothing downstream looks valid.
 */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"

#define EW_THREADS 256

/* ---- vector helpers: W = 8 moves 16 bytes, W = 1 one element ---- */

template <typename T, int W> __device__ __forceinline__ void load_f32(const T *p, float *f)
{
    if constexpr (W == 8) {
        uint4 u = *reinterpret_cast<const uint4 *>(p);
        const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
        for (int i = 0; i < 8; i++)
            f[i] = to_f32(h[i]);
    } else {
        f[0] = to_f32(*p);
    }
}

template <typename T, int W> __device__ __forceinline__ void store_f32(T *p, const float *f)
{
    if constexpr (W == 8) {
        uint4 u;
        T *h = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int i = 0; i < 8; i++)
            h[i] = from_f32<T>(f[i]);
        *reinterpret_cast<uint4 *>(p) = u;
    } else {
        p[0] = from_f32<T>(f[0]);
    }
}

/* 16-byte vectors are usable when every pointer is 16-byte aligned and every row length
 * and stride (in 2-byte elements) is a multiple of 8. */
static bool vec_ok(const void *p0, const void *p1, const void *p2, long e0, long e1)
{
    uintptr_t a = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2;
    return (a % 16) == 0 && e0 % 8 == 0 && e1 % 8 == 0;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it. */
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float part[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    const int n_warps = blockDim.x >> 5;
    v = lane < n_warps ? part[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* part[] may be reused by a later call */
    return v;
}

/* ---- row copies in 2-byte units (U = uint4: 8 units, U = uint16_t: 1) ---- */

template <typename U>
__global__ void gather_kernel(uint16_t *out, const uint16_t *src, const int32_t *rows, int d,
                              int vocab, int *err)
{
    const int i = blockIdx.x;
    const int r = rows[i];
    uint16_t *o = out + (size_t)i * d;
    constexpr int W = sizeof(U) / 2;
    if (vocab > 0 && (r < 0 || r >= vocab)) {
        if (threadIdx.x == 0 && atomicCAS(err, CUDA_ERR_NONE, CUDA_ERR_TOKEN_RANGE) == 0) {
            err[1] = i;
            err[2] = r;
            err[3] = vocab;
        }
        for (int j = threadIdx.x; j < d; j += blockDim.x)
            o[j] = 0x7fc0; /* NaN in bf16; in fp16 0x7fc0 is NaN as well */
        return;
    }
    const U *s = reinterpret_cast<const U *>(src + (size_t)r * d);
    U *dst = reinterpret_cast<U *>(o);
    for (int j = threadIdx.x; j < d / W; j += blockDim.x)
        dst[j] = s[j];
}

static int launch_gather(cuda_backend *cb, void *out, const void *src, const int32_t *rows, int n,
                         int d, int vocab, const char *op)
{
    if (vec_ok(out, src, NULL, d, 0))
        gather_kernel<uint4><<<n, 128, 0, cb->stream>>>((uint16_t *)out, (const uint16_t *)src,
                                                        rows, d, vocab, cb->err);
    else
        gather_kernel<uint16_t><<<n, 128, 0, cb->stream>>>(
            (uint16_t *)out, (const uint16_t *)src, rows, d, vocab, cb->err);
    CUDA_LAUNCHED(op);
    return DERAS_OK;
}

int cuda_embed(backend_t *b, void *out, const void *table, const int32_t *ids, int n, int d,
               int vocab)
{
    return launch_gather(cuda_of(b), out, table, ids, n, d, vocab, "embed");
}

int cuda_gather_rows(backend_t *b, void *out, const void *x, const int32_t *rows, int n, int d)
{
    return launch_gather(cuda_of(b), out, x, rows, n, d, 0, "gather_rows");
}

/* ---- RMSNorm, optionally after res += x ---- */

template <typename T, int W, bool ADD>
__global__ void rmsnorm_kernel(T *out, T *res, const T *x, const T *w, int d, float eps)
{
    const size_t row = blockIdx.x;
    const T *xr = x + row * d;
    T *rr = ADD ? res + row * d : nullptr;
    T *orow = out + row * d;
    float ss = 0.0f;
    for (int j = threadIdx.x * W; j < d; j += blockDim.x * W) {
        float v[W];
        load_f32<T, W>(xr + j, v);
        if constexpr (ADD) {
            float r[W];
            load_f32<T, W>(rr + j, r);
#pragma unroll
            for (int i = 0; i < W; i++)
                r[i] += v[i];
            store_f32<T, W>(rr + j, r);
            /* the norm sees the residual as stored, rounded, like the next layer will */
            load_f32<T, W>(rr + j, v);
        }
#pragma unroll
        for (int i = 0; i < W; i++)
            ss += v[i] * v[i];
    }
    ss = block_sum(ss);
    const float inv = rsqrtf(ss / (float)d + eps);
    for (int j = threadIdx.x * W; j < d; j += blockDim.x * W) {
        float v[W], g[W];
        load_f32<T, W>((ADD ? rr : xr) + j, v);
        load_f32<T, W>(w + j, g);
#pragma unroll
        for (int i = 0; i < W; i++)
            v[i] = g[i] * (v[i] * inv);
        store_f32<T, W>(orow + j, v);
    }
}

template <bool ADD>
static int launch_rmsnorm(cuda_backend *cb, void *out, void *res, const void *x, const void *w,
                          int n, int d, float eps, const char *op)
{
    const bool vec = vec_ok(out, x, w, d, 0) && (!ADD || vec_ok(res, NULL, NULL, 0, 0));
    const int threads = d >= 8192 ? 1024 : d >= 2048 ? 256 : 128;
    CUDA_DISPATCH_DTYPE(cb, {
        if (vec)
            rmsnorm_kernel<T, 8, ADD><<<n, threads, 0, cb->stream>>>(
                (T *)out, (T *)res, (const T *)x, (const T *)w, d, eps);
        else
            rmsnorm_kernel<T, 1, ADD><<<n, threads, 0, cb->stream>>>(
                (T *)out, (T *)res, (const T *)x, (const T *)w, d, eps);
    });
    CUDA_LAUNCHED(op);
    return DERAS_OK;
}

int cuda_rmsnorm(backend_t *b, void *out, const void *x, const void *w, int n, int d, float eps)
{
    return launch_rmsnorm<false>(cuda_of(b), out, NULL, x, w, n, d, eps, "rmsnorm");
}

int cuda_add_rmsnorm(backend_t *b, void *out, void *residual, const void *x, const void *w, int n,
                     int d, float eps)
{
    return launch_rmsnorm<true>(cuda_of(b), out, residual, x, w, n, d, eps, "add_rmsnorm");
}

/* ---- bias add: y (n, n_out) += bias ---- */

template <typename T, int W>
__global__ void add_bias_kernel(T *y, const T *bias, long total, int n_out)
{
    long i = ((long)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i >= total)
        return;
    float v[W], c[W];
    load_f32<T, W>(y + i, v);
    load_f32<T, W>(bias + i % n_out, c);
#pragma unroll
    for (int k = 0; k < W; k++)
        v[k] += c[k];
    store_f32<T, W>(y + i, v);
}

int cuda_add_bias(backend_t *b, void *y, const void *bias, int n, int n_out)
{
    cuda_backend *cb = cuda_of(b);
    const long total = (long)n * n_out;
    const bool vec = vec_ok(y, bias, NULL, n_out, 0);
    CUDA_DISPATCH_DTYPE(cb, {
        if (vec)
            add_bias_kernel<T, 8><<<cdiv(total / 8, EW_THREADS), EW_THREADS, 0, cb->stream>>>(
                (T *)y, (const T *)bias, total, n_out);
        else
            add_bias_kernel<T, 1><<<cdiv(total, EW_THREADS), EW_THREADS, 0, cb->stream>>>(
                (T *)y, (const T *)bias, total, n_out);
    });
    CUDA_LAUNCHED("matmul bias");
    return DERAS_OK;
}

/* ---- RoPE ---- */

__global__ void rope_table_kernel(float *cos_sin, const int32_t *positions,
                                  const float *inv_freq, int n, int head_dim)
{
    const int half = head_dim / 2;
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)n * half)
        return;
    const int i = (int)(idx / half), j = (int)(idx % half);
    /* the angle is rounded to f32 before cos/sin, as the CPU reference and transformers do;
     * cosf/sinf (not the __ intrinsics) reduce large angles accurately */
    const float angle = __fmul_rn((float)positions[i], inv_freq[j]);
    float s, c;
    sincosf(angle, &s, &c);
    cos_sin[(size_t)i * head_dim + j] = c;
    cos_sin[(size_t)i * head_dim + half + j] = s;
}

int cuda_rope_table(backend_t *b, float *cos_sin, const int32_t *positions, const float *inv_freq,
                    int n, int head_dim)
{
    cuda_backend *cb = cuda_of(b);
    const long total = (long)n * (head_dim / 2);
    rope_table_kernel<<<cdiv(total, EW_THREADS), EW_THREADS, 0, cb->stream>>>(
        cos_sin, positions, inv_freq, n, head_dim);
    CUDA_LAUNCHED("rope_table");
    return DERAS_OK;
}

/* One thread per (row, head, pair j): rotates x[j] and x[j + half]. */
template <typename T>
__global__ void rope_kernel(T *x, const float *cos_sin, int n, int n_heads, int head_dim,
                            int row_stride)
{
    const int half = head_dim / 2;
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)n * n_heads * half)
        return;
    const int j = (int)(idx % half);
    const int h = (int)((idx / half) % n_heads);
    const long i = idx / ((long)half * n_heads);
    const float *cs = cos_sin + i * head_dim;
    const float c = cs[j], s = cs[half + j];
    T *v = x + i * row_stride + (long)h * head_dim;
    const float x1 = to_f32(v[j]), x2 = to_f32(v[j + half]);
    v[j] = from_f32<T>(x1 * c - x2 * s);
    v[j + half] = from_f32<T>(x2 * c + x1 * s);
}

int cuda_rope(backend_t *b, void *x, const float *cos_sin, int n, int n_heads, int head_dim,
              int row_stride)
{
    cuda_backend *cb = cuda_of(b);
    const long total = (long)n * n_heads * (head_dim / 2);
    CUDA_DISPATCH_DTYPE(cb, {
        rope_kernel<T><<<cdiv(total, EW_THREADS), EW_THREADS, 0, cb->stream>>>(
            (T *)x, cos_sin, n, n_heads, head_dim, row_stride);
    });
    CUDA_LAUNCHED("rope");
    return DERAS_OK;
}

/* ---- KV cache writes: one thread per (token, kv head, vector of the head) ---- */

template <typename U>
__global__ void kv_write_kernel(uint16_t *k_cache, uint16_t *v_cache, const uint16_t *k,
                                const uint16_t *v, int row_stride, const int32_t *slots, int n,
                                int n_kv_heads, int head_dim, int block_size)
{
    constexpr int W = sizeof(U) / 2;
    const int per_head = head_dim / W;
    const long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long)n * n_kv_heads * per_head)
        return;
    const int e = (int)(idx % per_head);
    const int g = (int)((idx / per_head) % n_kv_heads);
    const long i = idx / ((long)per_head * n_kv_heads);
    const long slot = slots[i];
    const long blk = slot / block_size, off = slot % block_size;
    const size_t dst = (((size_t)blk * n_kv_heads + g) * block_size + off) * head_dim;
    const size_t src = (size_t)i * row_stride + (size_t)g * head_dim;
    reinterpret_cast<U *>(k_cache + dst)[e] = reinterpret_cast<const U *>(k + src)[e];
    reinterpret_cast<U *>(v_cache + dst)[e] = reinterpret_cast<const U *>(v + src)[e];
}

/* The cache is in the activation dtype (backend_keeps_kv: backend.c checked kv_dtype), so
 * a write is a copy. */
int cuda_kv_write(backend_t *b, void *k_cache, void *v_cache, const void *k, const void *v,
                  int row_stride, const int32_t *slots, int n, int n_kv_heads, int head_dim,
                  int block_size, int kv_dtype)
{
    cuda_backend *cb = cuda_of(b);
    const bool vec = vec_ok(k_cache, v_cache, k, head_dim, row_stride) && vec_ok(v, NULL, NULL, 0, 0);
    const long total = (long)n * n_kv_heads * (vec ? head_dim / 8 : head_dim);
    if (vec)
        kv_write_kernel<uint4><<<cdiv(total, EW_THREADS), EW_THREADS, 0, cb->stream>>>(
            (uint16_t *)k_cache, (uint16_t *)v_cache, (const uint16_t *)k, (const uint16_t *)v,
            row_stride, slots, n, n_kv_heads, head_dim, block_size);
    else
        kv_write_kernel<uint16_t><<<cdiv(total, EW_THREADS), EW_THREADS, 0, cb->stream>>>(
            (uint16_t *)k_cache, (uint16_t *)v_cache, (const uint16_t *)k, (const uint16_t *)v,
            row_stride, slots, n, n_kv_heads, head_dim, block_size);
    CUDA_LAUNCHED("kv_write");
    return DERAS_OK;
}

/* ---- SwiGLU ---- */

template <typename T, int W>
__global__ void silu_mul_kernel(T *out, const T *gu, int n, int d_ff)
{
    const long idx = ((long)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (idx >= (long)n * d_ff)
        return;
    const long i = idx / d_ff, j = idx % d_ff;
    float g[W], u[W];
    load_f32<T, W>(gu + i * 2 * d_ff + j, g);
    load_f32<T, W>(gu + i * 2 * d_ff + d_ff + j, u);
#pragma unroll
    for (int k = 0; k < W; k++)
        g[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
    store_f32<T, W>(out + idx, g);
}

int cuda_silu_mul(backend_t *b, void *out, const void *gu, int n, int d_ff)
{
    cuda_backend *cb = cuda_of(b);
    const long total = (long)n * d_ff;
    const bool vec = vec_ok(out, gu, NULL, d_ff, 0);
    CUDA_DISPATCH_DTYPE(cb, {
        if (vec)
            silu_mul_kernel<T, 8><<<cdiv(total / 8, EW_THREADS), EW_THREADS, 0, cb->stream>>>(
                (T *)out, (const T *)gu, n, d_ff);
        else
            silu_mul_kernel<T, 1><<<cdiv(total, EW_THREADS), EW_THREADS, 0, cb->stream>>>(
                (T *)out, (const T *)gu, n, d_ff);
    });
    CUDA_LAUNCHED("silu_mul");
    return DERAS_OK;
}

/* ---- copy-on-write block copies: grid (pairs, chunks of a block) ---- */

template <typename U>
__global__ void copy_blocks_kernel(uint16_t *cache, const int32_t *pairs, size_t block_units)
{
    const int p = blockIdx.y;
    U *c = reinterpret_cast<U *>(cache);
    const size_t src = (size_t)pairs[2 * p] * block_units;
    const size_t dst = (size_t)pairs[2 * p + 1] * block_units;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < block_units;
         e += (size_t)gridDim.x * blockDim.x)
        c[dst + e] = c[src + e];
}

int cuda_copy_blocks(backend_t *b, void *cache, const int32_t *pairs, int n, size_t block_bytes)
{
    cuda_backend *cb = cuda_of(b);
    const size_t block_elems = block_bytes / 2; /* 2-byte elements, bf16 or fp16 */
    const bool vec = vec_ok(cache, NULL, NULL, (long)block_elems, 0);
    const size_t units = vec ? block_elems / 8 : block_elems;
    unsigned chunks = cdiv((long)units, EW_THREADS);
    chunks = chunks > 64 ? 64 : chunks;
    const dim3 grid(chunks, (unsigned)n);
    if (vec)
        copy_blocks_kernel<uint4><<<grid, EW_THREADS, 0, cb->stream>>>((uint16_t *)cache, pairs,
                                                                        units);
    else
        copy_blocks_kernel<uint16_t><<<grid, EW_THREADS, 0, cb->stream>>>((uint16_t *)cache,
                                                                           pairs, units);
    CUDA_LAUNCHED("copy_blocks");
    return DERAS_OK;
}
