/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_pack_avx2.c - strip kernels of the packed weights (qmm_impl.h) for AVX2 + FMA +
 * F16C: the strip's 16 rows as two halves of 8 rows, each in the lanes of one ymm.
 *
 * Per half and code group: 8 ymm of codes (nibble split; fifth bits expanded from the
 * stored mask with a shuffle and a compare; Q6_K's top bits shifted in). Each meets 4
 * broadcast activations in vpmaddubsw (u8 x s8, pairs summed into s16): codes of at most
 * 5 bits let four such results add in 16 bits without saturating (4 x 2 x 31 x 127 =
 * 31,496), Q6_K's 6-bit codes two (2 x 2 x 63 x 127 = 32,004); then one vpmaddwd by ones
 * widens to s32. Q8_0's codes (stored + 128) are turned back into signed bytes, and
 * maddubs takes |w| against the activation with w's sign (at most 2 x 128 x 127 = 32,512
 * per pair): no offset then. K super-blocks: group sums times the rows' scales
 * (vpmulld), the mins by vpmaddwd. The integer sums are exact, so results equal
 * qmm_pack.c's bit for bit. Tiles of 1, 2 and 4 activation rows (8 would spill the
 * accumulators; the K formats' per-row integer sums spill at 4, cheaply: they are
 * touched once per 32 elements).
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include <immintrin.h>
#include <string.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL2 static inline __attribute__((always_inline)) T2
#define UNROLL _Pragma("GCC unroll 8")

/* 32 bytes, byte j = 16 where bit j of bits is set, else 0. */
INL2 __m256i fifth_bits(uint32_t bits)
{
    const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                            0x0303030303030303LL);
    const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
    return _mm256_and_si256(v, _mm256_set1_epi8(16));
}

/* Half h of the 8 code vectors of the code group at p; Q8_0: c = |w|, sg = w (signed). */
INL2 void group_codes(const int f, const uint8_t *p, const int h, __m256i c[8], __m256i sg[8])
{
    const __m256i low = _mm256_set1_epi8(0x0f);
    if (f == QF_Q8_0) {
        UNROLL for (int k = 0; k < 8; k++) {
            sg[k] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 64 * k + 32 * h)),
                                     _mm256_set1_epi8(-128));
            c[k] = _mm256_abs_epi8(sg[k]);
        }
        return;
    }
    const uint8_t *hm = p;
    if (qmm_pk_has_h(f))
        p += 64;
    UNROLL for (int g = 0; g < 4; g++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 64 * g + 32 * h));
        c[g] = _mm256_and_si256(v, low);
        c[g + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    }
    if (qmm_pk_has_h(f))
        UNROLL for (int k = 0; k < 8; k++) {
            uint32_t m;
            memcpy(&m, hm + 8 * k + 4 * h, 4);
            c[k] = _mm256_or_si256(c[k], fifth_bits(m));
        }
    if (f == QF_Q6_K)
        UNROLL for (int t = 0; t < 2; t++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 256 + 64 * t + 32 * h));
            const __m256i top = _mm256_set1_epi8(0x30);
            c[4 * t + 0] = _mm256_or_si256(c[4 * t + 0], _mm256_and_si256(_mm256_slli_epi16(v, 4), top));
            c[4 * t + 1] = _mm256_or_si256(c[4 * t + 1], _mm256_and_si256(_mm256_slli_epi16(v, 2), top));
            c[4 * t + 2] = _mm256_or_si256(c[4 * t + 2], _mm256_and_si256(v, top));
            c[4 * t + 3] = _mm256_or_si256(c[4 * t + 3], _mm256_and_si256(_mm256_srli_epi16(v, 2), top));
        }
}

/* is + sum over code vectors k0 .. k1 - 1 of c[k] x q[4k .. 4k + 3] (broadcast). */
INL2 __m256i dots(const int f, __m256i is, const __m256i *c, const __m256i *sg, const int8_t *q,
                  const int k0, const int k1)
{
    const __m256i ones = _mm256_set1_epi16(1);
    const int per = f == QF_Q8_0 ? 1 : f == QF_Q6_K ? 2 : 4; /* maddubs sums per madd */
    UNROLL for (int k = k0; k < k1; k += per) {
        __m256i s16 = _mm256_setzero_si256();
        UNROLL for (int i = k; i < k + per; i++) {
            int32_t q4;
            memcpy(&q4, q + 4 * i, 4);
            __m256i xv = _mm256_set1_epi32(q4);
            if (f == QF_Q8_0)
                xv = _mm256_sign_epi8(xv, sg[i]);
            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(c[i], xv));
        }
        is = _mm256_add_epi32(is, _mm256_madd_epi16(s16, ones));
    }
    return is;
}

INL2 void strip(const uint8_t *s, const void *const *x, int nb, float *res, const int f,
                const int RT)
{
    const int has_m = qmm_pk_has_m(f);
    const int off = f == QF_Q8_0 ? 0 : qmm_pk_off(f); /* Q8_0: signed codes, see above */
    const size_t bb = qmm_pk_block(f);
    for (int h = 0; h < 2; h++) {
        __m256 acc[4];
        UNROLL for (int a = 0; a < RT; a++)
            acc[a] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const uint8_t *p = s + (size_t)b * bb;
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
            const __m256 mw = has_m ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * h)))
                                    : dw;
            __m256i c[8], sg[8];
            group_codes(f, p + qmm_pk_head(f), h, c, sg);
            UNROLL for (int a = 0; a < RT; a++) {
                const qmm_q8_32 *xb = (const qmm_q8_32 *)x[a] + b;
                const __m256i is = dots(f, _mm256_set1_epi32(-off * xb->sum), c, sg, xb->q, 0, 8);
                acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is),
                                         _mm256_mul_ps(dw, _mm256_set1_ps(xb->d)), acc[a]);
                if (has_m)
                    acc[a] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xb->d * (float)xb->sum), acc[a]);
            }
        }
        UNROLL for (int a = 0; a < RT; a++)
            _mm256_storeu_ps(res + QMM_STRIP * a + 8 * h, acc[a]);
    }
}

