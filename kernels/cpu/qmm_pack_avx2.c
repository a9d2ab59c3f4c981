/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_pack_avx2.c - strip kernels of the packed weights (qmm_impl.h) for AVX2 + FMA +
 * F16C: the strip's 16 rows as two halves of 8 rows, each in the lanes of one ymm.
 *
 * Per half and block: 8 ymm of codes (nibble split; Q5's fifth bits expanded from the
 * stored mask with a shuffle and a compare). Each meets 4 broadcast activations in
 * vpmaddubsw (u8 x s8, pairs summed into s16): the 4- and 5-bit codes (at most 31) let
 * four such results add in 16 bits without saturating (4 x 2 x 31 x 127 = 31,496), then
 * one vpmaddwd by ones widens to s32. Q8_0's codes (stored + 128) are turned back into
 * signed bytes, and maddubs takes |w| against the activation with w's sign (at most
 * 2 x 128 x 127 = 32,512 per pair): no offset then. The integer sums are exact, so results
 * equal qmm_pack.c's bit for bit. Tiles of 1, 2 and 4 activation rows (8 would spill).
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include <immintrin.h>

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

INL2 void strip(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *res, const int f,
                const int RT)
{
    const int has_m = qmm_pk_has_m(f), has_h = qmm_pk_has_h(f);
    const int off = f == QF_Q8_0 ? 0 : qmm_pk_off(f); /* Q8_0: signed codes, see above */
    const size_t bb = qmm_pk_block(f);
    const size_t codes_at = 32 + 32 * (size_t)has_m + 64 * (size_t)has_h;
    const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; h++) {
        __m256 acc[4];
        UNROLL for (int a = 0; a < RT; a++)
            acc[a] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const uint8_t *p = s + (size_t)b * bb;
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
            const __m256 mw = has_m ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 32 + 16 * h)))
                                    : dw;
            const uint8_t *cp = p + codes_at + 32 * h;
            __m256i c[8], sg[8];
            if (f == QF_Q8_0) {
                UNROLL for (int k = 0; k < 8; k++) {
                    sg[k] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(cp + 64 * k)),
                                             _mm256_set1_epi8(-128));
                    c[k] = _mm256_abs_epi8(sg[k]);
                }
            } else {
                UNROLL for (int g = 0; g < 4; g++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(cp + 64 * g));
                    c[g] = _mm256_and_si256(v, low);
                    c[g + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                }
                if (has_h) {
                    const uint8_t *hm = p + 32 + 32 * has_m;
                    UNROLL for (int k = 0; k < 8; k++) {
                        uint32_t m;
                        memcpy(&m, hm + 8 * k + 4 * h, 4);
                        c[k] = _mm256_or_si256(c[k], fifth_bits(m));
                    }
                }
            }
            UNROLL for (int a = 0; a < RT; a++) {
                const qmm_q8_32 *xb = x[a] + b;
                __m256i is = _mm256_set1_epi32(-off * xb->sum);
                if (f == QF_Q8_0) {
                    UNROLL for (int k = 0; k < 8; k++) {
                        int32_t q4;
                        memcpy(&q4, xb->q + 4 * k, 4);
                        const __m256i xs = _mm256_sign_epi8(_mm256_set1_epi32(q4), sg[k]);
                        is = _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_maddubs_epi16(c[k], xs), ones));
                    }
                } else {
                    UNROLL for (int k0 = 0; k0 < 8; k0 += 4) {
                        __m256i s16 = _mm256_setzero_si256();
                        UNROLL for (int k = k0; k < k0 + 4; k++) {
                            int32_t q4;
                            memcpy(&q4, xb->q + 4 * k, 4);
                            s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(c[k], _mm256_set1_epi32(q4)));
                        }
                        is = _mm256_add_epi32(is, _mm256_madd_epi16(s16, ones));
                    }
                }
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

#define KERNELS(F)                                                                                 \
    T2 static void F##_1(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *r)            \
    {                                                                                              \
        strip(s, x, nb, r, QF_##F, 1);                                                             \
    }                                                                                              \
    T2 static void F##_2(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *r)            \
    {                                                                                              \
        strip(s, x, nb, r, QF_##F, 2);                                                             \
    }                                                                                              \
    T2 static void F##_4(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *r)            \
    {                                                                                              \
        strip(s, x, nb, r, QF_##F, 4);                                                             \
    }
KERNELS(Q8_0) KERNELS(Q4_0) KERNELS(Q4_1) KERNELS(Q5_0) KERNELS(Q5_1)

#define ROW(F) [QF_##F] = {{F##_1, 1}, {F##_2, 2}, {F##_4, 4}, {F##_4, 4}}
const qmm_skern qmm_pack_avx2[QF_COUNT][QMM_LEVELS] = {
    ROW(Q8_0), ROW(Q4_0), ROW(Q4_1), ROW(Q5_0), ROW(Q5_1),
};
#endif
