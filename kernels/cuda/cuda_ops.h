/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_ops.h - what the CUDA backend offers beyond the ops table (plain C).
 *
 * backend_new("cuda:N") gives a bf16 backend on device N and "cuda:N:fp16" an fp16 one;
 * every op of backend.h then runs on the device's stream. The functions here are the
 * CUDA-only extras: sampling on the device, GGUF dequantization to the backend's element
 * type, and the handles a benchmark needs (stream, device properties). Each takes a
 * backend made by backend_new("cuda:...") and returns DERAS_EINVAL for any other backend.
 *
 * This header needs no CUDA header: a program without CUDA can include it, and in a build
 * without CUDA every function returns DERAS_EUNSUPPORTED.
 */
#ifndef DERAS_CUDA_OPS_H
#define DERAS_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

enum cuda_dtype { CUDA_DTYPE_BF16 = 0, CUDA_DTYPE_FP16 = 1 };

/* True if b is a CUDA backend. */
int backend_is_cuda(const backend_t *b);

/* Number of CUDA devices visible to this process: 0 when there is no driver, no device,
 * or this build has no CUDA (never an error), so callers can skip with a reason. The
 * reason (the CUDA error's text) goes to `why` when non-NULL. */
int cuda_device_count(char *why, size_t why_len);

/* The backend's cudaStream_t, as a void pointer (timing with events in benchmarks). */
void *backend_cuda_stream(backend_t *b);

/* Device name and multiprocessor count of the backend's device. */
int backend_cuda_device_info(backend_t *b, char *name, size_t name_len, int *n_sms);

/* Copy `bytes` of device memory to the host as they are (f32 tables such as cos_sin, int32
 * tokens from backend_cuda_sample); waits for the stream first. */
int backend_cuda_download(backend_t *b, void *dst, const void *src, size_t bytes);

/* Context splits for decode attention: 0 (default) lets the backend choose from the
 * batch and the multiprocessor count; n > 0 forces n (clamped to what the partial-output
 * scratch holds). For tests that must exercise both the one-pass and split paths. */
int backend_cuda_set_decode_splits(backend_t *b, int n_splits);

/* Prefill kernel variant: 1 (default) = 8 warps of 16 query rows, Q in registers; 2 = 4
 * warps of 32 rows, Q re-read from shared memory, half the shared-memory traffic per MMA
 * on K/V. Both are tested; the benchmark times both; 0 restores the default. */
int backend_cuda_set_prefill_variant(backend_t *b, int variant);

/* Sampling parameters of one row, in device memory as an array (n) of this struct. */
typedef struct cuda_sample_params {
    float temperature; /* 0: greedy (argmax, ties to the lowest id) */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off; (0, 1] */
    float min_p;       /* 0: off; [0, 1] */
    float u;           /* uniform in [0, 1), drawn on the host from the request's stream */
} cuda_sample_params;

/* tokens (n) int32 buffer = one draw per row of logits (n, vocab) (element-type buffer).
 * Per row, on the device: w = logits / temperature; keep w >= max(k-th largest w, the
 * top-p threshold over the top-k set, max w + log(min_p)); draw the token at which the
 * kept tokens' probability mass, summed in increasing token id, first exceeds u times
 * their total. Ties at the top-k boundary keep every tied token. One block per row, about
 * ten passes over the row; allocates nothing. */
int backend_cuda_sample(backend_t *b, int32_t *tokens, const void *logits,
                        const cuda_sample_params *params, int n, int vocab);

/* dst (n_elems) element-type buffer = dequantized GGUF data `src` (device buffer holding
 * n_elems / block_elems blocks of `dtype`, an enum deras_dtype id: F32, F16, BF16, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K). Each element is computed in f32 exactly as
 * common/base/dtype.c does, then rounded to the element type. DERAS_EUNSUPPORTED for other
 * types, DERAS_EFORMAT if n_elems is not a whole number of blocks. */
int backend_cuda_dequant(backend_t *b, void *dst, const void *src, int dtype, int64_t n_elems);

#endif
