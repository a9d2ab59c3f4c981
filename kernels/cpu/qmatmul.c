/* SPDX-License-Identifier: Apache-2.0 */
/* qmatmul.c - the driver of qmatmul.h: argument checks, the Q8 activations, the tiling and
 * the threads.
 *
 * At most two jobs of the caller's cpu_pool per call. In Q8 mode the first quantizes x
 * (units of 256 elements; a few rows are converted on the calling thread instead, cheaper
 * than a job), then the threads take chunks of weight rows dynamically (a thread that is
 * preempted on a shared machine delays only the chunk it holds, and one that has not
 * started yet delays nothing). A chunk holds about CHUNK_BYTES of weights, so within it every tile of
 * activation rows re-reads the weights from L2, not from memory, and there are at least
 * four chunks per thread. Within a chunk: for each tile of rt activation rows (8, 4, 2 or
 * 1, as many as are left, the last tile padded with a repeated row), the kernel of that
 * level walks the chunk ot weight rows at a time, asking for short rows ahead of use
 * (software prefetch: the hardware prefetcher loses track of many short streams). Small
 * products run on the calling thread alone: below MIN_WORK multiply-adds per thread a
 * job would cost more than it saves. Packed weights (qmm_pack) are walked the same way a
 * strip of 16 rows at a time, each strip one contiguous stream (no software prefetch).
 * Cost per call beyond the arithmetic: the pool job (bench/bench_qmatmul.c measures it)
 * and two atomics per chunk.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "kernels/cpu/cpu_pool.h"
#include "kernels/cpu/qmatmul.h"
#include "kernels/cpu/qmm_impl.h"

#define CHUNK_BYTES (128 * 1024)
#define PANEL_BYTES (192 * 1024) /* f32 weights decoded per chunk in panel mode (in L2) */
#define PANEL_MIN_ROWS 16        /* activation rows from which panel mode pays */
#define CHUNKS_PER_THREAD 4
#define MIN_WORK (64 * 1024)
#define UNIT 256 /* elements per activation conversion unit */
#define CONVERT_HERE 4096 /* activations converted before the parallel region */
#define PREFETCH 4096     /* bytes of weights asked for ahead of the tile */
#define PREFETCH_ROW 4096 /* longer rows: the hardware prefetcher does it */

/* Bytes of one row of activations in layout `act`, rounded up to 64. */
static size_t act_row_bytes(int act, int n_in)
{
    size_t b = 0;
    switch (act) {
    case QA_BF16: b = (size_t)n_in * sizeof(uint16_t); break;
    case QA_Q8_32: b = (size_t)(n_in / 32) * sizeof(qmm_q8_32); break;
    case QA_Q8_256: b = (size_t)(n_in / 256) * sizeof(qmm_q8_256); break;
    default: break;
    }
    return (b + 63) & ~(size_t)63;
}

static int check_shape(const char *who, int dtype, int mode, int n, int n_out, int n_in)
{
    if (qmm_fmt_of(dtype) < 0)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: no kernel for dtype %s", who,
                          dtype_name(dtype));
    if (mode != QMM_EXACT && mode != QMM_Q8)
        return deras_fail(DERAS_EINVAL, "%s: unknown mode %d", who, mode);
    if (n <= 0 || n_out <= 0 || n_in <= 0)
        return deras_fail(DERAS_EINVAL, "%s: sizes must be positive (n %d, n_out %d, n_in %d)",
                          who, n, n_out, n_in);
    if (n_in % dtype_block_elems(dtype))
        return deras_fail(DERAS_EFORMAT, "%s: n_in %d is not a whole number of %s blocks of %d",
                          who, n_in, dtype_name(dtype), dtype_block_elems(dtype));
    return DERAS_OK;
}

int qmm_scratch_bytes(int dtype, int mode, int n, int n_in, size_t *out)
{
    int rc = check_shape("qmm_scratch_bytes", dtype, mode, n, 1, n_in);
    if (rc)
        return rc;
    if (!out)
        return deras_fail(DERAS_EINVAL, "qmm_scratch_bytes: out is NULL");
    size_t row = act_row_bytes(qmm_act_of(qmm_fmt_of(dtype), mode == QMM_Q8), n_in);
    if (row && (size_t)n > SIZE_MAX / row)
        return deras_fail(DERAS_ERANGE, "qmm_scratch_bytes: %d rows of %zu bytes overflow", n,
                          row);
    *out = row * (size_t)n;
    return DERAS_OK;
}

