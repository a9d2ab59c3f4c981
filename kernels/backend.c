/* SPDX-License-Identifier: Apache-2.0 */
/* backend.c - backend construction and argument-checked dispatch (see backend.h).
 *
 * Each public op checks what is cheap to check (NULL buffers, non-positive sizes, shapes
 * that cannot be right) and forwards to the implementation's table, so implementations
 * hold only the arithmetic. The checks cost a few comparisons per op, nothing per element.
 */
#include "backend_impl.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "kernels/cuda/cuda_ops.h"

/* "N", "N:bf16" or "N:fp16" after "cuda:"; N a decimal device index below 1024. */
static int parse_cuda_spec(const char *spec, int *id, int *dtype)
{
    char *end;
    if (*spec < '0' || *spec > '9')
        return DERAS_EINVAL;
    long n = strtol(spec, &end, 10);
    if (n > 1023)
        return DERAS_EINVAL;
    *id = (int)n;
    if (!*end || !strcmp(end, ":bf16"))
        *dtype = CUDA_DTYPE_BF16;
    else if (!strcmp(end, ":fp16"))
        *dtype = CUDA_DTYPE_FP16;
    else
        return DERAS_EINVAL;
    return DERAS_OK;
}

int backend_new(const char *device, int n_threads, backend_t **out)
{
    if (!device || !out)
        return deras_fail(DERAS_EINVAL, "backend_new: NULL argument");
    *out = NULL;
    int rc;
    if (!strcmp(device, "cpu")) {
        if ((rc = backend_cpu_new(n_threads, out)))
            return rc;
        (*out)->dtype = DT_F32;
        return DERAS_OK;
    }
    if (!strncmp(device, "cuda:", 5)) {
        int id, dtype;
        if ((rc = parse_cuda_spec(device + 5, &id, &dtype)))
            return deras_fail(rc, "device '%s': expected cuda:N, cuda:N:bf16 or cuda:N:fp16",
                              device);
        if ((rc = backend_cuda_new(id, dtype, out))) /* the plugin, or why there is none */
            return rc;
        (*out)->dtype = dtype == CUDA_DTYPE_BF16 ? DT_BF16 : DT_F16;
        return DERAS_OK;
    }
    return deras_fail(DERAS_EINVAL, "unknown device '%s' (expected cpu or cuda:N)", device);
}

int backend_kv_dtype(const char *device, int requested, int *out)
{
    if (!device || !out)
        return deras_fail(DERAS_EINVAL, "backend_kv_dtype: NULL argument");
    int def, id, cuda_dtype;
    if (!strcmp(device, "cpu"))
        def = DT_F32;
    else if (!strncmp(device, "cuda:", 5) && !parse_cuda_spec(device + 5, &id, &cuda_dtype))
        def = cuda_dtype == CUDA_DTYPE_BF16 ? DT_BF16 : DT_F16;
    else
        return deras_fail(DERAS_EINVAL, "unknown device '%s' (expected cpu, cuda:N, cuda:N:bf16 "
                          "or cuda:N:fp16)", device);
    if (requested == BACKEND_KV_DEFAULT || requested == def) {
        *out = def;
        return DERAS_OK;
    }
    if (def == DT_F32 && (requested == DT_F16 || requested == DT_BF16)) {
        *out = requested;
        return DERAS_OK;
    }
    if (def == DT_F32)
        return deras_fail(DERAS_EUNSUPPORTED, "device %s keeps its KV cache in F32, F16 or BF16, "
                          "not %s", device, dtype_name(requested));
    return deras_fail(DERAS_EUNSUPPORTED, "device %s keeps its KV cache in %s (its activation "
                      "type; cuda:N:bf16 or cuda:N:fp16 picks it), not %s", device,
                      dtype_name(def), dtype_name(requested));
}

bool backend_keeps_kv(const backend_t *b, int dtype)
{
    return b && (dtype == b->dtype || (b->ops->keeps_kv && b->ops->keeps_kv(dtype)));
}

void backend_destroy(backend_t **b)
{
    if (b && *b) {
        (*b)->ops->destroy(*b);
        *b = NULL;
    }
}

