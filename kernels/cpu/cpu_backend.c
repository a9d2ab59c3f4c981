/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_backend.c - the CPU reference backend: f32 activations, OpenBLAS for matrix products
 * on f32 weights, kernels/cpu/qmatmul.h (exact mode) on weights kept in their GGUF format
 * (F16, BF16 and the block formats), wherever they lie: in its memory or in a checkpoint's
 * file mapping (backend_can_map), whole or as parts (backend.h).
 *
 * This is the semantics every other backend is tested against, so it stays simple: plain
 * loops over rows, OpenMP across rows, `omp simd` reductions inside a row. OpenBLAS is the
 * OpenMP build, so its threads and ours are the same pool and never fight over the cores.
 * Memory is ordinary 64-byte aligned host memory; upload/download are memcpy.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "kernels/backend_impl.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/qmatmul.h"

/* OpenBLAS extension, declared by its cblas.h in most builds but not all. */
void openblas_set_num_threads(int num_threads);

typedef struct cpu_backend {
    struct backend base;
    int n_threads;
} cpu_backend;

static void cpu_destroy(backend_t *b)
{
    free(b);
}

/* Each buffer starts with a 64-byte header holding its mapping size. Large buffers (the KV
 * cache, weights) come from anonymous mmap: zero pages are mapped on first touch, so a
 * cache sized for the worst case costs nothing until it fills, and start-up does not
 * spend seconds writing zeros. Small ones come from the heap. */
#define ALLOC_HDR 64
#define ALLOC_MMAP_MIN ((size_t)1 << 20)

static int cpu_alloc(backend_t *b, size_t bytes, void **out)
{
    size_t total = ((bytes + 63) & ~(size_t)63) + ALLOC_HDR;
    void *base;
    if (total >= ALLOC_MMAP_MIN) {
        base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED)
            base = NULL;
    } else if ((base = aligned_alloc(64, total))) {
        memset(base, 0, total);
    }
    if (!base)
        return deras_fail(DERAS_ENOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    *(size_t *)base = total;
    *out = (char *)base + ALLOC_HDR;
    return DERAS_OK;
}

static void cpu_free(backend_t *b, void *buf)
{
    char *base = (char *)buf - ALLOC_HDR;
    size_t total = *(size_t *)base;
    if (total >= ALLOC_MMAP_MIN)
        munmap(base, total);
    else
        free(base);
}

static int cpu_upload(backend_t *b, void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
    return DERAS_OK;
}

static int cpu_upload_f32(backend_t *b, void *dst, const float *src, size_t n)
{
    memmove(dst, src, n * sizeof(float));
    return DERAS_OK;
}

static int cpu_download_f32(backend_t *b, float *dst, const void *src, size_t n)
{
    memmove(dst, src, n * sizeof(float));
    return DERAS_OK;
}

static int cpu_sync(backend_t *b)
{
    return DERAS_OK;
}

static int cpu_embed(backend_t *b, void *out, const void *table, const int32_t *ids, int n, int d,
                     int vocab)
{
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return deras_fail(DERAS_ERANGE, "embed: token id %d at row %d is outside [0, %d)",
                              ids[i], i, vocab);
    float *o = out;
    const float *t = table;
#pragma omp parallel for if (n > 8)
    for (int i = 0; i < n; i++)
        memcpy(o + (size_t)i * d, t + (size_t)ids[i] * d, (size_t)d * sizeof(float));
    return DERAS_OK;
}

static int cpu_rmsnorm(backend_t *b, void *out, const void *x, const void *w, int n, int d,
                       float eps)
{
#pragma omp parallel for if (n > 4)
    for (int i = 0; i < n; i++)
        cpu_rmsnorm_row((float *)out + (size_t)i * d, (const float *)x + (size_t)i * d, w, d, eps);
    return DERAS_OK;
}

static int cpu_add_rmsnorm(backend_t *b, void *out, void *residual, const void *x, const void *w,
                           int n, int d, float eps)
{
#pragma omp parallel for if (n > 4)
    for (int i = 0; i < n; i++) {
        float *r = (float *)residual + (size_t)i * d;
        const float *xi = (const float *)x + (size_t)i * d;
#pragma omp simd
        for (int j = 0; j < d; j++)
            r[j] += xi[j];
        cpu_rmsnorm_row((float *)out + (size_t)i * d, r, w, d, eps);
    }
    return DERAS_OK;
}

