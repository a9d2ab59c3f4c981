/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_avx512_exact.c - exact-mode kernels of qmatmul.h for AVX-512 F/BW/VL.
 *
 * The AVX2 kernels' design (qmm_avx2_exact.c) at twice the width: each 32-element block is
 * decoded sixteen elements at a time into f32 lanes, bit for bit as dtype_to_f32 does,
 * and meets each activation row of the tile with one FMA into that pair's single 16-lane
 * accumulator; lanes are summed in a fixed order at the end, so the order of additions is
 * fixed by n_in alone. Q4_0/Q4_1/Q8_0 widen bytes straight from the block; Q5_0/Q5_1 and
 * the K formats are first decoded to byte codes (qmm_avx512_blocks.h: a K super-block's
 * 256 codes and its scales once per weight row), then widened, converted and scaled;
 * Q6_K's d * sc * (q - 32) is one fmsub of d * sc and 32 * d * sc, exact like the rest. F32/F16/BF16 rows ending in a partial vector use masked loads (no
 * padding copies). Tile shapes: 4x1, 4x2, 4x4, 2x8 - up to 16 accumulators in the 32 zmm
 * registers. Every function carries the AVX-512 target attribute and is reached only
 * through the table, after qmm_isa.c has checked the CPU.
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include "kernels/cpu/qmm_avx512_blocks.h"

/* A K super-block of one weight row: codes and per-group f32 scale and subtracted
 * offset (Q4_K/Q5_K: a[j] = d * sc_j, a[8 + j] = dmin * m_j per 32-element sub-block j;
 * Q6_K: a[g] = d * sc_g, b[g] = 32 a[g] per 16-element group g). */
typedef struct kx {
    kw k;
    _Alignas(64) float a[16], b[16];
} kx;

INL void kx_unpack(int f, const uint8_t *p, kx *x)
{
    k_unpack(f, p, &x->k);
    const __m512 raw = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(x->k.raw));
    if (f == QF_Q6_K) {
        const __m512 a = _mm512_mul_ps(raw, _mm512_set1_ps(x->k.d));
        _mm512_store_ps(x->a, a);
        _mm512_store_ps(x->b, _mm512_mul_ps(a, _mm512_set1_ps(32.0f)));
    } else {
        const __m512 d = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(x->k.d), _mm512_set1_ps(x->k.dmin));
        _mm512_store_ps(x->a, _mm512_mul_ps(raw, d));
    }
}

INL __m512i nib16(const uint8_t *p, int hi)
{
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    return hi ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, _mm512_set1_epi32(15));
}

/* Per-32-element-block state of one weight row: scale, offset, byte codes. */
typedef struct st5 {
    __m512 a, b;
    __m256i c;
} st5;

INL st5 prep(int f, const uint8_t *w, int b)
{
    st5 s = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm256_setzero_si256()};
    const uint8_t *p;
    float d, m = 0.0f;
    switch (f) {
    case QF_Q8_0: s.a = _mm512_set1_ps(half_at(w + 34 * (size_t)b)); break;
    case QF_Q4_0: s.a = _mm512_set1_ps(half_at(w + 18 * (size_t)b)); break;
    case QF_Q4_1:
        p = w + 20 * (size_t)b;
        s.a = _mm512_set1_ps(half_at(p)), s.b = _mm512_set1_ps(half_at(p + 2));
        break;
    case QF_Q5_0:
    case QF_Q5_1:
        s.c = legacy_codes(f, w, b, &d, &m);
        s.a = _mm512_set1_ps(d), s.b = _mm512_set1_ps(m);
        break;
    default: break;
    }
    return s;
}

/* Elements 16v .. 16v + 15 of 32-element block b of row w (or of K sub-block j of x),
 * the reference values. */
INL __m512 vec(int f, const uint8_t *w, int b, const st5 *s, const kx *x, int j, int v)
{
    __m512i c;
    switch (f) {
    case QF_F32: return _mm512_loadu_ps((const float *)w + 32 * (size_t)b + 16 * v);
    case QF_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + 64 * (size_t)b + 32 * v)));
    case QF_BF16:
        c = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + 64 * (size_t)b + 32 * v)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(c, 16));
    case QF_Q8_0:
        c = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + 34 * (size_t)b + 2 + 16 * v)));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(c), s->a);
    case QF_Q4_0:
        c = _mm512_sub_epi32(nib16(w + 18 * (size_t)b + 2, v), _mm512_set1_epi32(8));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(c), s->a);
    case QF_Q4_1:
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(nib16(w + 20 * (size_t)b + 4, v)), s->a, s->b);
    case QF_Q5_0:
    case QF_Q5_1:
        c = _mm512_cvtepu8_epi32(v ? _mm256_extracti128_si256(s->c, 1) : _mm256_castsi256_si128(s->c));
        if (f == QF_Q5_1)
            return _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), s->a, s->b);
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c, _mm512_set1_epi32(16))), s->a);
    default: { /* K formats */
        const int g = f == QF_Q6_K ? 2 * j + v : j;
        c = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)((const uint8_t *)x->k.c + 32 * j + 16 * v)));
        return _mm512_fmsub_ps(_mm512_cvtepi32_ps(c), _mm512_set1_ps(x->a[g]),
                               _mm512_set1_ps(f == QF_Q6_K ? x->b[g] : x->a[8 + g]));
    }
    }
}

