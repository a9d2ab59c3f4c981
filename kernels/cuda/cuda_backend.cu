/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_backend.cu - the CUDA backend: device memory, transfers, cuBLAS products, and the
 * ops table that routes each op to its kernel file.
 *
 * One backend = one device, one stream, one cuBLAS handle, one element type (bf16 or
 * fp16; accumulation is always f32). Every op is enqueued on the stream and returns at
 * once; backend_sync waits and then reads the device error record, which is how a kernel
 * reports bad data it met (a token id outside the vocabulary) without a sync per op.
 * Everything an op needs beyond its arguments is allocated here, at creation: the cuBLAS
 * workspace, pinned staging for f32 conversions, the partial outputs of split-context
 * decode attention and the error record. Ops allocate nothing, so a step can be
 * captured into a CUDA graph later.
 *
 * f32 uploads and downloads convert on the host through the pinned staging buffer in
 * chunks (half the bytes cross the bus, and no device scratch is needed); they are
 * synchronous, which suits weight loading and the per-step download of logits.
 * Matrix products go through cublasGemmEx with f32 compute; the optional bias is a
 * separate elementwise pass (cuda_elementwise.cu), one read and write of y.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.cuh"

#define STAGE_BYTES ((size_t)8 << 20)
#define BLAS_WS_BYTES ((size_t)32 << 20)
#define ATTN_PART_BYTES ((size_t)64 << 20)

static void cuda_destroy(backend_t *b)
{
    cuda_backend *cb = cuda_of(b);
    cudaSetDevice(cb->device);
    if (cb->stream)
        cudaStreamSynchronize(cb->stream);
    if (cb->blas)
        cublasDestroy(cb->blas);
    cudaFree(cb->blas_ws);
    cudaFree(cb->attn_part);
    cudaFree(cb->err);
    cudaFreeHost(cb->stage);
    cudaFreeHost(cb->err_host);
    if (cb->stream)
        cudaStreamDestroy(cb->stream);
    free(cb);
}

static int cuda_alloc(backend_t *b, size_t bytes, void **out)
{
    cuda_backend *cb = cuda_of(b);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, (bytes + 63) & ~(size_t)63);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* an allocation failure is not sticky; clear it */
        return deras_fail(e == cudaErrorMemoryAllocation ? DERAS_ENOMEM : DERAS_EBACKEND,
                          "cuda:%d: cannot allocate %zu bytes: %s", cb->device, bytes,
                          cudaGetErrorString(e));
    }
    /* zero-filled as backend.h promises; ordered before any later op on the stream */
    e = cudaMemsetAsync(p, 0, bytes, cb->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        return deras_fail(DERAS_EBACKEND, "cuda:%d: cudaMemsetAsync of a new buffer: %s",
                          cb->device, cudaGetErrorString(e));
    }
    *out = p;
    return DERAS_OK;
}

static void cuda_free(backend_t *b, void *buf)
{
    /* cudaFree waits for the device; a failure here has no caller to report to */
    cudaFree(buf);
}

static int cuda_upload(backend_t *b, void *dst, const void *src, size_t bytes)
{
    /* From pageable memory the source is staged before the call returns, so the caller
     * may reuse it at once; the copy itself is ordered on the stream. */
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_of(b)->stream));
    return DERAS_OK;
}

static int cuda_upload_f32(backend_t *b, void *dst, const float *src, size_t n)
{
    cuda_backend *cb = cuda_of(b);
    const size_t chunk = cb->stage_bytes / 2;
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        CUDA_TRY(cudaStreamSynchronize(cb->stream)); /* the staging buffer is free again */
        if (cb->dtype == CUDA_DTYPE_BF16) {
            __nv_bfloat16 *s = (__nv_bfloat16 *)cb->stage;
            for (size_t j = 0; j < m; j++)
                s[j] = __float2bfloat16_rn(src[i + j]);
        } else {
            __half *s = (__half *)cb->stage;
            for (size_t j = 0; j < m; j++)
                s[j] = __float2half_rn(src[i + j]);
        }
        CUDA_TRY(cudaMemcpyAsync((char *)dst + i * 2, cb->stage, m * 2, cudaMemcpyHostToDevice,
                                 cb->stream));
    }
    CUDA_TRY(cudaStreamSynchronize(cb->stream));
    return DERAS_OK;
}

