/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_scalar.c - the plain C path of qmatmul.h: the semantics of both modes for every
 * format, which the SIMD paths are tested against.
 *
 * Exact mode: a tile decodes up to 256 elements of its weight row with dtype_to_f32 (the
 * reference decoders) and multiplies them into each activation row of the tile, one f32
 * accumulator per pair, added to in element order (the f32 summation every other path
 * only reorders).
 *
 * Q8 mode: each weight block is decoded to integer codes and scales once per tile, then
 * meets each activation row's Q8 block in integer arithmetic (exact); the block's f32
 * term is added to the pair's accumulator block after block. Per block b, with codes c,
 * activation quants q, their scale dx and sums S:
 *   Q8_0              (dw dx) * sum(c q)                       c signed
 *   Q4_0, Q5_0        (dw dx) * (sum(c q) - off S)             off 8, 16
 *   Q4_1, Q5_1        (dw dx) * sum(c q) + mw (dx S)
 *   Q4_K, Q5_K, Q6_K  (d dx) * sum_k sc_k (sum_k(c q) - off S_k) - (dmin dx) * sum_k m_k S_k
 *                     over the 16-element groups k of a super-block (Q4_K/Q5_K repeat
 *                     each 32-element scale and min over its two groups; Q6_K: off 32,
 *                     no mins)
 *   BF16              sum of w * bf16(x) in element order
 * Cost: about 10x the SIMD paths; meant for checking and for CPUs without AVX2.
 */
#include <string.h>

#include "kernels/cpu/qmm_impl.h"

#define CHUNK 256

static const int dtype_of_fmt[QF_COUNT] = {
    [QF_F32] = DT_F32,   [QF_F16] = DT_F16,   [QF_BF16] = DT_BF16, [QF_Q8_0] = DT_Q8_0,
    [QF_Q4_0] = DT_Q4_0, [QF_Q4_1] = DT_Q4_1, [QF_Q5_0] = DT_Q5_0, [QF_Q5_1] = DT_Q5_1,
    [QF_Q4_K] = DT_Q4_K, [QF_Q5_K] = DT_Q5_K, [QF_Q6_K] = DT_Q6_K,
};

/* Bytes per block, for the Q8 mode's formats. */
static const size_t blk_bytes[QF_COUNT] = {
    [QF_Q8_0] = 34, [QF_Q4_0] = 18,  [QF_Q4_1] = 20,  [QF_Q5_0] = 22,
    [QF_Q5_1] = 24, [QF_Q4_K] = 144, [QF_Q5_K] = 176, [QF_Q6_K] = 210,
};

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static float rdh(const uint8_t *p)
{
    return fp16_to_f32(rd16(p));
}

/* ---- exact mode ---- */

static void tile_exact(qmm_tile *t, int fmt)
{
    const int dt = dtype_of_fmt[fmt];
    const int be = dtype_block_elems(dt);
    const size_t bb = dtype_block_bytes(dt);
    float wbuf[QMM_MAX_OT][CHUNK];
    float acc[QMM_MAX_OT][QMM_MAX_RT] = {{0}};
    for (int e0 = 0; e0 < t->n_in; e0 += CHUNK) {
        const int len = t->n_in - e0 < CHUNK ? t->n_in - e0 : CHUNK;
        for (int o = 0; o < t->ot; o++)
            (void)dtype_to_f32(dt, t->w[o] + (size_t)(e0 / be) * bb, wbuf[o], len);
        for (int r = 0; r < t->rt; r++) {
            const float *x = (const float *)t->x[r] + e0;
            for (int o = 0; o < t->ot; o++)
                for (int i = 0; i < len; i++)
                    acc[o][r] += wbuf[o][i] * x[i];
        }
    }
    memcpy(t->res, acc, sizeof acc);
}

/* ---- Q8 mode: weight blocks as integer codes and scales ---- */

typedef struct legacy_blk {
    int8_t c[32];
    int off;       /* subtracted from each code (times S in the sum) */
    float d, m;    /* m: the _1 formats' offset, 0 otherwise (adding 0 changes nothing) */
} legacy_blk;