/* F32/F16/BF16 elements e .. e + 15 under mask m (lanes off read nothing and are 0). */
INL __m512 float_masked(int f, const uint8_t *w, int e, __mmask16 m)
{
    if (f == QF_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)w + e);
    const __m256i h = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, (const uint16_t *)w + e));
    if (f == QF_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INL void tile(qmm_tile *t, const int f, const int OT, const int RT)
{
    const int is_k = f == QF_Q4_K || f == QF_Q5_K || f == QF_Q6_K;
    const int per = is_k ? 8 : 1; /* 32-element blocks per step */
    const size_t kb = f == QF_Q4_K ? 144 : f == QF_Q5_K ? 176 : 210;
    __m512 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm512_setzero_ps();
    const int nb = t->n_in / 32;
    kx x[QMM_MAX_OT];
    for (int b0 = 0; b0 < nb; b0 += per) {
        if (is_k)
            UNROLL for (int o = 0; o < OT; o++)
                kx_unpack(f, t->w[o] + (size_t)(b0 / 8) * kb, &x[o]);
        for (int j = 0; j < per; j++) {
            st5 s[QMM_MAX_OT];
            UNROLL for (int o = 0; o < OT; o++)
                s[o] = prep(f, t->w[o], b0 + j);
            UNROLL for (int v = 0; v < 2; v++) {
                __m512 wv[QMM_MAX_OT];
                UNROLL for (int o = 0; o < OT; o++)
                    wv[o] = vec(f, t->w[o], b0 + j, &s[o], &x[o], j, v);
                UNROLL for (int r = 0; r < RT; r++) {
                    __m512 xv = _mm512_loadu_ps((const float *)t->x[r] + 32 * (b0 + j) + 16 * v);
                    __asm__("" : "+v"(xv)); /* one load per row, not one per FMA */
                    UNROLL for (int o = 0; o < OT; o++)
                        acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
                }
            }
        }
    }
    if (f == QF_F32 || f == QF_F16 || f == QF_BF16) {
        for (int e = nb * 32; e < t->n_in; e += 16) {
            const int k = t->n_in - e < 16 ? t->n_in - e : 16;
            const __mmask16 m = (__mmask16)((1u << k) - 1);
            __m512 wv[QMM_MAX_OT];
            UNROLL for (int o = 0; o < OT; o++)
                wv[o] = float_masked(f, t->w[o], e, m);
            UNROLL for (int r = 0; r < RT; r++) {
                const __m512 xv = _mm512_maskz_loadu_ps(m, (const float *)t->x[r] + e);
                UNROLL for (int o = 0; o < OT; o++)
                    acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
            }
        }
    }
    TILE_SUMS(acc, OT, RT, t->res);
}

/* ---- Q4_0, Q4_1, Q5_0, Q5_1: table lookups ----
 *
 * A block's 16 (Q4) or 32 (Q5_1) possible weight values are computed once, as dtype_to_f32
 * computes them (q * d + m with one rounding, or (q - off) * d), into a 16-lane table
 * (two for Q5_1); each element is then one vpermps (vpermt2ps) of its code, which uses
 * only the index's low 4 (5) bits, so the high nibble of a byte needs no masking. Q5_0
 * looks up its low 4 bits and adds 16 d under the mask of fifth bits, exact as well. Per block
 * and weight row: one load of the scales, two broadcasts, one or two table FMAs, one
 * widening load, one shift, two lookups; then one FMA per activation row and 16
 * elements. The weights are the reference's bit for bit, and the accumulation order is
 * the generic kernel's (elements 0-15, then 16-31, into one 16-lane accumulator). */

typedef struct lut {
    __m512 t0, t1;  /* values of codes 0..15 and (Q5_1) 16..31; Q5_0: t1 = 16 d */
    __m512i i0, i1; /* codes of elements 0..15 and 16..31 (low 4 or 5 bits) */
    __mmask16 h0, h1; /* Q5_0: the elements whose fifth bit is set */
} lut;

INL void lut_block(int f, const uint8_t *w, int b, lut *l)
{
    static const _Alignas(64) float iota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const size_t bb = f == QF_Q4_0 ? 18 : f == QF_Q4_1 ? 20 : f == QF_Q5_0 ? 22 : 24;
    const uint8_t *p = w + bb * (size_t)b;
    uint32_t dm;
    memcpy(&dm, p, 4);
    const __m128 h = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dm));
    const __m512 d = _mm512_broadcastss_ps(h), io = _mm512_load_ps(iota);
    const int has_m = f == QF_Q4_1 || f == QF_Q5_1, q5 = f == QF_Q5_0 || f == QF_Q5_1;
    const uint8_t *qs = p + (f == QF_Q4_0 ? 2 : f == QF_Q4_1 || f == QF_Q5_0 ? 4 + 2 * (f == QF_Q5_0) : 8);
    if (has_m) {
        const __m512 m = _mm512_broadcastss_ps(_mm_movehdup_ps(h));
        l->t0 = _mm512_fmadd_ps(io, d, m);
        if (q5)
            l->t1 = _mm512_fmadd_ps(_mm512_add_ps(io, _mm512_set1_ps(16.0f)), d, m);
    } else if (q5) { /* (q - 16) d exactly, then + 16 d (exact too) where bit 4 is set */
        l->t0 = _mm512_mul_ps(_mm512_sub_ps(io, _mm512_set1_ps(16.0f)), d);
        l->t1 = _mm512_mul_ps(_mm512_set1_ps(16.0f), d);
    } else {
        l->t0 = _mm512_mul_ps(_mm512_sub_ps(io, _mm512_set1_ps(8.0f)), d);
    }
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    l->i0 = bytes;
    l->i1 = _mm512_srli_epi32(bytes, 4);
    if (f == QF_Q5_0) {
        uint32_t qh;
        memcpy(&qh, p + 2, 4);
        l->h0 = (__mmask16)qh, l->h1 = (__mmask16)(qh >> 16);
    } else if (q5) {
        uint32_t qh;
        memcpy(&qh, p + 4, 4);
        const __m512i sixteen = _mm512_set1_epi32(16);
        /* bit 4 of each index: (byte & 15) | 16 * hbit */
        l->i0 = _mm512_ternarylogic_epi32(bytes, _mm512_set1_epi32(15),
                                          _mm512_maskz_mov_epi32((__mmask16)qh, sixteen), 0xEA);
        l->i1 = _mm512_or_si512(l->i1, _mm512_maskz_mov_epi32((__mmask16)(qh >> 16), sixteen));
    }
}