/* Row r's unit u of the activations (UNIT elements, fewer at the end of the row). */
static void convert_unit(const qmm_act_fns *f, int act, const float *x, uint8_t *xa,
                         size_t xa_row, int n_in, int r, int u)
{
    const int e0 = u * UNIT, len = n_in - e0 < UNIT ? n_in - e0 : UNIT;
    const float *src = x + (size_t)r * n_in + e0;
    uint8_t *dst = xa + (size_t)r * xa_row;
    if (act == QA_BF16)
        f->bf16(src, (uint16_t *)dst + e0, len);
    else if (act == QA_Q8_32)
        f->q8_32(src, (qmm_q8_32 *)dst + e0 / 32, len / 32);
    else
        f->q8_256(src, (qmm_q8_256 *)dst + e0 / 256, 1);
}

/* One call's plan. */
typedef struct job {
    const qmm_args *a;
    const qmm_kern *tab; /* the kernels of the format and mode, per level */
    const qmm_kern *f32; /* panel mode: the F32 kernels the decoded panel goes through; NULL: off */
    qmm_decode_fn decode; /* panel mode: the path's decoder */
    const uint8_t *xa;   /* activation rows (x itself, or the scratch) */
    size_t xa_row, w_row;
    int rows;            /* weight rows per chunk */
    size_t ldy;          /* y's row stride */
    const qmm_skern *stab; /* packed weights: the strip kernels per level; NULL: not packed */
} job;

/* The tiles of activation rows, for both kinds of kernel table: the level to try first
 * for the `left` rows still to do (tiles of 8, 4, 2, 1; 3 rows take a 4-row tile), the
 * caller stepping down to a level its table has; then x[0 .. rt) point at the tile's rows
 * from r0, the last of its nr valid rows repeated where the matrix runs out. */
static int first_level(int left)
{
    return left >= 8 ? 3 : left >= 3 ? 2 : left - 1;
}

static void tile_rows(const job *j, int r0, int nr, int rt, const void **x)
{
    for (int r = 0; r < rt; r++)
        x[r] = j->xa + (size_t)(r0 + (r < nr ? r : nr - 1)) * j->xa_row;
}

/* Packed weights (qmm_impl.h): the strips of weight rows [o0, o1) (o0 a multiple of
 * QMM_STRIP) against every activation row, a tile of activation rows at a time, each tile
 * walking the chunk's strips (which stay in L2 between tiles). */
static void strips(const job *j, int o0, int o1)
{
    const qmm_args *a = j->a;
    const int nb = a->n_in / dtype_block_elems(a->dtype);
    const size_t sbytes = j->w_row * QMM_STRIP; /* one strip */
    float res[QMM_STRIP * 8];
    const void *xp[8];
    for (int r0 = 0; r0 < a->n;) {
        const int left = a->n - r0;
        int level = first_level(left);
        while (!j->stab[level].fn)
            level--;
        const qmm_skern *k = &j->stab[level];
        const int nr = k->rt < left ? k->rt : left;
        tile_rows(j, r0, nr, k->rt, xp);
        for (int o = o0; o < o1; o += QMM_STRIP) {
            k->fn((const uint8_t *)a->w + (size_t)(o / QMM_STRIP) * sbytes, xp, nb, res);
            const int no = o1 - o < QMM_STRIP ? o1 - o : QMM_STRIP;
            for (int r = 0; r < nr; r++)
                memcpy(a->y + (size_t)(r0 + r) * j->ldy + o, res + QMM_STRIP * r,
                       (size_t)no * sizeof(float));
        }
        r0 += nr;
    }
}

/* Weight rows [o0, o1), row o at w + (o - o0) * w_row, against every activation row with
 * the kernels tab; prefetch: ask for the weights ahead (they come from memory). */
static void tiles(const job *j, const qmm_kern *tab, const uint8_t *w, size_t w_row, int o0,
                  int o1, bool prefetch)
{
    const qmm_args *a = j->a;
    qmm_tile t;
    t.n_in = a->n_in;
    for (int r0 = 0; r0 < a->n;) {
        const int left = a->n - r0;
        int level = first_level(left);
        while (!tab[level].fn)
            level--;
        const qmm_kern *k = &tab[level];
        const int nr = k->rt < left ? k->rt : left;
        t.ot = k->ot;
        t.rt = k->rt;
        tile_rows(j, r0, nr, k->rt, t.x);
        const uint8_t *pf = w;
        const uint8_t *const end = w + (size_t)(a->n_out - o0) * w_row; /* the weights' end */
        for (int o = o0; o < o1; o += k->ot) {
            const int no = k->ot < o1 - o ? k->ot : o1 - o;
            for (int i = 0; i < k->ot; i++)
                t.w[i] = w + (size_t)(o - o0 + (i < no ? i : no - 1)) * w_row;
            /* the tile's rows are PREFETCH bytes behind what has been asked for */
            const uint8_t *want = t.w[0] + (size_t)no * w_row + PREFETCH;
            for (want = want < end ? want : end; prefetch && w_row <= PREFETCH_ROW && pf < want;
                 pf += 64)
                __builtin_prefetch(pf, 0, 3);
            k->fn(&t);
            for (int r = 0; r < nr; r++)
                for (int i = 0; i < no; i++)
                    a->y[(size_t)(r0 + r) * j->ldy + o + i] = t.res[i][r];
        }
        r0 += nr;
    }
}