static void decode_legacy(int fmt, const uint8_t *b, legacy_blk *k)
{
    k->d = rdh(b);
    k->m = 0.0f;
    k->off = 0;
    const uint8_t *qs;
    uint32_t qh = 0;
    switch (fmt) {
    case QF_Q8_0:
        memcpy(k->c, b + 2, 32);
        return;
    case QF_Q4_0: k->off = 8, qs = b + 2; break;
    case QF_Q4_1: k->m = rdh(b + 2), qs = b + 4; break;
    case QF_Q5_0: k->off = 16, memcpy(&qh, b + 2, 4), qs = b + 6; break;
    default: /* QF_Q5_1 */ k->m = rdh(b + 2), memcpy(&qh, b + 4, 4), qs = b + 8; break;
    }
    for (int j = 0; j < 16; j++) {
        k->c[j] = (int8_t)((qs[j] & 0x0f) | (((qh >> j) & 1) << 4));
        k->c[j + 16] = (int8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
    }
}

static float term_legacy(const legacy_blk *k, const qmm_q8_32 *x)
{
    int32_t dot = 0;
    for (int i = 0; i < 32; i++)
        dot += k->c[i] * x->q[i];
    return k->d * x->d * (float)(dot - k->off * x->sum) + k->m * (x->d * (float)x->sum);
}

typedef struct k_blk {
    uint8_t c[256];
    int sc[16], mn[16]; /* per 16-element group */
    int off;
    float d, dmin;
} k_blk;

static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void decode_k(int fmt, const uint8_t *b, k_blk *k)
{
    if (fmt == QF_Q6_K) {
        const uint8_t *ql = b, *qh = b + 128;
        k->d = rdh(b + 208);
        k->dmin = 0.0f;
        k->off = 32;
        for (int g = 0; g < 16; g++)
            k->sc[g] = (int8_t)b[192 + g], k->mn[g] = 0;
        for (int h = 0; h < 2; h++, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                uint8_t *c = k->c + 128 * h + l;
                c[0] = (uint8_t)((ql[l] & 0x0f) | ((qh[l] & 3) << 4));
                c[32] = (uint8_t)((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4));
                c[64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                c[96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
            }
        return;
    }
    k->d = rdh(b);
    k->dmin = rdh(b + 2);
    k->off = 0;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        scale_min_k4(j, b + 4, &sc, &m);
        k->sc[2 * j] = k->sc[2 * j + 1] = sc;
        k->mn[2 * j] = k->mn[2 * j + 1] = m;
    }
    const uint8_t *qh = b + 16, *ql = fmt == QF_Q5_K ? b + 48 : b + 16;
    for (int j = 0; j < 8; j++) /* sub-block j: nibble j % 2 of the 32 bytes at (j / 2) * 32 */
        for (int l = 0; l < 32; l++) {
            int c = j % 2 ? ql[(j / 2) * 32 + l] >> 4 : ql[(j / 2) * 32 + l] & 0x0f;
            if (fmt == QF_Q5_K)
                c |= ((qh[l] >> j) & 1) << 4;
            k->c[32 * j + l] = (uint8_t)c;
        }
}

static float term_k(const k_blk *k, const qmm_q8_256 *x)
{
    int32_t isum = 0, msum = 0;
    for (int g = 0; g < 16; g++) {
        int32_t dot = 0;
        for (int i = 0; i < 16; i++)
            dot += k->c[16 * g + i] * x->q[16 * g + i];
        isum += k->sc[g] * (dot - k->off * x->bsums[g]);
        msum += k->mn[g] * x->bsums[g];
    }
    return k->d * x->d * (float)isum - k->dmin * x->d * (float)msum;
}

static void tile_q8(qmm_tile *t, int fmt)
{
    float acc[QMM_MAX_OT][QMM_MAX_RT] = {{0}};
    if (fmt >= QF_Q4_K) {
        k_blk k;
        for (int b = 0; b < t->n_in / 256; b++)
            for (int o = 0; o < t->ot; o++) {
                decode_k(fmt, t->w[o] + (size_t)b * blk_bytes[fmt], &k);
                for (int r = 0; r < t->rt; r++)
                    acc[o][r] += term_k(&k, (const qmm_q8_256 *)t->x[r] + b);
            }
    } else {
        legacy_blk k;
        for (int b = 0; b < t->n_in / 32; b++)
            for (int o = 0; o < t->ot; o++) {
                decode_legacy(fmt, t->w[o] + (size_t)b * blk_bytes[fmt], &k);
                for (int r = 0; r < t->rt; r++)
                    acc[o][r] += term_legacy(&k, (const qmm_q8_32 *)t->x[r] + b);
            }
    }
    memcpy(t->res, acc, sizeof acc);
}

static void tile_bf16_q8(qmm_tile *t)
{
    float acc[QMM_MAX_OT][QMM_MAX_RT] = {{0}};
    for (int o = 0; o < t->ot; o++)
        for (int r = 0; r < t->rt; r++) {
            const uint16_t *x = t->x[r];
            for (int i = 0; i < t->n_in; i++)
                acc[o][r] += bf16_to_f32(rd16(t->w[o] + 2 * (size_t)i)) * bf16_to_f32(x[i]);
        }
    memcpy(t->res, acc, sizeof acc);
}

/* ---- activations ---- */

static void act_q8_32(const float *x, qmm_q8_32 *q, int n_blocks)
{
    for (int b = 0; b < n_blocks; b++, x += 32, q++) {
        q->d = qmm_q8_quant_ref(x, q->q, 32);
        q->sum = 0;
        for (int i = 0; i < 32; i++)
            q->sum += q->q[i];
    }
}

static void act_q8_256(const float *x, qmm_q8_256 *q, int n_blocks)
{
    for (int b = 0; b < n_blocks; b++, x += 256, q++) {
        q->d = qmm_q8_quant_ref(x, q->q, 256);
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += q->q[16 * g + i];
            q->bsums[g] = (int16_t)s;
        }
    }
}

static void act_bf16(const float *x, uint16_t *q, int n)
{
    for (int i = 0; i < n; i++)
        q[i] = f32_to_bf16(x[i]);
}

/* ---- the table: one weight row per tile, 1..8 activation rows ---- */

#define EXACT(F)                                                                                   \
    static void exact_##F(qmm_tile *t) { tile_exact(t, QF_##F); }
#define Q8(F)                                                                                      \
    static void q8_##F(qmm_tile *t) { tile_q8(t, QF_##F); }
EXACT(F32) EXACT(F16) EXACT(BF16) EXACT(Q8_0) EXACT(Q4_0) EXACT(Q4_1) EXACT(Q5_0) EXACT(Q5_1)
EXACT(Q4_K) EXACT(Q5_K) EXACT(Q6_K)
Q8(Q8_0) Q8(Q4_0) Q8(Q4_1) Q8(Q5_0) Q8(Q5_1) Q8(Q4_K) Q8(Q5_K) Q8(Q6_K)

#define LEVELS(fn) {{fn, 1, 1}, {fn, 1, 2}, {fn, 1, 4}, {fn, 1, 8}}

const qmm_path qmm_path_scalar = {
    .exact = {
        [QF_F32] = LEVELS(exact_F32),   [QF_F16] = LEVELS(exact_F16),
        [QF_BF16] = LEVELS(exact_BF16), [QF_Q8_0] = LEVELS(exact_Q8_0),
        [QF_Q4_0] = LEVELS(exact_Q4_0), [QF_Q4_1] = LEVELS(exact_Q4_1),
        [QF_Q5_0] = LEVELS(exact_Q5_0), [QF_Q5_1] = LEVELS(exact_Q5_1),
        [QF_Q4_K] = LEVELS(exact_Q4_K), [QF_Q5_K] = LEVELS(exact_Q5_K),
        [QF_Q6_K] = LEVELS(exact_Q6_K),
    },
    .q8 = {
        [QF_BF16] = LEVELS(tile_bf16_q8), [QF_Q8_0] = LEVELS(q8_Q8_0),
        [QF_Q4_0] = LEVELS(q8_Q4_0),      [QF_Q4_1] = LEVELS(q8_Q4_1),
        [QF_Q5_0] = LEVELS(q8_Q5_0),      [QF_Q5_1] = LEVELS(q8_Q5_1),
        [QF_Q4_K] = LEVELS(q8_Q4_K),      [QF_Q5_K] = LEVELS(q8_Q5_K),
        [QF_Q6_K] = LEVELS(q8_Q6_K),
    },
    .act = {act_q8_32, act_q8_256, act_bf16},
};