INL2 void strip_k(const uint8_t *s, const void *const *x, int nb, float *res, const int f,
                  const int RT)
{
    const size_t bb = qmm_pk_block(f), gb = qmm_pk_group(f);
    for (int h = 0; h < 2; h++) {
        __m256 acc[4];
        UNROLL for (int a = 0; a < RT; a++)
            acc[a] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const uint8_t *p = s + (size_t)b * bb;
            const qmm_q8_256 *xb[4];
            __m256i is[4];
            UNROLL for (int a = 0; a < RT; a++) {
                xb[a] = (const qmm_q8_256 *)x[a] + b;
                is[a] = _mm256_setzero_si256();
            }
            for (int j = 0; j < 8; j++) {
                __m256i c[8], sg[8];
                group_codes(f, p + qmm_pk_head(f) + j * gb, h, c, sg);
                if (f == QF_Q6_K) {
                    const __m256i s0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 32 + 32 * j + 8 * h)));
                    const __m256i s1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 48 + 32 * j + 8 * h)));
                    UNROLL for (int a = 0; a < RT; a++) {
                        const int8_t *q = xb[a]->q + 32 * j;
                        const __m256i t0 = dots(f, _mm256_set1_epi32(-32 * xb[a]->bsums[2 * j]), c, sg, q, 0, 4);
                        const __m256i t1 = dots(f, _mm256_set1_epi32(-32 * xb[a]->bsums[2 * j + 1]), c, sg, q, 4, 8);
                        is[a] = _mm256_add_epi32(is[a], _mm256_add_epi32(_mm256_mullo_epi32(t0, s0),
                                                                         _mm256_mullo_epi32(t1, s1)));
                    }
                } else {
                    const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 64 + 16 * j + 8 * h)));
                    UNROLL for (int a = 0; a < RT; a++) {
                        const __m256i t = dots(f, _mm256_setzero_si256(), c, sg, xb[a]->q + 32 * j, 0, 8);
                        is[a] = _mm256_add_epi32(is[a], _mm256_mullo_epi32(t, sc));
                    }
                }
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
            UNROLL for (int a = 0; a < RT; a++) {
                acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[a]),
                                         _mm256_mul_ps(dw, _mm256_set1_ps(xb[a]->d)), acc[a]);
                if (f != QF_Q6_K) {
                    const int16_t *bs = xb[a]->bsums;
                    __m256i ms = _mm256_setzero_si256();
                    UNROLL for (int pr = 0; pr < 4; pr++) { /* mins of sub-blocks 2pr, 2pr + 1 */
                        const __m256i mn = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(p + 192 + 32 * pr + 16 * h)));
                        const int lo = bs[4 * pr] + bs[4 * pr + 1], hi = bs[4 * pr + 2] + bs[4 * pr + 3];
                        ms = _mm256_add_epi32(ms, _mm256_madd_epi16(mn, _mm256_set1_epi32((int)((uint32_t)(uint16_t)lo | (uint32_t)hi << 16))));
                    }
                    const __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * h)));
                    acc[a] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms),
                                              _mm256_mul_ps(dmw, _mm256_set1_ps(xb[a]->d)), acc[a]);
                }
            }
        }
        UNROLL for (int a = 0; a < RT; a++)
            _mm256_storeu_ps(res + QMM_STRIP * a + 8 * h, acc[a]);
    }
}

#define KERNEL(F, body, RT)                                                                        \
    T2 static void F##_##RT(const uint8_t *s, const void *const *x, int nb, float *r)              \
    {                                                                                              \
        body(s, x, nb, r, QF_##F, RT);                                                             \
    }
#define KERNELS(F) KERNEL(F, strip, 1) KERNEL(F, strip, 2) KERNEL(F, strip, 4)
#define KERNELS_K(F) KERNEL(F, strip_k, 1) KERNEL(F, strip_k, 2) KERNEL(F, strip_k, 4)
KERNELS(Q8_0) KERNELS(Q4_0) KERNELS(Q4_1) KERNELS(Q5_0) KERNELS(Q5_1)
KERNELS_K(Q4_K) KERNELS_K(Q5_K) KERNELS_K(Q6_K)

#define ROW(F) [QF_##F] = {{F##_1, 1}, {F##_2, 2}, {F##_4, 4}, {F##_4, 4}}
#define ROW_K(F) [QF_##F] = {{F##_1, 1}, {F##_2, 2}, {F##_4, 4}, {F##_4, 4}}
const qmm_skern qmm_pack_avx2[QF_COUNT][QMM_LEVELS] = {
    ROW(Q8_0), ROW(Q4_0), ROW(Q4_1), ROW(Q5_0), ROW(Q5_1), ROW_K(Q4_K), ROW_K(Q5_K), ROW_K(Q6_K),
};
#endif