const char *backend_name(const backend_t *b)
{
    return b ? b->name : "";
}

size_t backend_elem_size(const backend_t *b)
{
    return b ? b->elem_size : 0;
}

#define CHECK(cond, op)                                                                       \
    do {                                                                                      \
        if (!(cond))                                                                          \
            return deras_fail(DERAS_EINVAL, "backend %s: invalid arguments (%s)", op, #cond); \
    } while (0)

int backend_alloc(backend_t *b, size_t bytes, void **out)
{
    CHECK(b && out && bytes > 0, "alloc");
    return b->ops->alloc(b, bytes, out);
}

void backend_free(backend_t *b, void *buf)
{
    if (b && buf)
        b->ops->free(b, buf);
}

int backend_upload(backend_t *b, void *dst, const void *src, size_t bytes)
{
    CHECK(b && dst && src, "upload");
    return bytes ? b->ops->upload(b, dst, src, bytes) : DERAS_OK;
}

int backend_upload_f32(backend_t *b, void *dst, const float *src, size_t n)
{
    CHECK(b && dst && src, "upload_f32");
    return n ? b->ops->upload_f32(b, dst, src, n) : DERAS_OK;
}

int backend_download_f32(backend_t *b, float *dst, const void *src, size_t n)
{
    CHECK(b && dst && src, "download_f32");
    return n ? b->ops->download_f32(b, dst, src, n) : DERAS_OK;
}

int backend_sync(backend_t *b)
{
    CHECK(b, "sync");
    return b->ops->sync(b);
}

int backend_weight_dtype(const backend_t *b, int stored)
{
    return b && b->ops->keeps && b->ops->keeps(stored) ? stored : b ? b->dtype : DT_F32;
}

bool backend_can_map(const backend_t *b, int dtype, const void *p)
{
    return b && p && b->ops->can_map && b->ops->keeps && b->ops->keeps(dtype) &&
           b->ops->can_map(dtype, p);
}

bool backend_takes_parts(const backend_t *b)
{
    return b && b->ops->matmul_q;
}

size_t backend_weight_bytes(int dtype, int64_t rows, int64_t cols)
{
    const int64_t blk = dtype_block_elems(dtype);
    if (blk <= 0 || rows <= 0 || cols <= 0 || cols % blk)
        return 0;
    return (size_t)rows * (size_t)(cols / blk) * dtype_block_bytes(dtype);
}

static bool kept(const backend_t *b, int dtype)
{
    return dtype == b->dtype || (b->ops->keeps && b->ops->keeps(dtype));
}

/* A descriptor the backend can compute with: its own dtype, or one it keeps; parts only
 * where the backend takes them, adding up to the matrix, each whole blocks. */
static int check_weight(const backend_t *b, const backend_weight *w, const char *op)
{
    if (w->n_parts < 0 || w->n_parts > BACKEND_WEIGHT_MAX_PARTS || (!w->n_parts && !w->data))
        return deras_fail(DERAS_EINVAL, "%s: a weight of %d parts, data %p", op, w->n_parts,
                          w->data);
    if (!w->n_parts) {
        if (!kept(b, w->dtype))
            return deras_fail(DERAS_EUNSUPPORTED, "%s on %s: weights of dtype %s are not kept by "
                              "this backend", op, b->name, dtype_name(w->dtype));
        return DERAS_OK;
    }
    if (!backend_takes_parts(b))
        return deras_fail(DERAS_EUNSUPPORTED, "%s on %s: weights made of parts are not taken by "
                          "this backend", op, b->name);
    int64_t rows = 0;
    for (int i = 0; i < w->n_parts; i++) {
        const backend_weight_part *p = &w->parts[i];
        if (!kept(b, p->dtype))
            return deras_fail(DERAS_EUNSUPPORTED, "%s on %s: part %d of dtype %s is not kept by "
                              "this backend", op, b->name, i, dtype_name(p->dtype));
        const int hd = p->qk_perm_hd;
        if (!p->data || p->rows <= 0 || w->cols % dtype_block_elems(p->dtype) || hd < 0 ||
            hd > BACKEND_WEIGHT_MAX_PERM_HD || hd % 2 || (hd && p->rows % hd))
            return deras_fail(DERAS_EINVAL, "%s: part %d (%d rows of %d columns, %s, data %p, "
                              "qk_perm_hd %d) is not one", op, i, p->rows, w->cols,
                              dtype_name(p->dtype), p->data, hd);
        rows += p->rows;
    }
    if (rows != w->rows)
        return deras_fail(DERAS_EINVAL, "%s: parts of %lld rows for a matrix of %d", op,
                          (long long)rows, w->rows);
    return DERAS_OK;
}

int backend_embed(backend_t *b, void *out, const backend_weight *table, const int32_t *ids, int n)
{
    CHECK(b && out && table && ids && n > 0 && table->rows > 0 && table->cols > 0, "embed");
    int rc = check_weight(b, table, "embed");
    if (rc)
        return rc;
    if (table->n_parts || table->dtype != b->dtype)
        return b->ops->embed_q(b, out, table, ids, n);
    return b->ops->embed(b, out, table->data, ids, n, table->cols, table->rows);
}

int backend_rmsnorm(backend_t *b, void *out, const void *x, const void *w, int n, int d, float eps)
{
    CHECK(b && out && x && w && n > 0 && d > 0 && eps >= 0, "rmsnorm");
    return b->ops->rmsnorm(b, out, x, w, n, d, eps);
}

int backend_add_rmsnorm(backend_t *b, void *out, void *residual, const void *x, const void *w,
                        int n, int d, float eps)
{
    CHECK(b && out && residual && x && w && n > 0 && d > 0 && eps >= 0, "add_rmsnorm");
    return b->ops->add_rmsnorm(b, out, residual, x, w, n, d, eps);
}

int backend_matmul(backend_t *b, void *y, const void *x, const backend_weight *w,
                   const void *bias, int n)
{
    CHECK(b && y && x && w && n > 0 && w->rows > 0 && w->cols > 0 && y != x, "matmul");
    int rc = check_weight(b, w, "matmul");
    if (rc)
        return rc;
    if (w->n_parts || w->dtype != b->dtype)
        return b->ops->matmul_q(b, y, x, w, bias, n);
    return b->ops->matmul(b, y, x, w->data, bias, n, w->rows, w->cols);
}

static const char *const mm_names[] = {"exact", "q8"};

const char *backend_mm_mode_name(int mode)
{
    return mode == BACKEND_MM_EXACT || mode == BACKEND_MM_Q8 ? mm_names[mode] : "unknown";
}

int backend_mm_mode_parse(const char *name, int *mode)
{
    for (int i = 0; name && mode && i <= BACKEND_MM_Q8; i++)
        if (!strcmp(name, mm_names[i])) {
            *mode = i;
            return DERAS_OK;
        }
    return deras_fail(DERAS_EINVAL, "matmul mode '%s': expected exact or q8", name ? name : "");
}

int backend_set_matmul_mode(backend_t *b, int mode)
{
    if (!b || (mode != BACKEND_MM_EXACT && mode != BACKEND_MM_Q8))
        return deras_fail(DERAS_EINVAL, "set_matmul_mode: no backend or unknown mode %d", mode);
    if (b->ops->set_matmul_mode)
        return b->ops->set_matmul_mode(b, mode);
    return mode == BACKEND_MM_EXACT ? DERAS_OK
                                    : deras_fail(DERAS_EUNSUPPORTED, "matmul mode q8: the %s "
                                                 "backend computes exact mode only", b->name);
}

int backend_reserve_matmul(backend_t *b, int max_rows, int max_cols)
{
    CHECK(b && max_rows > 0 && max_cols > 0, "reserve_matmul");
    return b->ops->reserve_matmul ? b->ops->reserve_matmul(b, max_rows, max_cols) : DERAS_OK;
}

size_t backend_pack_bytes(const backend_t *b, const backend_weight *w)
{
    return b && w && b->ops->pack_bytes ? b->ops->pack_bytes(b, w) : 0;
}

int backend_pack(backend_t *b, backend_weight *w, void *buf)
{
    CHECK(b && w && buf, "pack");
    return b->ops->pack ? b->ops->pack(b, w, buf) : DERAS_OK;
}

int backend_gather_rows(backend_t *b, void *out, const void *x, const int32_t *rows, int n, int d)
{
    CHECK(b && out && x && rows && n > 0 && d > 0 && out != x, "gather_rows");
    return b->ops->gather_rows(b, out, x, rows, n, d);
}

int backend_rope_table(backend_t *b, float *cos_sin, const int32_t *positions,
                       const float *inv_freq, int n, int head_dim)
{
    CHECK(b && cos_sin && positions && inv_freq && n > 0 && head_dim > 0 && head_dim % 2 == 0,
          "rope_table");
    return b->ops->rope_table(b, cos_sin, positions, inv_freq, n, head_dim);
}

int backend_rope(backend_t *b, void *x, const float *cos_sin, int n, int n_heads, int head_dim,
                 int row_stride)
{
    CHECK(b && x && cos_sin && n > 0 && n_heads > 0 && head_dim > 0 && head_dim % 2 == 0 &&
              row_stride >= n_heads * head_dim,
          "rope");
    return b->ops->rope(b, x, cos_sin, n, n_heads, head_dim, row_stride);
}

/* A cache dtype the backend keeps. */
static int check_kv(const backend_t *b, int kv_dtype, const char *op)
{
    if (!backend_keeps_kv(b, kv_dtype))
        return deras_fail(DERAS_EUNSUPPORTED, "%s on %s: no KV cache of dtype %s", op, b->name,
                          dtype_name(kv_dtype));
    return DERAS_OK;
}

int backend_kv_write(backend_t *b, void *k_cache, void *v_cache, const void *k, const void *v,
                     int row_stride, const int32_t *slots, int n, int n_kv_heads, int head_dim,
                     int block_size, int kv_dtype)
{
    CHECK(b && k_cache && v_cache && k && v && slots && n > 0 && n_kv_heads > 0 &&
              head_dim > 0 && block_size > 0 && row_stride >= n_kv_heads * head_dim,
          "kv_write");
    int rc = check_kv(b, kv_dtype, "kv_write");
    return rc ? rc : b->ops->kv_write(b, k_cache, v_cache, k, v, row_stride, slots, n, n_kv_heads,
                                      head_dim, block_size, kv_dtype);
}

int backend_attention(backend_t *b, const attn_args *a)
{
    CHECK(b && a && a->out && a->q && a->k_cache && a->v_cache && a->q_start && a->ctx_len &&
              a->block_tables,
          "attention");
    CHECK(a->n_seqs > 0 && a->n_tokens > 0 && a->max_blocks > 0 && a->n_heads > 0 &&
              a->n_kv_heads > 0 && a->head_dim > 0 &&
              a->block_size > 0 && a->window >= 0 && a->q_stride >= a->n_heads * a->head_dim &&
              a->max_q_len > 0 && a->max_ctx_len >= a->max_q_len,
          "attention");
    if (a->q_per_kv == 0)
        CHECK(a->q_head0 == 0 && a->n_heads % a->n_kv_heads == 0, "attention");
    else /* the local KV heads are exactly those the local query heads read */
        CHECK(a->q_head0 >= 0 && a->q_per_kv > 0 &&
                  (a->q_head0 + a->n_heads - 1) / a->q_per_kv - a->q_head0 / a->q_per_kv + 1 ==
                      a->n_kv_heads,
              "attention");
    int rc = check_kv(b, a->kv_dtype, "attention");
    return rc ? rc : b->ops->attention(b, a);
}

int backend_silu_mul(backend_t *b, void *out, const void *gu, int n, int d_ff)
{
    CHECK(b && out && gu && n > 0 && d_ff > 0, "silu_mul");
    return b->ops->silu_mul(b, out, gu, n, d_ff);
}

int backend_copy_blocks(backend_t *b, void *cache, const int32_t *pairs, int n, size_t block_bytes)
{
    CHECK(b && cache && pairs && n > 0 && block_bytes > 0, "copy_blocks");
    return b->ops->copy_blocks(b, cache, pairs, n, block_bytes);
}
