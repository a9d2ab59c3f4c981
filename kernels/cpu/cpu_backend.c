/* SPDX-License-Identifier: Apache-2.0 */
/* cpu_backend.c - the CPU reference backend: f32 activations, kernels/cpu/qmatmul.h for
 * every matrix product, in the backend's matmul mode: f32 weights and weights kept in their
 * GGUF format (F16, BF16 and the block formats), wherever they lie: in its memory or in a
 * checkpoint's file mapping (backend_can_map), whole or as parts (backend.h).
 *
 * This is the semantics every other backend is tested against, so it stays simple: plain
 * loops over rows, `omp simd` reductions inside a row. Threads: one persistent pool per
 * backend (kernels/cpu/cpu_pool.h) runs the matrix products and, above a few rows, the
 * row-wise ops; a decode step's ~200 small ops each cost one pool job instead of an OpenMP
 * region (whose join waits for every thread to be scheduled). Memory is ordinary 64-byte
 * aligned host memory; upload/download are memcpy.
 */
#ifdef __AVX2__
#include <immintrin.h>
#endif
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
#include "kernels/cpu/cpu_pool.h"
#include "kernels/cpu/qmatmul.h"

/* OpenBLAS (the benchmarks' sgemm floor shares the backend's thread count). */
void openblas_set_num_threads(int num_threads);

typedef struct cpu_backend {
    struct backend base;
    int n_threads;
    cpu_pool_t *pool;
    int mm_mode;          /* enum backend_mm_mode */
    void *scratch;        /* Q8 mode's quantized activations, grown to the largest call */
    size_t scratch_bytes;
} cpu_backend;

static void cpu_destroy(backend_t *b)
{
    cpu_backend *cb = (cpu_backend *)b;
    cpu_pool_destroy(&cb->pool);
    free(cb->scratch);
    free(b);
}

static int cpu_set_matmul_mode(backend_t *b, int mode)
{
    ((cpu_backend *)b)->mm_mode = mode;
    return DERAS_OK;
}

cpu_pool_t *cpu_backend_pool(backend_t *b)
{
    return ((cpu_backend *)b)->pool;
}

/* Row-wise ops: fn(args, i) for each row i, in pool items of ROWS_PER_ITEM rows, on the
 * calling thread alone up to `serial` rows (a job costs more than a few rows). */
#define ROWS_PER_ITEM 4
typedef void (*row_fn)(const void *args, int i);
typedef struct rows_job {
    row_fn fn;
    const void *args;
    int n;
} rows_job;

static void rows_item(void *ctx, int it)
{
    const rows_job *j = ctx;
    const int i1 = (it + 1) * ROWS_PER_ITEM < j->n ? (it + 1) * ROWS_PER_ITEM : j->n;
    for (int i = it * ROWS_PER_ITEM; i < i1; i++)
        j->fn(j->args, i);
}

