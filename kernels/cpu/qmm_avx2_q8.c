/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_avx2_q8.c - Q8-mode kernels of qmatmul.h for AVX2 + FMA + F16C, and the activation
 * converters every SIMD path uses.
 *
 * Integer products with maddubs (u8 x s8 -> pairs summed in s16) and madd (s16 pairs ->
 * s32), as llama.cpp's AVX2 paths do:
 *   Q8_0              |w| x sign(q, w) (the sign trick: |w| <= 128 and |q| <= 127 keep
 *                     each pair below 2^15); one s32 vector per block, scaled by dw * dx
 *                     into the pair's f32 accumulator.
 *   Q4_0, Q5_0, Q4_1, Q5_1  unsigned codes (<= 31) x q directly; Q4_0/Q5_0's offset takes
 *                     off * S from lane 0 of the s32 sum, the _1 formats add mw * dx * S
 *                     to lane 0 of the accumulator.
 *   Q4_K, Q5_K, Q6_K  per super-block the codes of each weight row are unpacked once into a
 *                     stack buffer (L1) with its sub-block scales as s16 vectors; each pair
 *                     then sums sc * (codes . q) in s32 over the super-block (madd by the
 *                     scale vector), takes off Q6_K's 32 * sum(sc * S) and Q4_K/Q5_K's
 *                     mins sum(m * S) from the activations' per-16 sums, and scales once.
 *   BF16              activations rounded to bf16, widened again, FMA (the bf16 rounding
 *                     is the only difference from exact mode; AVX512-BF16 has the faster
 *                     kernel).
 * Integer parts are exact, so the results differ from the scalar path's only in the
 * order of f32 additions. Tile shapes as the exact kernels: 4x1, 4x2, 2x4.
 *
 * The activation converters reproduce qmm_q8_quant_ref (and f32_to_bf16) byte for byte;
 * they cost O(n_in) per row, next to O(n_out * n_in) for the product.
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include "kernels/cpu/qmm_avx2_blocks.h"

/* ---- activations ---- */

INL float amax_of(const float *x, int n)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8)
        m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

/* 32 elements times id, rounded to nearest even, into 32 bytes; *lo and *hi get the sums
 * of the quants of elements 0..15 and 16..31. */
INL void quant32(const float *x, float id, int8_t *q, int *lo, int *hi)
{
    const __m256 s = _mm256_set1_ps(id);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), s));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), s));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), s));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), s));
    *lo = hsum_i32(_mm256_add_epi32(i0, i1));
    *hi = hsum_i32(_mm256_add_epi32(i2, i3));
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
}

T2 static void act_q8_32(const float *x, qmm_q8_32 *q, int n_blocks)
{
    for (int b = 0; b < n_blocks; b++, x += 32, q++) {
        const float d = amax_of(x, 32) / 127.0f;
        int lo, hi;
        quant32(x, d != 0.0f ? 1.0f / d : 0.0f, q->q, &lo, &hi);
        q->d = d;
        q->sum = lo + hi;
    }
}

T2 static void act_q8_256(const float *x, qmm_q8_256 *q, int n_blocks)
{
    for (int b = 0; b < n_blocks; b++, x += 256, q++) {
        const float d = amax_of(x, 256) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 8; j++) {
            int lo, hi;
            quant32(x + 32 * j, id, q->q + 32 * j, &lo, &hi);
            q->bsums[2 * j] = (int16_t)lo;
            q->bsums[2 * j + 1] = (int16_t)hi;
        }
        q->d = d;
    }
}