static int cuda_download_f32(backend_t *b, float *dst, const void *src, size_t n)
{
    cuda_backend *cb = cuda_of(b);
    const size_t chunk = cb->stage_bytes / 2;
    for (size_t i = 0; i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        CUDA_TRY(cudaMemcpyAsync(cb->stage, (const char *)src + i * 2, m * 2,
                                 cudaMemcpyDeviceToHost, cb->stream));
        CUDA_TRY(cudaStreamSynchronize(cb->stream));
        if (cb->dtype == CUDA_DTYPE_BF16) {
            const __nv_bfloat16 *s = (const __nv_bfloat16 *)cb->stage;
            for (size_t j = 0; j < m; j++)
                dst[i + j] = __bfloat162float(s[j]);
        } else {
            const __half *s = (const __half *)cb->stage;
            for (size_t j = 0; j < m; j++)
                dst[i + j] = __half2float(s[j]);
        }
    }
    return DERAS_OK;
}

static int cuda_sync(backend_t *b)
{
    cuda_backend *cb = cuda_of(b);
    CUDA_TRY(cudaStreamSynchronize(cb->stream));
    CUDA_TRY(cudaMemcpyAsync(cb->err_host, cb->err, 4 * sizeof(int), cudaMemcpyDeviceToHost,
                             cb->stream));
    CUDA_TRY(cudaStreamSynchronize(cb->stream));
    if (cb->err_host[0] == CUDA_ERR_NONE)
        return DERAS_OK;
    int code = cb->err_host[0], row = cb->err_host[1], val = cb->err_host[2],
        lim = cb->err_host[3];
    CUDA_TRY(cudaMemsetAsync(cb->err, 0, 4 * sizeof(int), cb->stream));
    if (code == CUDA_ERR_TOKEN_RANGE)
        return deras_fail(DERAS_ERANGE, "embed: token id %d at row %d is outside [0, %d)", val,
                          row, lim);
    return deras_fail(DERAS_EINTERNAL, "cuda:%d: unknown device error record %d", cb->device,
                      code);
}

static int cuda_matmul(backend_t *b, void *y, const void *x, const void *w, const void *bias,
                       int n, int n_out, int n_in)
{
    cuda_backend *cb = cuda_of(b);
    /* cuBLAS is column-major: row-major y (n, n_out) is y^T (n_out x n, ld n_out) = w x^T,
     * where w, row-major (n_out, n_in), is column-major (n_in x n_out, ld n_in) used
     * transposed, and x is column-major (n_in x n, ld n_in). */
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t t = cb->dtype == CUDA_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_TRY(cublasGemmEx(cb->blas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, n, n_in, &one, w, t, n_in,
                            x, t, n_in, &zero, y, t, n_out, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
    return bias ? cuda_add_bias(b, y, bias, n, n_out) : DERAS_OK;
}

static int cuda_attention(backend_t *b, const attn_args *a)
{
    /* tensor-core prefill and split decode for the head dims models use; a simple
     * warp-per-row kernel for the rest (tiny test models, unusual dims) */
    if (a->head_dim != 64 && a->head_dim != 128)
        return cuda_attention_generic(b, a);
    if (a->max_q_len == 1 && a->n_tokens == a->n_seqs)
        return cuda_attention_decode(b, a);
    return cuda_attention_prefill(b, a);
}

static const struct backend_ops cuda_ops = {
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .upload_f32 = cuda_upload_f32,
    .download_f32 = cuda_download_f32,
    .sync = cuda_sync,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .add_rmsnorm = cuda_add_rmsnorm,
    .matmul = cuda_matmul,
    .gather_rows = cuda_gather_rows,
    .rope_table = cuda_rope_table,
    .rope = cuda_rope,
    .kv_write = cuda_kv_write,
    .attention = cuda_attention,
    .silu_mul = cuda_silu_mul,
    .copy_blocks = cuda_copy_blocks,
    .keeps_kv = nullptr, /* the KV cache in the activation dtype only (backend_keeps_kv) */
    .keeps = nullptr, /* weights in the activation dtype only: the loader dequantizes */
    .matmul_q = nullptr,
    .embed_q = nullptr,
    .can_map = nullptr, /* weights are copied to the device at load, never used in place */
    .set_matmul_mode = nullptr, /* exact only: bf16/fp16 weights and activations */
    .reserve_matmul = nullptr,
    .pack_bytes = nullptr,
    .pack = nullptr,
};

/* The part of creation that can fail after the struct exists; cleanup is the caller's. */
static int cuda_setup(cuda_backend *cb)
{
    CUDA_TRY(cudaSetDevice(cb->device));
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, cb->device));
    if (prop.major < 8)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "cuda:%d: %s has compute capability %d.%d; deras needs 8.0 or newer "
                          "(bf16 tensor cores)",
                          cb->device, prop.name, prop.major, prop.minor);
    cb->n_sms = prop.multiProcessorCount;
    CUDA_TRY(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking));
    CUBLAS_TRY(cublasCreate(&cb->blas));
    CUBLAS_TRY(cublasSetStream(cb->blas, cb->stream));
    CUDA_TRY(cudaMalloc(&cb->blas_ws, BLAS_WS_BYTES));
    cb->blas_ws_bytes = BLAS_WS_BYTES;
    CUBLAS_TRY(cublasSetWorkspace(cb->blas, cb->blas_ws, cb->blas_ws_bytes));
    CUDA_TRY(cudaMalloc(&cb->attn_part, ATTN_PART_BYTES));
    cb->attn_part_bytes = ATTN_PART_BYTES;
    CUDA_TRY(cudaMalloc(&cb->err, 4 * sizeof(int)));
    CUDA_TRY(cudaMemsetAsync(cb->err, 0, 4 * sizeof(int), cb->stream));
    CUDA_TRY(cudaStreamSynchronize(cb->stream));
    CUDA_TRY(cudaHostAlloc(&cb->err_host, 4 * sizeof(int), cudaHostAllocDefault));
    CUDA_TRY(cudaHostAlloc(&cb->stage, STAGE_BYTES, cudaHostAllocDefault));
    cb->stage_bytes = STAGE_BYTES;
    return cuda_prefill_init(cb);
}