/* This thread's panel buffer of at least `bytes`, 64-byte aligned, kept for the thread's
 * life (grown, never shrunk; freed at thread exit); NULL when out of memory. */
static pthread_key_t panel_key;
static pthread_once_t panel_once = PTHREAD_ONCE_INIT;

typedef struct panel_buf {
    size_t bytes;
    float *f;
} panel_buf;

static void panel_free(void *v)
{
    panel_buf *p = v;
    free(p->f);
    free(p);
}

static void panel_init(void)
{
    pthread_key_create(&panel_key, panel_free);
}

static float *panel_get(size_t bytes)
{
    pthread_once(&panel_once, panel_init);
    panel_buf *p = pthread_getspecific(panel_key);
    if (!p) {
        if (!(p = calloc(1, sizeof *p)))
            return NULL;
        pthread_setspecific(panel_key, p);
    }
    if (p->bytes < bytes) {
        free(p->f);
        p->bytes = 0;
        if (!(p->f = aligned_alloc(64, (bytes + 63) & ~(size_t)63)))
            return NULL;
        p->bytes = bytes;
    }
    return p->f;
}

/* Chunk c of weight rows against every activation row. Panel mode (exact mode, many
 * rows, a path with a decoder: AVX-512; AVX2's F32 tiles are too small to gain from it):
 * the chunk's weights are first decoded to f32 (the values the quantized kernels compute
 * in registers, bit for bit) and then go through the path's F32 kernels, which add in the
 * same order, so a row's result is the same either way. */
static void run_chunk(const job *j, int c)
{
    const qmm_args *a = j->a;
    const int o0 = c * j->rows, o1 = a->n_out - o0 < j->rows ? a->n_out : o0 + j->rows;
    const uint8_t *w = (const uint8_t *)a->w + (size_t)o0 * j->w_row;
    float *panel = j->f32 ? panel_get((size_t)(o1 - o0) * a->n_in * sizeof(float)) : NULL;
    if (!panel) { /* not panel mode, or no memory for it: the same results, slower */
        tiles(j, j->tab, w, j->w_row, o0, o1, true);
        return;
    }
    const int64_t n = (int64_t)(o1 - o0) * a->n_in;
    j->decode(qmm_fmt_of(a->dtype), w, panel, (int)(n / dtype_block_elems(a->dtype)));
    tiles(j, j->f32, (const uint8_t *)panel, (size_t)a->n_in * sizeof(float), o0, o1, false);
}

/* Pool items: conversion units, then chunks. */
typedef struct conv_job {
    const qmm_args *a;
    const qmm_act_fns *f;
    int act, units;
    size_t xa_row;
} conv_job;

static void convert_item(void *ctx, int i)
{
    const conv_job *c = ctx;
    convert_unit(c->f, c->act, c->a->x, c->a->scratch, c->xa_row, c->a->n_in, i / c->units,
                 i % c->units);
}

static void chunk_item(void *ctx, int c)
{
    const job *j = ctx;
    if (j->stab) {
        const int o0 = c * j->rows;
        strips(j, o0, j->a->n_out - o0 < j->rows ? j->a->n_out : o0 + j->rows);
        return;
    }
    run_chunk(ctx, c);
}

