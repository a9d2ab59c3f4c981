/* SPDX-License-Identifier: Apache-2.0 */
/* backend_impl.h - what a backend implementation provides (private to kernels/).
 *
 * backend.c validates arguments and dispatches through this table; implementations may
 * assume valid arguments. A backend struct starts with `struct backend` (its base) and
 * carries its own state after it.
 */
#ifndef DERAS_BACKEND_IMPL_H
#define DERAS_BACKEND_IMPL_H

#include <stdbool.h>

#include "backend.h"

struct backend_ops {
    void (*destroy)(backend_t *b);
    int (*alloc)(backend_t *b, size_t bytes, void **out);
    void (*free)(backend_t *b, void *buf);
    int (*upload)(backend_t *b, void *dst, const void *src, size_t bytes);
    int (*upload_f32)(backend_t *b, void *dst, const float *src, size_t n);
    int (*download_f32)(backend_t *b, float *dst, const void *src, size_t n);
    int (*sync)(backend_t *b);
    int (*embed)(backend_t *b, void *out, const void *table, const int32_t *ids, int n, int d,
                 int vocab);
    int (*rmsnorm)(backend_t *b, void *out, const void *x, const void *w, int n, int d, float eps);
    int (*add_rmsnorm)(backend_t *b, void *out, void *residual, const void *x, const void *w,
                       int n, int d, float eps);
    int (*matmul)(backend_t *b, void *y, const void *x, const void *w, const void *bias, int n,
                  int n_out, int n_in);
    int (*gather_rows)(backend_t *b, void *out, const void *x, const int32_t *rows, int n, int d);
    int (*rope_table)(backend_t *b, float *cos_sin, const int32_t *positions,
                      const float *inv_freq, int n, int head_dim);
    int (*rope)(backend_t *b, void *x, const float *cos_sin, int n, int n_heads, int head_dim,
                int row_stride);
    int (*kv_write)(backend_t *b, void *k_cache, void *v_cache, const void *k, const void *v,
                    int row_stride, const int32_t *slots, int n, int n_kv_heads, int head_dim,
                    int block_size, int kv_dtype);
    int (*attention)(backend_t *b, const attn_args *a);
    int (*silu_mul)(backend_t *b, void *out, const void *gu, int n, int d_ff);
    int (*copy_blocks)(backend_t *b, void *cache, const int32_t *pairs, int n, size_t block_bytes);
    /* KV cache dtypes besides the backend's own; NULL: its own only (backend_keeps_kv). */
    bool (*keeps_kv)(int dtype);
    /* Weights in another format than the backend's own, or made of parts (backend.h);
     * NULL where the backend keeps only its own dtype (backend_weight_dtype). backend.c
     * has checked every part's dtype with keeps, the parts' rows and qk_perm_hd. */
    bool (*keeps)(int dtype);
    int (*matmul_q)(backend_t *b, void *y, const void *x, const backend_weight *w,
                    const void *bias, int n);
    int (*embed_q)(backend_t *b, void *out, const backend_weight *table, const int32_t *ids,
                   int n);
    /* backend_can_map; NULL: never. */
    bool (*can_map)(int dtype, const void *p);
    /* enum backend_mm_mode, checked; NULL where only BACKEND_MM_EXACT is offered */
    int (*set_matmul_mode)(backend_t *b, int mode);
    /* checked sizes; NULL where nothing is needed */
    int (*reserve_matmul)(backend_t *b, int max_rows, int max_cols);
    /* backend_pack_bytes, backend_pack (w and buf checked); NULL where nothing is packed */
    size_t (*pack_bytes)(const backend_t *b, const backend_weight *w);
    int (*pack)(backend_t *b, backend_weight *w, void *buf);
};

struct backend {
    const struct backend_ops *ops;
    char name[32];
    size_t elem_size;
    int dtype; /* enum deras_dtype of elem_size: F32 (cpu), BF16 or F16 (cuda); set by backend_new */
};

int backend_cpu_new(int n_threads, backend_t **out);
/* CUDA device `device` with element type `dtype` (enum cuda_dtype); cuda_backend.cu. */
int backend_cuda_new(int device, int dtype, backend_t **out);

#endif
