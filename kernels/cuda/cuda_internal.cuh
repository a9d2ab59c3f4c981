/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_internal.cuh - what the .cu files of the CUDA backend share (private to kernels/cuda).
 *
 * The backend struct, the check macros that turn CUDA and cuBLAS failures into
 * DERAS_EBACKEND with the call, file and line, the element-type helpers (bf16 or fp16
 * storage, f32 arithmetic) and the launchers each .cu file provides to cuda_backend.cu.
 * Launchers assume arguments already checked by kernels/backend.c; they only launch, check
 * the launch, and return. Nothing here allocates: every scratch buffer is sized when the
 * backend is created.
 */
#ifndef DERAS_CUDA_INTERNAL_CUH
#define DERAS_CUDA_INTERNAL_CUH

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "common/base/status.h"
#include "kernels/backend_impl.h"
#include "kernels/cuda/cuda_ops.h"
}

#define CUDA_TRY(call)                                                                        \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess)                                                                \
            return deras_fail(DERAS_EBACKEND, "%s failed at %s:%d: %s (%s)", #call, __FILE__, \
                              __LINE__, cudaGetErrorName(e_), cudaGetErrorString(e_));        \
    } while (0)

/* After every kernel launch: a bad configuration or an earlier asynchronous fault. */
#define CUDA_LAUNCHED(op)                                                                     \
    do {                                                                                      \
        cudaError_t e_ = cudaGetLastError();                                                  \
        if (e_ != cudaSuccess)                                                                \
            return deras_fail(DERAS_EBACKEND, "cuda %s: launch failed at %s:%d: %s (%s)", op, \
                              __FILE__, __LINE__, cudaGetErrorName(e_),                       \
                              cudaGetErrorString(e_));                                        \
    } while (0)

#define CUBLAS_TRY(call)                                                                      \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                      \
            return deras_fail(DERAS_EBACKEND, "%s failed at %s:%d: %s", #call, __FILE__,      \
                              __LINE__, cublasGetStatusString(s_));                           \
    } while (0)

/* Device-side error record, checked by backend_sync: [code, row, value, limit]. */
enum { CUDA_ERR_NONE = 0, CUDA_ERR_TOKEN_RANGE = 1 };

typedef struct cuda_backend {
    struct backend base;
    int device;
    enum cuda_dtype dtype;
    int n_sms;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;           /* cuBLAS workspace, fixed so GEMMs allocate nothing */
    size_t blas_ws_bytes;
    void *stage;             /* pinned host staging for f32 <-> element conversions */
    size_t stage_bytes;
    float *attn_part;        /* split-context partial outputs of decode attention */
    size_t attn_part_bytes;
    int forced_splits;       /* backend_cuda_set_decode_splits; 0 = choose per batch */
    int prefill_variant;     /* backend_cuda_set_prefill_variant: 1 (default) or 2 */
    int *err;                /* device error record (4 ints), zero when clean */
    int *err_host;           /* pinned mirror read by backend_sync */
} cuda_backend;

static inline cuda_backend *cuda_of(backend_t *b)
{
    return (cuda_backend *)b;
}

/* ---- element types: storage in T, arithmetic in f32 ---- */

__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x)
{
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float x)
{
    return __float2half_rn(x);
}

/* Run the statements after `cb` with T bound to the backend's element type (variadic:
 * template argument lists and launch configurations contain commas). */
#define CUDA_DISPATCH_DTYPE(cb, ...)                                                          \
    do {                                                                                      \
        if ((cb)->dtype == CUDA_DTYPE_BF16) {                                                 \
            typedef __nv_bfloat16 T;                                                          \
            __VA_ARGS__;                                                                      \
        } else {                                                                              \
            typedef __half T;                                                                 \
            __VA_ARGS__;                                                                      \
        }                                                                                     \
    } while (0)

/* Tensor-parallel head slices (backend.h): query heads per KV head, and the global index of
 * this rank's first query head; the whole model is rep = n_heads / n_kv_heads, head0 = 0. */
static inline int attn_rep(const attn_args *a)
{
    return a->q_per_kv ? a->q_per_kv : a->n_heads / a->n_kv_heads;
}
static inline int attn_head0(const attn_args *a)
{
    return a->q_per_kv ? a->q_head0 : 0;
}
/* Local KV head read by local query head h. */
__host__ __device__ __forceinline__ int attn_kv_of(int h, int head0, int rep)
{
    return (head0 + h) / rep - head0 / rep;
}

static inline unsigned cdiv(long a, long b)
{
    return (unsigned)((a + b - 1) / b);
}

/* ---- launchers (one .cu file each) ---- */

/* cuda_elementwise.cu */
int cuda_embed(backend_t *b, void *out, const void *table, const int32_t *ids, int n, int d,
               int vocab);
int cuda_rmsnorm(backend_t *b, void *out, const void *x, const void *w, int n, int d, float eps);
int cuda_add_rmsnorm(backend_t *b, void *out, void *residual, const void *x, const void *w, int n,
                     int d, float eps);
int cuda_add_bias(backend_t *b, void *y, const void *bias, int n, int n_out);
int cuda_gather_rows(backend_t *b, void *out, const void *x, const int32_t *rows, int n, int d);
int cuda_rope_table(backend_t *b, float *cos_sin, const int32_t *positions, const float *inv_freq,
                    int n, int head_dim);
int cuda_rope(backend_t *b, void *x, const float *cos_sin, int n, int n_heads, int head_dim,
              int row_stride);
int cuda_kv_write(backend_t *b, void *k_cache, void *v_cache, const void *k, const void *v,
                  int row_stride, const int32_t *slots, int n, int n_kv_heads, int head_dim,
                  int block_size, int kv_dtype);
int cuda_silu_mul(backend_t *b, void *out, const void *gu, int n, int d_ff);
int cuda_copy_blocks(backend_t *b, void *cache, const int32_t *pairs, int n, size_t block_bytes);

/* cuda_decode_attention.cu: every sequence has exactly one query row (max_q_len == 1). */
int cuda_attention_decode(backend_t *b, const attn_args *a);
/* Number of context splits decode attention uses for this batch (host arithmetic only). */
int cuda_decode_splits(const cuda_backend *cb, const attn_args *a);

/* cuda_attention_generic.cu: any batch, any even head_dim <= 256 (slow, for dims the two
 * kernels above are not built for). */
int cuda_attention_generic(backend_t *b, const attn_args *a);

/* cuda_prefill_attention.cu: any batch (prefill, chunked prefill, mixed). */
int cuda_attention_prefill(backend_t *b, const attn_args *a);
/* Raise the shared-memory limit of the prefill kernels; once, at backend creation. */
int cuda_prefill_init(cuda_backend *cb);

#endif