INL __m512 lut_get(int f, const lut *l, int hi)
{
    const __m512i i = hi ? l->i1 : l->i0;
    if (f == QF_Q5_1)
        return _mm512_permutex2var_ps(l->t0, i, l->t1);
    const __m512 v = _mm512_permutexvar_ps(i, l->t0);
    if (f == QF_Q5_0) /* (q - 16) d + 16 d = (q + 16 - 16) d: every step exact */
        return _mm512_mask_add_ps(v, hi ? l->h1 : l->h0, v, l->t1);
    return v;
}

INL void tile_lut(qmm_tile *t, const int f, const int OT, const int RT)
{
    __m512 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm512_setzero_ps();
    const int nb = t->n_in / 32;
    for (int b = 0; b < nb; b++) {
        lut l[QMM_MAX_OT];
        UNROLL for (int o = 0; o < OT; o++)
            lut_block(f, t->w[o], b, &l[o]);
        UNROLL for (int v = 0; v < 2; v++) {
            __m512 wv[QMM_MAX_OT];
            UNROLL for (int o = 0; o < OT; o++)
                wv[o] = lut_get(f, &l[o], v);
            UNROLL for (int r = 0; r < RT; r++) {
                const __m512 xv = _mm512_loadu_ps((const float *)t->x[r] + 32 * b + 16 * v);
                UNROLL for (int o = 0; o < OT; o++)
                    acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
            }
        }
    }
    TILE_SUMS(acc, OT, RT, t->res);
}

#define LUT_KERNELS(F)                                                                             \
    T5 static void F##_1(qmm_tile *t) { tile_lut(t, QF_##F, 4, 1); }                               \
    T5 static void F##_2(qmm_tile *t) { tile_lut(t, QF_##F, 4, 2); }                               \
    T5 static void F##_4(qmm_tile *t) { tile_lut(t, QF_##F, 4, 4); }                               \
    T5 static void F##_8(qmm_tile *t) { tile_lut(t, QF_##F, 2, 8); }
LUT_KERNELS(Q4_0) LUT_KERNELS(Q4_1) LUT_KERNELS(Q5_0) LUT_KERNELS(Q5_1)

