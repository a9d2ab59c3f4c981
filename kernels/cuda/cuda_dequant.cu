/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_dequant.cu - GGUF block types to the backend's element type, on the device.
 *
 * Lets a quantized checkpoint be uploaded as it is stored (a quarter to a half of the
 * bytes over the bus) and expanded on the GPU. One thread per output element: it finds
 * its block and its place in the block's layout and computes the value with the same
 * f32 operations, in the same order, as the reference decoders in common/base/dtype.c (which
 * match ggml bit for bit); the products and sums use the _rn intrinsics so the compiler
 * cannot fuse them into FMAs, which would round differently. The f32 result is then
 * rounded once to bf16/fp16. Block headers are re-read by each thread of a block and hit
 * in L1. Cost: one read of the packed data, one write of 2 bytes per element.
 */
#include "kernels/cuda/cuda_internal.cuh"

extern "C" {
#include "common/base/dtype.h"
}

#define DQ_THREADS 256

__device__ __forceinline__ float rd_f16(const uint8_t *p)
{
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

__device__ __forceinline__ uint32_t rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* The 6-bit scale and min of sub-block j of Q4_K/Q5_K (ggml's get_scale_min_k4). */
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element j of one block. */
template <int DT> __device__ float dequant_one(const uint8_t *b, int j)
{
    if constexpr (DT == DT_F32) {
        return __uint_as_float(rd_u32(b));
    } else if constexpr (DT == DT_F16) {
        return rd_f16(b);
    } else if constexpr (DT == DT_BF16) {
        return __uint_as_float((uint32_t)(b[0] | (b[1] << 8)) << 16);
    } else if constexpr (DT == DT_Q4_0) {
        const int x = (j < 16 ? b[2 + j] & 0x0f : b[2 + j - 16] >> 4) - 8;
        return __fmul_rn((float)x, rd_f16(b));
    } else if constexpr (DT == DT_Q4_1) {
        const int x = j < 16 ? b[4 + j] & 0x0f : b[4 + j - 16] >> 4;
        return __fadd_rn(__fmul_rn((float)x, rd_f16(b)), rd_f16(b + 2));
    } else if constexpr (DT == DT_Q5_0) {
        const uint32_t qh = rd_u32(b + 2);
        const int jj = j % 16;
        const int h = (int)((qh >> j) & 1) << 4; /* bit j belongs to element j */
        const int x = ((j < 16 ? b[6 + jj] & 0x0f : b[6 + jj] >> 4) | h) - 16;
        return __fmul_rn((float)x, rd_f16(b));
    } else if constexpr (DT == DT_Q5_1) {
        const uint32_t qh = rd_u32(b + 4);
        const int jj = j % 16;
        const int h = (int)((qh >> j) & 1) << 4;
        const int x = (j < 16 ? b[8 + jj] & 0x0f : b[8 + jj] >> 4) | h;
        return __fadd_rn(__fmul_rn((float)x, rd_f16(b)), rd_f16(b + 2));
    } else if constexpr (DT == DT_Q8_0) {
        return __fmul_rn((float)(int8_t)b[2 + j], rd_f16(b));
    } else if constexpr (DT == DT_Q4_K || DT == DT_Q5_K) {
        const int c = j / 64, w = j % 64, l = w % 32, sub = 2 * c + (w >= 32);
        int sc, m;
        scale_min_k4(sub, b + 4, &sc, &m);
        const float d1 = __fmul_rn(rd_f16(b), (float)sc);
        const float m1 = __fmul_rn(rd_f16(b + 2), (float)m);
        int x;
        if constexpr (DT == DT_Q4_K) {
            const uint8_t q = b[16 + c * 32 + l];
            x = w < 32 ? q & 0x0f : q >> 4;
        } else {
            const uint8_t q = b[48 + c * 32 + l], qh = b[16 + l];
            const int bit = w < 32 ? 1 << (2 * c) : 2 << (2 * c);
            x = (w < 32 ? q & 0x0f : q >> 4) + ((qh & bit) ? 16 : 0);
        }
        return __fsub_rn(__fmul_rn(d1, (float)x), m1);
    } else { /* DT_Q6_K */
        const int n = j / 128, r = j % 128, quarter = r / 32, l = r % 32, is = l / 16;
        const uint8_t *ql = b + n * 64, *qh = b + 128 + n * 32;
        const int8_t *sc = (const int8_t *)(b + 192 + n * 8);
        const uint8_t lo = quarter & 1 ? ql[l + 32] : ql[l];
        const int nib = quarter < 2 ? lo & 0x0f : lo >> 4;
        const int x = (nib | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
        return __fmul_rn(__fmul_rn(rd_f16(b + 208), (float)sc[is + 2 * quarter]), (float)x);
    }
}

template <typename T, int DT, int QK, int BYTES>
__global__ void dequant_kernel(T *__restrict__ dst, const uint8_t *__restrict__ src, long n)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    dst[i] = from_f32<T>(dequant_one<DT>(src + (i / QK) * BYTES, (int)(i % QK)));
}

template <typename T, int DT, int QK, int BYTES>
static int launch(cuda_backend *cb, void *dst, const void *src, long n)
{
    if (n % QK)
        return deras_fail(DERAS_EFORMAT, "dequant: %ld elements is not a whole number of %d-element "
                                         "blocks",
                          n, QK);
    dequant_kernel<T, DT, QK, BYTES><<<cdiv(n, DQ_THREADS), DQ_THREADS, 0, cb->stream>>>(
        (T *)dst, (const uint8_t *)src, n);
    CUDA_LAUNCHED("dequant");
    return DERAS_OK;
}

template <typename T>
static int dispatch(cuda_backend *cb, void *dst, const void *src, int dtype, long n)
{
    switch (dtype) {
    case DT_F32: return launch<T, DT_F32, 1, 4>(cb, dst, src, n);
    case DT_F16: return launch<T, DT_F16, 1, 2>(cb, dst, src, n);
    case DT_BF16: return launch<T, DT_BF16, 1, 2>(cb, dst, src, n);
    case DT_Q4_0: return launch<T, DT_Q4_0, 32, 18>(cb, dst, src, n);
    case DT_Q4_1: return launch<T, DT_Q4_1, 32, 20>(cb, dst, src, n);
    case DT_Q5_0: return launch<T, DT_Q5_0, 32, 22>(cb, dst, src, n);
    case DT_Q5_1: return launch<T, DT_Q5_1, 32, 24>(cb, dst, src, n);
    case DT_Q8_0: return launch<T, DT_Q8_0, 32, 34>(cb, dst, src, n);
    case DT_Q4_K: return launch<T, DT_Q4_K, 256, 144>(cb, dst, src, n);
    case DT_Q5_K: return launch<T, DT_Q5_K, 256, 176>(cb, dst, src, n);
    case DT_Q6_K: return launch<T, DT_Q6_K, 256, 210>(cb, dst, src, n);
    default:
        return deras_fail(DERAS_EUNSUPPORTED, "dequant: GGUF type %d is not supported on CUDA",
                          dtype);
    }
}

extern "C" int backend_cuda_dequant(backend_t *b, void *dst, const void *src, int dtype,
                                    int64_t n_elems)
{
    if (!backend_is_cuda(b) || !dst || !src || n_elems <= 0)
        return deras_fail(DERAS_EINVAL, "backend_cuda_dequant: invalid arguments");
    cuda_backend *cb = cuda_of(b);
    CUDA_DISPATCH_DTYPE(cb, { return dispatch<T>(cb, dst, src, dtype, (long)n_elems); });
    return DERAS_OK;
}