/* y (n, n_out) += bias per row. */
static void add_bias(float *y, const float *bias, int n, int n_out)
{
#pragma omp parallel for if (n > 4)
    for (int i = 0; i < n; i++) {
        float *row = y + (size_t)i * n_out;
#pragma omp simd
        for (int j = 0; j < n_out; j++)
            row[j] += bias[j];
    }
}

static int cpu_matmul(backend_t *b, void *y, const void *x, const void *w, const void *bias, int n,
                      int n_out, int n_in)
{
    float *yf = y;
    if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n_out, n_in, 1.0f, w, n_in, x, 1, 0.0f, yf, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n_out, n_in, 1.0f, x, n_in, w, n_in,
                    0.0f, yf, n_out);
    if (bias)
        add_bias(yf, bias, n, n_out);
    return DERAS_OK;
}

/* Every format qmatmul.h computes on stays as stored: F32 goes to OpenBLAS, the others
 * to qmatmul.h (F16 and BF16 included, so a 16-bit checkpoint takes 2 bytes a weight). */
static bool cpu_keeps(int dtype)
{
    return qmm_computes(dtype);
}

/* OpenBLAS reads F32 weights as floats; qmatmul.h reads any address. */
static bool cpu_can_map(int dtype, const void *p)
{
    return dtype != DT_F32 || ((uintptr_t)p & (sizeof(float) - 1)) == 0;
}

/* y (n, rows), rows ldy floats apart, = x (n, cols) W^T for one matrix or part W. */
static int product(const cpu_backend *cb, float *y, int ldy, const float *x, int dtype,
                   const void *w, int rows, int cols, int n)
{
    if (dtype == DT_F32) {
        if (n == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, cols, 1.0f, w, cols, x, 1, 0.0f, y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, cols, 1.0f, x, cols, w,
                        cols, 0.0f, y, ldy);
        return DERAS_OK;
    }
    const qmm_args a = {.y = y, .x = x, .w = w, .dtype = dtype, .n = n, .n_out = rows,
                        .n_in = cols, .mode = QMM_EXACT, .n_threads = cb->n_threads, .ldy = ldy};
    return qmm_matmul(&a);
}

/* A part stored in GGUF's Q/K row order gave y its outputs in that order: put them in the
 * matrix's (stored 2i + j is row j hd/2 + i of each head). O(n rows). */
static void unpermute(float *y, int ldy, int n, int rows, int hd)
{
    const int half = hd / 2;
    float tmp[BACKEND_WEIGHT_MAX_PERM_HD];
    for (int r = 0; r < n; r++)
        for (int h = 0; h < rows; h += hd) {
            float *s = y + (size_t)r * ldy + h;
            memcpy(tmp, s, (size_t)hd * sizeof(float));
            for (int i = 0; i < half; i++) {
                s[i] = tmp[2 * i];
                s[half + i] = tmp[2 * i + 1];
            }
        }
}

/* Weights in a format other than f32, or made of parts: qmatmul.h in exact mode (no
 * scratch), on the backend's threads; each part is one product into its columns. */
static int cpu_matmul_q(backend_t *b, void *y, const void *x, const backend_weight *w,
                        const void *bias, int n)
{
    const cpu_backend *cb = (const cpu_backend *)b;
    int rc = DERAS_OK;
    if (!w->n_parts)
        rc = product(cb, y, w->rows, x, w->dtype, w->data, w->rows, w->cols, n);
    for (int i = 0, off = 0; !rc && i < w->n_parts; off += w->parts[i++].rows) {
        const backend_weight_part *p = &w->parts[i];
        float *yp = (float *)y + off;
        if (!(rc = product(cb, yp, w->rows, x, p->dtype, p->data, p->rows, w->cols, n)) &&
            p->qk_perm_hd)
            unpermute(yp, w->rows, n, p->rows, p->qk_perm_hd);
    }
    if (!rc && bias)
        add_bias(y, bias, n, w->rows);
    return rc;
}