/* ---- panel decoding: the values the kernels above compute, stored ---- */

INL void decode_blocks(const int f, const uint8_t *w, float *out, int n_blocks)
{
    if (f == QF_Q4_0 || f == QF_Q4_1 || f == QF_Q5_0 || f == QF_Q5_1) {
        for (int b = 0; b < n_blocks; b++) {
            lut l;
            lut_block(f, w, b, &l);
            _mm512_storeu_ps(out + 32 * (size_t)b, lut_get(f, &l, 0));
            _mm512_storeu_ps(out + 32 * (size_t)b + 16, lut_get(f, &l, 1));
        }
    } else if (f == QF_Q8_0) {
        for (int b = 0; b < n_blocks; b++) {
            const st5 s = prep(f, w, b);
            _mm512_storeu_ps(out + 32 * (size_t)b, vec(f, w, b, &s, NULL, 0, 0));
            _mm512_storeu_ps(out + 32 * (size_t)b + 16, vec(f, w, b, &s, NULL, 0, 1));
        }
    } else { /* K formats: n_blocks super-blocks */
        const size_t kb = f == QF_Q4_K ? 144 : f == QF_Q5_K ? 176 : 210;
        const st5 s = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm256_setzero_si256()};
        for (int sb = 0; sb < n_blocks; sb++) {
            kx x;
            kx_unpack(f, w + (size_t)sb * kb, &x);
            for (int j = 0; j < 8; j++)
                for (int v = 0; v < 2; v++)
                    _mm512_storeu_ps(out + 256 * (size_t)sb + 32 * j + 16 * v,
                                     vec(f, w, 8 * sb + j, &s, &x, j, v));
        }
    }
}

#define DECODE(F) T5 static void decode_##F(const uint8_t *w, float *o, int n) { decode_blocks(QF_##F, w, o, n); }
DECODE(Q8_0) DECODE(Q4_0) DECODE(Q4_1) DECODE(Q5_0) DECODE(Q5_1) DECODE(Q4_K) DECODE(Q5_K) DECODE(Q6_K)

void qmm_avx512_decode(int fmt, const uint8_t *w, float *out, int n_blocks)
{
    switch (fmt) {
    case QF_Q8_0: decode_Q8_0(w, out, n_blocks); break;
    case QF_Q4_0: decode_Q4_0(w, out, n_blocks); break;
    case QF_Q4_1: decode_Q4_1(w, out, n_blocks); break;
    case QF_Q5_0: decode_Q5_0(w, out, n_blocks); break;
    case QF_Q5_1: decode_Q5_1(w, out, n_blocks); break;
    case QF_Q4_K: decode_Q4_K(w, out, n_blocks); break;
    case QF_Q5_K: decode_Q5_K(w, out, n_blocks); break;
    case QF_Q6_K: decode_Q6_K(w, out, n_blocks); break;
    default: break;
    }
}

#define KERNELS(F)                                                                                 \
    T5 static void F##_1(qmm_tile *t) { tile(t, QF_##F, 4, 1); }                                   \
    T5 static void F##_2(qmm_tile *t) { tile(t, QF_##F, 4, 2); }                                   \
    T5 static void F##_4(qmm_tile *t) { tile(t, QF_##F, 4, 4); }                                   \
    T5 static void F##_8(qmm_tile *t) { tile(t, QF_##F, F##_OT8, 8); }
/* 8-row tiles: F32 (also the panels of qmatmul.c's panel mode) has registers for 3 weight
 * rows (24 accumulators, 3 + 8 loads per 24 FMAs); the others need theirs for decoding */
#define F32_OT8 3
#define F16_OT8 2
#define BF16_OT8 2
#define Q8_0_OT8 2
#define Q4_K_OT8 2
#define Q5_K_OT8 2
#define Q6_K_OT8 2
KERNELS(F32) KERNELS(F16) KERNELS(BF16) KERNELS(Q8_0) KERNELS(Q4_K) KERNELS(Q5_K) KERNELS(Q6_K)

#define ROW(F) [QF_##F] = {{F##_1, 4, 1}, {F##_2, 4, 2}, {F##_4, 4, 4}, {F##_8, F##_OT8, 8}}
#define Q4_0_OT8 2
#define Q4_1_OT8 2
#define Q5_0_OT8 2
#define Q5_1_OT8 2
const qmm_kern qmm_avx512_exact[QF_COUNT][QMM_LEVELS] = {
    ROW(F32), ROW(F16), ROW(BF16), ROW(Q8_0), ROW(Q4_0), ROW(Q4_1),
    ROW(Q5_0), ROW(Q5_1), ROW(Q4_K), ROW(Q5_K), ROW(Q6_K),
};
#endif
