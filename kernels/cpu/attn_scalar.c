/* SPDX-License-Identifier: Apache-2.0 */
/* attn_scalar.c - the reference path of the CPU attention: plain C, the semantics the
 * AVX2 and AVX-512 kernels are tested against, and the code that ran before them.
 *
 * For each row of the tile and each group of up to REF_GROUP of its query heads, the
 * keys are walked block by block: within a block the scores are computed (q pre-scaled,
 * an `omp simd` dot product), then folded into a running maximum, sum and output
 * accumulator with libm's expf; a block's keys and values are read once for the group.
 * f16/bf16 caches are widened one key row at a time with common/base/dtype.h's
 * converters (exact). Cost: O(context x heads x head_dim) per row, scalar exp per score.
 */
#include <float.h>
#include <math.h>

#include "common/base/dtype.h"
#include "kernels/cpu/attn_impl.h"

#define REF_GROUP 8

/* Key or value row j of a block starting at element `base`, as f32: a pointer into an f32
 * cache, or `buf` filled from a 16-bit one. */
static const float *row_f32(const void *cache, int dtype, size_t base, int j, int hd, float *buf)
{
    const size_t at = base + (size_t)j * hd;
    if (dtype == DT_F32)
        return (const float *)cache + at;
    const uint16_t *h = (const uint16_t *)cache + at;
    for (int d = 0; d < hd; d++)
        buf[d] = dtype == DT_F16 ? fp16_to_f32(h[d]) : bf16_to_f32(h[d]);
    return buf;
}

/* Row r of the tile, query heads h0 .. h0 + n_h - 1 (n_h <= REF_GROUP). */
static void attend_row(const attn_tile *t, int r, int h0, int n_h)
{
    const int hd = t->head_dim, bs = t->block_size;
    const int pos = t->pos0 + r, lo = attn_lo(pos, t->window);

    float q[REF_GROUP][ATTN_MAX_HEAD_DIM];
    float acc[REF_GROUP][ATTN_MAX_HEAD_DIM];
    float m[REF_GROUP], l[REF_GROUP];
    float sc[REF_GROUP][ATTN_MAX_BLOCK];
    float kbuf[ATTN_MAX_HEAD_DIM], vbuf[ATTN_MAX_HEAD_DIM];

    for (int g = 0; g < n_h; g++) {
        const float *qr = t->q + (size_t)r * t->q_stride + (size_t)(h0 + g) * hd;
        for (int j = 0; j < hd; j++) {
            q[g][j] = qr[j] * t->scale;
            acc[g][j] = 0.0f;
        }
        m[g] = -FLT_MAX;
        l[g] = 0.0f;
    }

    for (int blk = lo / bs; blk <= pos / bs; blk++) {
        const int t0 = blk * bs;
        const int j0 = lo > t0 ? lo - t0 : 0;
        const int j1 = pos - t0 + 1 < bs ? pos - t0 + 1 : bs;
        const size_t base = attn_block_base(t, blk);

        for (int g = 0; g < n_h; g++) {
            float bmax = -FLT_MAX;
            for (int j = j0; j < j1; j++) {
                const float *k = row_f32(t->k_cache, t->kv_dtype, base, j, hd, kbuf);
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int d = 0; d < hd; d++)
                    dot += q[g][d] * k[d];
                sc[g][j] = dot;
                bmax = dot > bmax ? dot : bmax;
            }
            float m_new = bmax > m[g] ? bmax : m[g];
            float corr = expf(m[g] - m_new);
            float sum = 0.0f;
            for (int j = j0; j < j1; j++) {
                sc[g][j] = expf(sc[g][j] - m_new);
                sum += sc[g][j];
            }
            l[g] = l[g] * corr + sum;
            m[g] = m_new;
            float *ar = acc[g];
#pragma omp simd
            for (int d = 0; d < hd; d++)
                ar[d] *= corr;
            for (int j = j0; j < j1; j++) {
                const float *v = row_f32(t->v_cache, t->kv_dtype, base, j, hd, vbuf);
                const float p = sc[g][j];
#pragma omp simd
                for (int d = 0; d < hd; d++)
                    ar[d] += p * v[d];
            }
        }
    }

    for (int g = 0; g < n_h; g++) {
        float *o = t->out + (size_t)r * t->out_stride + (size_t)(h0 + g) * hd;
        const float inv = 1.0f / l[g];
        for (int d = 0; d < hd; d++)
            o[d] = acc[g][d] * inv;
    }
}

static void tile_scalar(const attn_tile *t)
{
    for (int r = 0; r < t->n_rows; r++)
        for (int h0 = 0; h0 < t->n_heads; h0 += REF_GROUP)
            attend_row(t, r, h0, t->n_heads - h0 < REF_GROUP ? t->n_heads - h0 : REF_GROUP);
}

static void to_f16_scalar(const float *x, uint16_t *y, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = f32_to_fp16(x[i]);
}

static void to_bf16_scalar(const float *x, uint16_t *y, int n)
{
    for (int i = 0; i < n; i++)
        y[i] = f32_to_bf16(x[i]);
}

const attn_path attn_path_scalar = {tile_scalar, 1, to_f16_scalar, to_bf16_scalar};