static int cpu_embed_q(backend_t *b, void *out, const backend_weight *t, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->rows)
            return deras_fail(DERAS_ERANGE, "embed: token id %d at row %d is outside [0, %d)",
                              ids[i], i, t->rows);
    for (int i = 0; i < n; i++) {
        backend_weight_part p = {t->dtype, t->rows, t->data, 0};
        int64_t row = ids[i];
        for (int k = 0; k < t->n_parts; k++) { /* the part holding the row, and its index there */
            p = t->parts[k];
            if (row < p.rows)
                break;
            row -= p.rows;
        }
        if (p.qk_perm_hd) {
            const int64_t hd = p.qk_perm_hd, half = hd / 2, w = row % hd;
            row = row - w + 2 * (w % half) + w / half;
        }
        int rc = qmm_embed_row((float *)out + (size_t)i * t->cols, p.data, p.dtype, p.rows,
                               t->cols, row);
        if (rc)
            return rc;
    }
    return DERAS_OK;
}

static int cpu_gather_rows(backend_t *b, void *out, const void *x, const int32_t *rows, int n,
                           int d)
{
    for (int i = 0; i < n; i++)
        memcpy((float *)out + (size_t)i * d, (const float *)x + (size_t)rows[i] * d,
               (size_t)d * sizeof(float));
    return DERAS_OK;
}

static int cpu_rope_table(backend_t *b, float *cos_sin, const int32_t *positions,
                          const float *inv_freq, int n, int head_dim)
{
    int half = head_dim / 2;
#pragma omp parallel for if (n > 16)
    for (int i = 0; i < n; i++) {
        float *cs = cos_sin + (size_t)i * head_dim;
        float pos = (float)positions[i];
        for (int j = 0; j < half; j++) {
            /* The angle is rounded to f32 before cos/sin, as Hugging Face computes it. */
            float angle = pos * inv_freq[j];
            cs[j] = cosf(angle);
            cs[half + j] = sinf(angle);
        }
    }
    return DERAS_OK;
}

static int cpu_rope(backend_t *b, void *x, const float *cos_sin, int n, int n_heads, int head_dim,
                    int row_stride)
{
    int half = head_dim / 2;
#pragma omp parallel for if (n > 4)
    for (int i = 0; i < n; i++) {
        const float *c = cos_sin + (size_t)i * head_dim;
        const float *s = c + half;
        for (int h = 0; h < n_heads; h++) {
            float *v = (float *)x + (size_t)i * row_stride + (size_t)h * head_dim;
#pragma omp simd
            for (int j = 0; j < half; j++) {
                float x1 = v[j], x2 = v[j + half];
                v[j] = x1 * c[j] - x2 * s[j];
                v[j + half] = x2 * c[j] + x1 * s[j];
            }
        }
    }
    return DERAS_OK;
}

static int cpu_silu_mul(backend_t *b, void *out, const void *gu, int n, int d_ff)
{
#pragma omp parallel for if (n > 4)
    for (int i = 0; i < n; i++) {
        const float *g = (const float *)gu + (size_t)i * 2 * d_ff;
        const float *u = g + d_ff;
        float *o = (float *)out + (size_t)i * d_ff;
        for (int j = 0; j < d_ff; j++)
            o[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
    return DERAS_OK;
}

static const struct backend_ops cpu_ops = {
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .upload_f32 = cpu_upload_f32,
    .download_f32 = cpu_download_f32,
    .sync = cpu_sync,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .matmul = cpu_matmul,
    .gather_rows = cpu_gather_rows,
    .rope_table = cpu_rope_table,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .copy_blocks = cpu_copy_blocks,
    .keeps_kv = cpu_keeps_kv,
    .keeps = cpu_keeps,
    .matmul_q = cpu_matmul_q,
    .embed_q = cpu_embed_q,
    .can_map = cpu_can_map,
};

int backend_cpu_new(int n_threads, backend_t **out)
{
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return deras_fail(DERAS_ENOMEM, "cpu backend: out of memory");
    if (n_threads <= 0)
        n_threads = omp_get_num_procs();
    cb->n_threads = n_threads;
    omp_set_num_threads(n_threads);
    openblas_set_num_threads(n_threads);
    cb->base.ops = &cpu_ops;
    cb->base.elem_size = sizeof(float);
    strcpy(cb->base.name, "cpu");
    *out = &cb->base;
    return DERAS_OK;
}
