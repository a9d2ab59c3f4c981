/* SPDX-License-Identifier: Apache-2.0 */
/* attn_tile_body.h - the tile walk of the SIMD attention paths, included once by each
 * (attn_avx2.c, attn_avx512.c) after it has defined:
 *
 *   ATTN_W            lanes of its vectors = keys per group
 *   ATTN_TARGET       its target attribute
 *   ATTN_TILE_NAME    the name of the tile function to define
 *   group_step(...)   one query vector meets one group of up to ATTN_W keys (below)
 *   widen(...)        n f16 or bf16 cache elements to f32, n a multiple of ATTN_W
 *
 * The walk: a block's keys are taken in groups of ATTN_W, aligned to the block's first
 * slot, so a key's group and its lane in it depend only on its position. For each group
 * that some row of the tile sees, its keys and values are read (widened to f32 once, for
 * a 16-bit cache) and every query vector of the rows that see it folds it in with
 * group_step, in the rows' order of keys; the next block of the table is prefetched while
 * one is processed (paged blocks are not contiguous, so the hardware's stream prefetch
 * restarts at each: 10-13% off memory-bound decode in bench_attention, best of rounds).
 * Nothing here depends on which rows or heads
 * share the tile, which is the batch invariance of attn_impl.h. Scratch is on the stack:
 * 2 x ATTN_MAX_QV x ATTN_MAX_HEAD_DIM floats of state and 2 x ATTN_W x ATTN_MAX_HEAD_DIM of
 * widened keys and values (96 KiB at AVX-512's 16 lanes).
 */
#include <float.h>

ATTN_TARGET static void ATTN_TILE_NAME(const attn_tile *t)
{
    const int hd = t->head_dim, bs = t->block_size, nh = t->n_heads;
    const int nq = t->n_rows * nh;
    _Alignas(64) float q[ATTN_MAX_QV][ATTN_MAX_HEAD_DIM];
    _Alignas(64) float acc[ATTN_MAX_QV][ATTN_MAX_HEAD_DIM];
    _Alignas(64) float kf[ATTN_W * ATTN_MAX_HEAD_DIM], vf[ATTN_W * ATTN_MAX_HEAD_DIM];
    float m[ATTN_MAX_QV], l[ATTN_MAX_QV];

    for (int i = 0; i < nq; i++) {
        const float *qr = t->q + (size_t)(i / nh) * t->q_stride + (size_t)(i % nh) * hd;
        for (int d = 0; d < hd; d++) {
            q[i][d] = qr[d] * t->scale;
            acc[i][d] = 0.0f;
        }
        m[i] = -FLT_MAX;
        l[i] = 0.0f;
    }

    const int last = t->pos0 + t->n_rows - 1;
    const size_t es = t->kv_dtype == DT_F32 ? 4 : 2, blk_bytes = (size_t)bs * hd * es;
    for (int blk = attn_lo(t->pos0, t->window) / bs; blk <= last / bs; blk++) {
        const size_t base = attn_block_base(t, blk);
        if (blk < last / bs) { /* the next block is elsewhere: fetch it while this one runs */
            const size_t next = attn_block_base(t, blk + 1) * es;
            for (size_t off = 0; off < blk_bytes; off += 64) {
                __builtin_prefetch((const char *)t->k_cache + next + off);
                __builtin_prefetch((const char *)t->v_cache + next + off);
            }
        }
        for (int g0 = 0; g0 < bs; g0 += ATTN_W) {
            const int key0 = blk * bs + g0, gn = bs - g0 < ATTN_W ? bs - g0 : ATTN_W;
            /* rows ra .. rb - 1 see some key of the group (lo and pos grow with the row) */
            const int ra = key0 - t->pos0 > 0 ? key0 - t->pos0 : 0;
            if (ra >= t->n_rows)
                break;
            int rb = t->n_rows;
            while (rb > ra && attn_lo(t->pos0 + rb - 1, t->window) > key0 + gn - 1)
                rb--;
            if (ra >= rb)
                continue;
            const float *kp, *vp;
            const size_t at = base + (size_t)g0 * hd;
            if (t->kv_dtype == DT_F32) {
                kp = (const float *)t->k_cache + at;
                vp = (const float *)t->v_cache + at;
            } else {
                widen((const uint16_t *)t->k_cache + at, t->kv_dtype, kf, gn * hd);
                widen((const uint16_t *)t->v_cache + at, t->kv_dtype, vf, gn * hd);
                kp = kf;
                vp = vf;
            }
            for (int r = ra; r < rb; r++) {
                const int pos = t->pos0 + r, lo = attn_lo(pos, t->window);
                const int j0 = lo > key0 ? lo - key0 : 0;
                const int j1 = pos - key0 + 1 < gn ? pos - key0 + 1 : gn;
                for (int h = 0; h < nh && j0 < j1; h++) {
                    const int i = r * nh + h;
                    group_step(q[i], acc[i], &m[i], &l[i], kp, vp, hd, gn, j0, j1);
                }
            }
        }
    }

    for (int i = 0; i < nq; i++) {
        float *o = t->out + (size_t)(i / nh) * t->out_stride + (size_t)(i % nh) * hd;
        const float inv = 1.0f / l[i];
        for (int d = 0; d < hd; d++)
            o[d] = acc[i][d] * inv;
    }
}