/* f32_to_bf16 on 8 lanes: round to nearest even; NaN keeps sign and top payload, quiet. */
INL __m128i bf16x8(const float *x)
{
    const __m256 v = _mm256_loadu_ps(x);
    const __m256i u = _mm256_castps_si256(v);
    __m256i r = _mm256_add_epi32(u, _mm256_set1_epi32(0x7fff));
    r = _mm256_srli_epi32(_mm256_add_epi32(r, _mm256_and_si256(_mm256_srli_epi32(u, 16),
                                                                _mm256_set1_epi32(1))), 16);
    __m256i top = _mm256_srli_epi32(u, 16);
    const __m256i quiet = _mm256_cmpeq_epi32(_mm256_and_si256(top, _mm256_set1_epi32(0x7f)),
                                             _mm256_setzero_si256());
    top = _mm256_or_si256(top, _mm256_and_si256(quiet, _mm256_set1_epi32(0x40)));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, top, nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

T2 static void act_bf16(const float *x, uint16_t *q, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(q + i), bf16x8(x + i));
    for (; i < n; i++)
        q[i] = f32_to_bf16(x[i]);
}

const qmm_act_fns qmm_avx2_act = {act_q8_32, act_q8_256, act_bf16};

/* ---- legacy formats ---- */

INL void tile_legacy(qmm_tile *t, const int f, const int OT, const int RT)
{
    const int has_m = f == QF_Q4_1 || f == QF_Q5_1, off = QMM_OFF(f);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm256_setzero_ps();
    for (int b = 0; b < t->n_in / 32; b++) {
        __m256i wc[QMM_MAX_OT], wa[QMM_MAX_OT];
        float dw[QMM_MAX_OT], mw[QMM_MAX_OT];
        UNROLL for (int o = 0; o < OT; o++) {
            wc[o] = legacy_codes(f, t->w[o], b, &dw[o], &mw[o]);
            wa[o] = f == QF_Q8_0 ? _mm256_sign_epi8(wc[o], wc[o]) : wc[o];
        }
        UNROLL for (int r = 0; r < RT; r++) {
            const qmm_q8_32 *xb = (const qmm_q8_32 *)t->x[r] + b;
            const __m256i xq = _mm256_loadu_si256((const __m256i *)xb->q);
            const float dx = xb->d;
            /* lane 0 carries the block's offset terms: - off * S (integer), m * dx * S */
            const __m256i corr = _mm256_zextsi128_si256(_mm_cvtsi32_si128(off * xb->sum));
            const __m256 sx = _mm256_zextps128_ps256(_mm_set_ss(dx * (float)xb->sum));
            UNROLL for (int o = 0; o < OT; o++) {
                const __m256i p = f == QF_Q8_0 ? _mm256_maddubs_epi16(wa[o], _mm256_sign_epi8(xq, wc[o]))
                                               : _mm256_maddubs_epi16(wc[o], xq);
                __m256i s = _mm256_madd_epi16(p, ones);
                if (off)
                    s = _mm256_sub_epi32(s, corr);
                acc[o][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw[o] * dx), acc[o][r]);
                if (has_m)
                    acc[o][r] = _mm256_fmadd_ps(_mm256_set1_ps(mw[o]), sx, acc[o][r]);
            }
        }
    }
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            t->res[o][r] = hsum(acc[o][r]);
}

/* ---- K formats ---- */

INL void tile_k(qmm_tile *t, const int f, const int OT, const int RT)
{
    const size_t bb = f == QF_Q4_K ? 144 : f == QF_Q5_K ? 176 : 210;
    __m256 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm256_setzero_ps();
    kw k[QMM_MAX_OT];
    for (int sb = 0; sb < t->n_in / 256; sb++) {
        UNROLL for (int o = 0; o < OT; o++)
            k_unpack(f, t->w[o] + sb * bb, &k[o]);
        UNROLL for (int r = 0; r < RT; r++) {
            const qmm_q8_256 *xb = (const qmm_q8_256 *)t->x[r] + sb;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
            UNROLL for (int o = 0; o < OT; o++) {
                __m256i is = _mm256_setzero_si256();
                UNROLL for (int j = 0; j < 8; j++) {
                    const __m256i p = _mm256_maddubs_epi16(
                        _mm256_loadu_si256((const __m256i *)(k[o].c + 32 * j)),
                        _mm256_loadu_si256((const __m256i *)(xb->q + 32 * j)));
                    is = _mm256_add_epi32(is, _mm256_madd_epi16(p, k[o].sc[j]));
                }
                const __m256i mb = _mm256_madd_epi16(k[o].mins, bs);
                if (f == QF_Q6_K)
                    is = _mm256_sub_epi32(is, _mm256_slli_epi32(mb, 5));
                acc[o][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(k[o].d * xb->d),
                                            acc[o][r]);
                if (f != QF_Q6_K)
                    acc[o][r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mb),
                                                 _mm256_set1_ps(k[o].dmin * xb->d), acc[o][r]);
            }
        }
    }
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            t->res[o][r] = hsum(acc[o][r]);
}