extern "C" int backend_cuda_new(int device, int dtype, backend_t **out)
{
    char why[160];
    int n_dev = cuda_device_count(why, sizeof why);
    if (n_dev == 0)
        return deras_fail(DERAS_EUNSUPPORTED, "cuda:%d: no CUDA device available (%s)", device,
                          why);
    if (device < 0 || device >= n_dev)
        return deras_fail(DERAS_EINVAL, "cuda:%d: no such device (%d visible)", device, n_dev);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb)
        return deras_fail(DERAS_ENOMEM, "cuda backend: out of memory");
    cb->base.ops = &cuda_ops;
    cb->base.elem_size = 2;
    cb->device = device;
    cb->dtype = dtype == CUDA_DTYPE_FP16 ? CUDA_DTYPE_FP16 : CUDA_DTYPE_BF16;
    cb->prefill_variant = 1;
    snprintf(cb->base.name, sizeof cb->base.name, "cuda:%d%s", device,
             cb->dtype == CUDA_DTYPE_FP16 ? ":fp16" : "");
    int rc = cuda_setup(cb);
    if (rc) {
        cuda_destroy(&cb->base);
        return rc;
    }
    *out = &cb->base;
    return DERAS_OK;
}

/* ---- cuda_ops.h extras ---- */

extern "C" int backend_is_cuda(const backend_t *b)
{
    return b && b->ops == &cuda_ops;
}

extern "C" int cuda_device_count(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (why)
            snprintf(why, why_len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    if (n == 0 && why)
        snprintf(why, why_len, "cudaGetDeviceCount found no device");
    return n;
}

extern "C" void *backend_cuda_stream(backend_t *b)
{
    return backend_is_cuda(b) ? (void *)cuda_of(b)->stream : NULL;
}

extern "C" int backend_cuda_download(backend_t *b, void *dst, const void *src, size_t bytes)
{
    if (!backend_is_cuda(b) || !dst || !src)
        return deras_fail(DERAS_EINVAL, "backend_cuda_download: invalid arguments");
    cuda_backend *cb = cuda_of(b);
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_TRY(cudaStreamSynchronize(cb->stream));
    return DERAS_OK;
}

extern "C" int backend_cuda_set_decode_splits(backend_t *b, int n_splits)
{
    if (!backend_is_cuda(b) || n_splits < 0)
        return deras_fail(DERAS_EINVAL, "backend_cuda_set_decode_splits: not a CUDA backend "
                                        "or negative count %d", n_splits);
    cuda_of(b)->forced_splits = n_splits;
    return DERAS_OK;
}

extern "C" int backend_cuda_set_prefill_variant(backend_t *b, int variant)
{
    if (!backend_is_cuda(b) || variant < 0 || variant > 2)
        return deras_fail(DERAS_EINVAL, "backend_cuda_set_prefill_variant: not a CUDA backend "
                                        "or variant %d outside 0..2",
                          variant);
    cuda_of(b)->prefill_variant = variant == 0 ? 1 : variant;
    return DERAS_OK;
}

extern "C" int backend_cuda_device_info(backend_t *b, char *name, size_t name_len, int *n_sms)
{
    if (!backend_is_cuda(b) || !name || !n_sms)
        return deras_fail(DERAS_EINVAL, "backend_cuda_device_info: not a CUDA backend");
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, cuda_of(b)->device));
    snprintf(name, name_len, "%s", prop.name);
    *n_sms = prop.multiProcessorCount;
    return DERAS_OK;
}