int qmm_matmul(const qmm_args *a)
{
    if (!a)
        return deras_fail(DERAS_EINVAL, "qmm_matmul: NULL arguments");
    int rc = check_shape("qmm_matmul", a->dtype, a->mode, a->n, a->n_out, a->n_in);
    if (rc)
        return rc;
    if (!a->y || !a->x || !a->w)
        return deras_fail(DERAS_EINVAL, "qmm_matmul: NULL y, x or w");
    if (a->ldy && a->ldy < a->n_out)
        return deras_fail(DERAS_EINVAL, "qmm_matmul: ldy %d below n_out %d", a->ldy, a->n_out);
    const int fmt = qmm_fmt_of(a->dtype), act = qmm_act_of(fmt, a->mode == QMM_Q8);
    size_t need;
    if ((rc = qmm_scratch_bytes(a->dtype, a->mode, a->n, a->n_in, &need)))
        return rc;
    if (need && (!a->scratch || a->scratch_bytes < need || ((uintptr_t)a->scratch & 63)))
        return deras_fail(DERAS_EINVAL,
                          "qmm_matmul: %s %s needs %zu bytes of 64-byte aligned scratch, got %zu "
                          "at %p", dtype_name(a->dtype), a->mode == QMM_Q8 ? "q8" : "exact",
                          need, a->scratch_bytes, a->scratch);
    if (a->packed && (a->mode != QMM_Q8 || !qmm_packs(a->dtype)))
        return deras_fail(DERAS_EINVAL, "qmm_matmul: packed %s weights in %s mode (packed: the "
                          "block formats in q8 mode)", dtype_name(a->dtype),
                          a->mode == QMM_Q8 ? "q8" : "exact");
    const qmm_path *p;
    if ((rc = qmm_path_active(&p)))
        return rc;
    /* packed: a strip's bytes over 16 (the file's row bytes but for Q4_K and Q5_K) */
    const size_t w_row = (size_t)(a->n_in / dtype_block_elems(a->dtype)) *
                         (a->packed ? qmm_pk_block(fmt) / QMM_STRIP : dtype_block_bytes(a->dtype));
    const size_t xa_row = act == QA_F32 ? (size_t)a->n_in * sizeof(float) : need / (size_t)a->n;
    const uint8_t *xa = act == QA_F32 ? (const uint8_t *)a->x : a->scratch;

    const int pool_nt = cpu_pool_threads(a->pool);
    int nt = a->n_threads > 0 && a->n_threads < pool_nt ? a->n_threads : pool_nt;
    const double work = (double)a->n * a->n_out * a->n_in;
    if (work < (double)MIN_WORK * nt)
        nt = (int)(work / MIN_WORK) > 1 ? (int)(work / MIN_WORK) : 1;
    /* panel mode: exact mode on a block format with enough rows to amortize the decoding */
    const bool panel = act == QA_F32 && dtype_block_elems(a->dtype) > 1 && p->decode &&
                       a->n >= PANEL_MIN_ROWS;
    int rows = (int)(panel ? PANEL_BYTES / (a->n_in * sizeof(float)) : CHUNK_BYTES / w_row);
    int min_chunks = CHUNKS_PER_THREAD * nt;
    if (rows > (a->n_out + min_chunks - 1) / min_chunks)
        rows = (a->n_out + min_chunks - 1) / min_chunks;
    /* whole tiles: 4 rows, in panel mode 12 (the F32 kernels' tiles are 3 and 4 rows),
     * packed a strip */
    const int unit = a->packed ? QMM_STRIP : panel ? 12 : QMM_MAX_OT;
    rows = rows < unit ? unit : rows / unit * unit;
    const int n_chunks = (a->n_out + rows - 1) / rows;
    const int units = (a->n_in + UNIT - 1) / UNIT;
    if (act != QA_F32) {
        conv_job cj = {a, &p->act, act, units, xa_row};
        /* a few rows of activations cost less to convert here than a pool job */
        const int here = nt == 1 || (long)a->n * a->n_in <= CONVERT_HERE;
        cpu_pool_run(a->pool, a->n * units, here ? 1 : nt, convert_item, &cj);
    }
    job j = {a, act == QA_F32 ? p->exact[fmt] : p->q8[fmt], panel ? p->exact[QF_F32] : NULL,
             p->decode, xa, xa_row, w_row, rows, (size_t)(a->ldy ? a->ldy : a->n_out),
             a->packed ? p->packed[fmt] : NULL};
    cpu_pool_run(a->pool, n_chunks, nt, chunk_item, &j);
    return DERAS_OK;
}

bool qmm_computes(int dtype)
{
    return qmm_fmt_of(dtype) >= 0;
}

int qmm_embed_row(float *out, const void *w, int dtype, int64_t n_rows, int n_in, int64_t row)
{
    int rc = check_shape("qmm_embed_row", dtype, QMM_EXACT, 1, 1, n_in);
    if (rc)
        return rc;
    if (!out || !w || row < 0 || row >= n_rows)
        return deras_fail(DERAS_EINVAL, "qmm_embed_row: NULL pointer or row %lld outside [0, %lld)",
                          (long long)row, (long long)n_rows);
    const size_t w_row = (size_t)(n_in / dtype_block_elems(dtype)) * dtype_block_bytes(dtype);
    return dtype_to_f32(dtype, (const uint8_t *)w + (size_t)row * w_row, out, n_in);
}