/* ---- BF16 with bf16 activations ---- */

INL __m256 bf16_vec(const uint16_t *p)
{
    const __m256i c = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(c, 16));
}

INL void tile_bf16(qmm_tile *t, const int OT, const int RT)
{
    __m256 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm256_setzero_ps();
    for (int e = 0; e < t->n_in; e += 8) {
        const int k = t->n_in - e < 8 ? t->n_in - e : 8;
        uint16_t tail[QMM_MAX_OT + QMM_MAX_RT][8];
        __m256 wv[QMM_MAX_OT];
        UNROLL for (int o = 0; o < OT; o++) {
            const uint16_t *p = (const uint16_t *)t->w[o] + e;
            if (k < 8) { /* zero-padded: zeros add nothing */
                memset(tail[o], 0, sizeof tail[o]);
                memcpy(tail[o], p, 2 * (size_t)k);
                p = tail[o];
            }
            wv[o] = bf16_vec(p);
        }
        UNROLL for (int r = 0; r < RT; r++) {
            const uint16_t *p = (const uint16_t *)t->x[r] + e;
            if (k < 8) {
                memset(tail[QMM_MAX_OT + r], 0, sizeof tail[0]);
                memcpy(tail[QMM_MAX_OT + r], p, 2 * (size_t)k);
                p = tail[QMM_MAX_OT + r];
            }
            const __m256 xv = bf16_vec(p);
            UNROLL for (int o = 0; o < OT; o++)
                acc[o][r] = _mm256_fmadd_ps(wv[o], xv, acc[o][r]);
        }
    }
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            t->res[o][r] = hsum(acc[o][r]);
}

#define KERNELS(F, body)                                                                           \
    T2 static void F##_1(qmm_tile *t) { body(t, QF_##F, 4, 1); }                                   \
    T2 static void F##_2(qmm_tile *t) { body(t, QF_##F, 4, 2); }                                   \
    T2 static void F##_4(qmm_tile *t) { body(t, QF_##F, 2, 4); }
KERNELS(Q8_0, tile_legacy) KERNELS(Q4_0, tile_legacy) KERNELS(Q4_1, tile_legacy)
KERNELS(Q5_0, tile_legacy) KERNELS(Q5_1, tile_legacy)
KERNELS(Q4_K, tile_k) KERNELS(Q5_K, tile_k) KERNELS(Q6_K, tile_k)
T2 static void BF16_1(qmm_tile *t) { tile_bf16(t, 4, 1); }
T2 static void BF16_2(qmm_tile *t) { tile_bf16(t, 4, 2); }
T2 static void BF16_4(qmm_tile *t) { tile_bf16(t, 2, 4); }

#define ROW(F) [QF_##F] = {{F##_1, 4, 1}, {F##_2, 4, 2}, {F##_4, 2, 4}, {NULL, 0, 0}}
const qmm_kern qmm_avx2_q8[QF_COUNT][QMM_LEVELS] = {
    ROW(BF16), ROW(Q8_0), ROW(Q4_0), ROW(Q4_1), ROW(Q5_0), ROW(Q5_1), ROW(Q4_K), ROW(Q5_K), ROW(Q6_K),
};
#endif