static void for_rows(backend_t *b, int n, int serial, row_fn fn, const void *args)
{
    rows_job j = {fn, args, n};
    cpu_pool_run(n > serial ? ((cpu_backend *)b)->pool : NULL,
                 (n + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM, 0, rows_item, &j);
}

/* Each buffer follows a 64-byte header saying how it was made. Large buffers (the KV
 * cache, weights) come from anonymous mmap: zero pages are mapped on first touch, so a
 * cache sized for the worst case costs nothing until it fills, and start-up does not
 * spend seconds writing zeros. Their data starts on a 2 MiB boundary (the mapping has
 * that much slack in front, of which only the header's page is ever touched), so that
 * weights advised into huge pages (cpu_pack) get them from their first byte. Small ones
 * come from the heap. */
#define ALLOC_HDR 64
#define ALLOC_MMAP_MIN ((size_t)1 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

typedef struct alloc_hdr {
    void *map;   /* the mapping, or NULL: the heap block at the header */
    size_t span; /* the mapping's bytes */
} alloc_hdr;

static int cpu_alloc(backend_t *b, size_t bytes, void **out)
{
    const size_t data = (bytes + 63) & ~(size_t)63;
    char *at = NULL;
    alloc_hdr h = {0};
    if (data + ALLOC_HDR >= ALLOC_MMAP_MIN) {
        h.span = data + ALLOC_HDR + HUGE_PAGE;
        h.map = mmap(NULL, h.span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (h.map != MAP_FAILED)
            at = (char *)(((uintptr_t)h.map + ALLOC_HDR + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    } else if ((at = aligned_alloc(64, data + ALLOC_HDR))) {
        memset(at, 0, data + ALLOC_HDR);
        at += ALLOC_HDR;
    }
    if (!at)
        return deras_fail(DERAS_ENOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    memcpy(at - ALLOC_HDR, &h, sizeof h);
    *out = at;
    return DERAS_OK;
}

static void cpu_free(backend_t *b, void *buf)
{
    alloc_hdr h;
    memcpy(&h, (char *)buf - ALLOC_HDR, sizeof h);
    if (h.map)
        munmap(h.map, h.span);
    else
        free((char *)buf - ALLOC_HDR);
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
    for (int i = 0; i < n; i++)
        memcpy(o + (size_t)i * d, t + (size_t)ids[i] * d, (size_t)d * sizeof(float));
    return DERAS_OK;
}

typedef struct norm_args {
    float *out, *residual;
    const float *x, *w;
    int d;
    float eps;
} norm_args;

static void rmsnorm_row(const void *args, int i)
{
    const norm_args *a = args;
    cpu_rmsnorm_row(a->out + (size_t)i * a->d, a->x + (size_t)i * a->d, a->w, a->d, a->eps);
}

static void add_rmsnorm_row(const void *args, int i)
{
    const norm_args *a = args;
    float *r = a->residual + (size_t)i * a->d;
    const float *xi = a->x + (size_t)i * a->d;
#pragma omp simd
    for (int j = 0; j < a->d; j++)
        r[j] += xi[j];
    cpu_rmsnorm_row(a->out + (size_t)i * a->d, r, a->w, a->d, a->eps);
}

static int cpu_rmsnorm(backend_t *b, void *out, const void *x, const void *w, int n, int d,
                       float eps)
{
    const norm_args a = {out, NULL, x, w, d, eps};
    for_rows(b, n, 4, rmsnorm_row, &a);
    return DERAS_OK;
}

static int cpu_add_rmsnorm(backend_t *b, void *out, void *residual, const void *x, const void *w,
                           int n, int d, float eps)
{
    const norm_args a = {out, residual, x, w, d, eps};
    for_rows(b, n, 4, add_rmsnorm_row, &a);
    return DERAS_OK;
}

/* y (n, n_out) += bias per row. */
static void add_bias(float *y, const float *bias, int n, int n_out)
{
    for (int i = 0; i < n; i++) {
        float *row = y + (size_t)i * n_out;
#pragma omp simd
        for (int j = 0; j < n_out; j++)
            row[j] += bias[j];
    }
}

/* Every format qmatmul.h computes on stays as stored (F16 and BF16 included, so a 16-bit
 * checkpoint takes 2 bytes a weight). */
static bool cpu_keeps(int dtype)
{
    return qmm_computes(dtype);
}

/* The F32 kernels read weights as floats (4-byte aligned); the other formats any address. */
static bool cpu_can_map(int dtype, const void *p)
{
    return dtype != DT_F32 || ((uintptr_t)p & (sizeof(float) - 1)) == 0;
}

/* The Q8 mode's scratch holds at least `need` bytes (64-byte aligned). */
static int scratch_at_least(cpu_backend *cb, size_t need)
{
    if (need <= cb->scratch_bytes)
        return DERAS_OK;
    free(cb->scratch);
    cb->scratch_bytes = 0;
    if (!(cb->scratch = aligned_alloc(64, (need + 63) & ~(size_t)63)))
        return deras_fail(DERAS_ENOMEM, "cpu matmul: %zu bytes of scratch", need);
    cb->scratch_bytes = need;
    return DERAS_OK;
}

/* The largest Q8 scratch of any block format for rows x cols (rounded up to whole blocks
 * of 256: an upper bound for every layout). */
static int cpu_reserve_matmul(backend_t *b, int max_rows, int max_cols)
{
    cpu_backend *cb = (cpu_backend *)b;
    if (cb->mm_mode != BACKEND_MM_Q8)
        return DERAS_OK;
    const int cols = (max_cols + 255) / 256 * 256, dts[] = {DT_BF16, DT_Q8_0, DT_Q4_K};
    size_t most = 0, s;
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        int rc = qmm_scratch_bytes(dts[i], QMM_Q8, max_rows, cols, &s);
        if (rc)
            return rc;
        most = s > most ? s : most;
    }
    return scratch_at_least(cb, most);
}

/* y (n, rows), rows ldy floats apart, = x (n, cols) W^T for one matrix or part W: qmatmul.h
 * in the backend's mode (F32 exact in both), on the backend's pool. The Q8 mode's scratch
 * is reserved at load (backend_reserve_matmul) and grows only for a call beyond it. */
static int product(cpu_backend *cb, float *y, int ldy, const float *x, int dtype, const void *w,
                   const void *packed, int rows, int cols, int n)
{
    const int mode = dtype != DT_F32 && cb->mm_mode == BACKEND_MM_Q8 ? QMM_Q8 : QMM_EXACT;
    size_t need;
    int rc = qmm_scratch_bytes(dtype, mode, n, cols, &need);
    if (rc || (rc = scratch_at_least(cb, need)))
        return rc;
    const int use_packed = packed && mode == QMM_Q8;
    const qmm_args a = {.y = y, .x = x, .w = use_packed ? packed : w, .dtype = dtype, .n = n,
                        .n_out = rows, .n_in = cols, .mode = mode,
                        .scratch = need ? cb->scratch : NULL,
                        .scratch_bytes = need ? cb->scratch_bytes : 0, .ldy = ldy,
                        .pool = cb->pool, .packed = use_packed};
    return qmm_matmul(&a);
}

/* Packing (backend_pack): in q8 mode, each packable matrix (w itself or each part) gets
 * qmatmul.h's packed copy, one after another in buf. */
static size_t pack_size(int dtype, int rows, int cols)
{
    size_t b = 0;
    return qmm_packs(dtype) && !qmm_pack_bytes(dtype, rows, cols, &b) ? (b + 63) & ~(size_t)63 : 0;
}

static size_t cpu_pack_bytes(const backend_t *b, const backend_weight *w)
{
    if (((const cpu_backend *)b)->mm_mode != BACKEND_MM_Q8)
        return 0;
    size_t total = w->n_parts ? 0 : pack_size(w->dtype, w->rows, w->cols);
    for (int i = 0; i < w->n_parts; i++)
        total += pack_size(w->parts[i].dtype, w->parts[i].rows, w->cols);
    return total;
}

/* Ask for huge pages under [buf, buf + bytes) (the whole pages inside it) before they are
 * first touched. Weights are read whole every step: with 4 KiB pages a large model's
 * decode misses the TLB on every page of every matrix, and its load takes a fault per
 * page; where the OS grants 2 MiB pages (transparent huge pages, "madvise" or "always"),
 * both shrink (Llama-3-8B-shaped Q4_K_M, 2 threads: load 3.8-4.3 s instead of 5.4-6.9 s,
 * decode a few percent faster; docs/benchmarks.md). Elsewhere the call fails and nothing
 * changes. */
static void advise_huge(void *buf, size_t bytes)
{
    const uintptr_t page = 4096, lo = ((uintptr_t)buf + page - 1) & ~(page - 1),
                    hi = ((uintptr_t)buf + bytes) & ~(page - 1);
    if (hi >= lo + HUGE_PAGE)
        (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
}

static int cpu_pack(backend_t *b, backend_weight *w, void *buf)
{
    cpu_backend *cb = (cpu_backend *)b;
    if (cb->mm_mode != BACKEND_MM_Q8)
        return DERAS_OK;
    advise_huge(buf, cpu_pack_bytes(b, w));
    char *at = buf;
    int rc = DERAS_OK;
    if (!w->n_parts && pack_size(w->dtype, w->rows, w->cols)) {
        if (!(rc = qmm_pack(at, w->data, w->dtype, w->rows, w->cols, cb->pool)))
            w->packed = at;
    }
    for (int i = 0; !rc && i < w->n_parts; i++) {
        backend_weight_part *p = &w->parts[i];
        const size_t sz = pack_size(p->dtype, p->rows, w->cols);
        if (!sz)
            continue;
        if (!(rc = qmm_pack(at, p->data, p->dtype, p->rows, w->cols, cb->pool)))
            p->packed = at;
        at += sz;
    }
    return rc;
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

/* f32 weights: qmatmul.h's F32 kernels (exact in both modes), not OpenBLAS: one fixed
 * summation order per row whatever n is (sgemv and sgemm add in different orders, so a
 * row's result depended on its batch) and the backend's pool instead of OpenMP threads. */
static int cpu_matmul(backend_t *b, void *y, const void *x, const void *w, const void *bias, int n,
                      int n_out, int n_in)
{
    int rc = product((cpu_backend *)b, y, n_out, x, DT_F32, w, NULL, n_out, n_in, n);
    if (!rc && bias)
        add_bias(y, bias, n, n_out);
    return rc;
}

/* Weights in a format other than f32, or made of parts: one product per part into its
 * columns. */
static int cpu_matmul_q(backend_t *b, void *y, const void *x, const backend_weight *w,
                        const void *bias, int n)
{
    cpu_backend *cb = (cpu_backend *)b;
    int rc = DERAS_OK;
    if (!w->n_parts)
        rc = product(cb, y, w->rows, x, w->dtype, w->data, w->packed, w->rows, w->cols, n);
    for (int i = 0, off = 0; !rc && i < w->n_parts; off += w->parts[i++].rows) {
        const backend_weight_part *p = &w->parts[i];
        float *yp = (float *)y + off;
        if (!(rc = product(cb, yp, w->rows, x, p->dtype, p->data, p->packed, p->rows, w->cols, n)) &&
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
        backend_weight_part p = {t->dtype, t->rows, t->data, 0, NULL};
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

typedef struct rope_args {
    float *x, *cos_sin;
    const int32_t *positions;
    const float *inv_freq;
    int n_heads, head_dim, row_stride;
} rope_args;

static void rope_table_row(const void *args, int i)
{
    const rope_args *a = args;
    const int half = a->head_dim / 2;
    float *cs = a->cos_sin + (size_t)i * a->head_dim;
    const float pos = (float)a->positions[i];
    for (int j = 0; j < half; j++) {
        /* The angle is rounded to f32 before cos/sin, as Hugging Face computes it. */
        float angle = pos * a->inv_freq[j];
        cs[j] = cosf(angle);
        cs[half + j] = sinf(angle);
    }
}

static int cpu_rope_table(backend_t *b, float *cos_sin, const int32_t *positions,
                          const float *inv_freq, int n, int head_dim)
{
    const rope_args a = {NULL, cos_sin, positions, inv_freq, 0, head_dim, 0};
    for_rows(b, n, 16, rope_table_row, &a);
    return DERAS_OK;
}

static void rope_row(const void *args, int i)
{
    const rope_args *a = args;
    const int half = a->head_dim / 2;
    const float *c = a->cos_sin + (size_t)i * a->head_dim;
    const float *s = c + half;
    for (int h = 0; h < a->n_heads; h++) {
        float *v = a->x + (size_t)i * a->row_stride + (size_t)h * a->head_dim;
#pragma omp simd
        for (int j = 0; j < half; j++) {
            float x1 = v[j], x2 = v[j + half];
            v[j] = x1 * c[j] - x2 * s[j];
            v[j + half] = x2 * c[j] + x1 * s[j];
        }
    }
}

static int cpu_rope(backend_t *b, void *x, const float *cos_sin, int n, int n_heads, int head_dim,
                    int row_stride)
{
    const rope_args a = {x, (float *)cos_sin, NULL, NULL, n_heads, head_dim, row_stride};
    for_rows(b, n, 4, rope_row, &a);
    return DERAS_OK;
}

typedef struct silu_args {
    float *out;
    const float *gu;
    int d_ff;
} silu_args;

static void silu_row(const void *args, int i)
{
    const silu_args *a = args;
    const int d_ff = a->d_ff;
    const float *g = a->gu + (size_t)i * 2 * d_ff;
    const float *u = g + d_ff;
    float *o = a->out + (size_t)i * d_ff;
    int j = 0;
#ifdef __AVX2__ /* the build's baseline (x86-64-v3): cpu_expf's steps, eight lanes at once */
    const __m256 lo = _mm256_set1_ps(CPU_EXP_LO), hi = _mm256_set1_ps(CPU_EXP_HI);
    const __m256 rnd = _mm256_set1_ps(CPU_EXP_ROUND), one = _mm256_set1_ps(1.0f);
    for (; j + 8 <= d_ff; j += 8) {
        const __m256 gv = _mm256_loadu_ps(g + j);
        __m256 x = _mm256_max_ps(lo, _mm256_xor_ps(gv, _mm256_set1_ps(-0.0f)));
        x = _mm256_min_ps(hi, x);
        const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(CPU_EXP_LOG2E), rnd), rnd);
        const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(CPU_EXP_LN2_LO),
                                          _mm256_fnmadd_ps(n, _mm256_set1_ps(CPU_EXP_LN2_HI), x));
        __m256 p = _mm256_set1_ps(cpu_exp_poly[0]);
        for (int k = 1; k < 6; k++)
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(cpu_exp_poly[k]));
        p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), one);
        const __m256i e = _mm256_slli_epi32(
            _mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
        const __m256 ex = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
        _mm256_storeu_ps(o + j, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, ex)),
                                              _mm256_loadu_ps(u + j)));
    }
#endif
    for (; j < d_ff; j++)
        o[j] = g[j] / (1.0f + cpu_expf(-g[j])) * u[j];
}

static int cpu_silu_mul(backend_t *b, void *out, const void *gu, int n, int d_ff)
{
    const silu_args a = {out, gu, d_ff};
    for_rows(b, n, 4, silu_row, &a);
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
    .set_matmul_mode = cpu_set_matmul_mode,
    .reserve_matmul = cpu_reserve_matmul,
    .pack_bytes = cpu_pack_bytes,
    .pack = cpu_pack,
};

int backend_cpu_new(int n_threads, backend_t **out)
{
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb)
        return deras_fail(DERAS_ENOMEM, "cpu backend: out of memory");
    if (n_threads <= 0)
        n_threads = omp_get_num_procs();
    cb->n_threads = n_threads;
    int rc = cpu_pool_new(n_threads, &cb->pool);
    if (rc) {
        free(cb);
        return rc;
    }
    /* the backend's ops use none of these; a benchmark's sgemm floor (bench/) does */
    omp_set_num_threads(n_threads);
    openblas_set_num_threads(n_threads);
    cb->base.ops = &cpu_ops;
    cb->base.elem_size = sizeof(float);
    strcpy(cb->base.name, "cpu");
    *out = &cb->base;
    return DERAS_OK;
}
