/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_pack_avx512.c - strip kernels of the packed weights (qmm_impl.h) for AVX-512
 * F/BW/VL with VNNI: per 32-element block, 16 rows in the lanes of one zmm.
 *
 * A block's codes become 8 zmm (the nibble split: and, shift; Q5's fifth bits: a byte
 * add under the stored 64-bit mask); each meets 4 activations, broadcast to every lane,
 * in one vpdpbusd (u8 codes x s8 activations, four products summed into s32, exact),
 * started at - off * S. Then per block and activation row: one int-to-f32 conversion, one
 * product of the 16 scales by the activation's and one FMA (one more for the _1 formats'
 * offsets), for 16 rows at once. Results equal qmm_pack.c's bit for bit. Tiles of 1, 2, 4
 * and 8 activation rows share the decoded codes. qmm_isa.c installs these only where the
 * CPU has AVX512-VNNI (the AVX2 strip kernels otherwise).
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include <immintrin.h>

#define T5V __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define INLV static inline __attribute__((always_inline)) T5V
#define UNROLL _Pragma("GCC unroll 8")

INLV void strip(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *res, const int f,
                const int RT)
{
    const int has_m = qmm_pk_has_m(f), has_h = qmm_pk_has_h(f), off = qmm_pk_off(f);
    const size_t bb = qmm_pk_block(f);
    const __m512i low = _mm512_set1_epi8(0x0f), five = _mm512_set1_epi8(16);
    __m512 acc[8];
    UNROLL for (int a = 0; a < RT; a++)
        acc[a] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = s + (size_t)b * bb;
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        p += 32;
        __m512 mw = dw;
        if (has_m) {
            mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
            p += 32;
        }
        const uint8_t *hm = p;
        if (has_h)
            p += 64;
        __m512i c[8];
        if (f == QF_Q8_0) {
            UNROLL for (int k = 0; k < 8; k++)
                c[k] = _mm512_loadu_si512(p + 64 * k);
        } else {
            UNROLL for (int g = 0; g < 4; g++) {
                const __m512i v = _mm512_loadu_si512(p + 64 * g);
                c[g] = _mm512_and_si512(v, low);
                c[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
            }
            if (has_h)
                UNROLL for (int k = 0; k < 8; k++) {
                    uint64_t m;
                    memcpy(&m, hm + 8 * k, 8);
                    c[k] = _mm512_mask_add_epi8(c[k], (__mmask64)m, c[k], five);
                }
        }
        UNROLL for (int a = 0; a < RT; a++) {
            const qmm_q8_32 *xb = x[a] + b;
            __m512i is = _mm512_set1_epi32(-off * xb->sum);
            UNROLL for (int k = 0; k < 8; k++) {
                int32_t q4;
                memcpy(&q4, xb->q + 4 * k, 4);
                is = _mm512_dpbusd_epi32(is, c[k], _mm512_set1_epi32(q4));
            }
            acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
                                     _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), acc[a]);
            if (has_m)
                acc[a] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xb->d * (float)xb->sum), acc[a]);
        }
    }
    UNROLL for (int a = 0; a < RT; a++)
        _mm512_storeu_ps(res + QMM_STRIP * a, acc[a]);
}

#define KERNELS(F)                                                                                 \
    T5V static void F##_1(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *r)           \
    {                                                                                              \
        strip(s, x, nb, r, QF_##F, 1);                                                             \
    }                                                                                              \
    T5V static void F##_2(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *r)           \
    {                                                                                              \
        strip(s, x, nb, r, QF_##F, 2);                                                             \
    }                                                                                              \
    T5V static void F##_4(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *r)           \
    {                                                                                              \
        strip(s, x, nb, r, QF_##F, 4);                                                             \
    }                                                                                              \
    T5V static void F##_8(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *r)           \
    {                                                                                              \
        strip(s, x, nb, r, QF_##F, 8);                                                             \
    }
KERNELS(Q8_0) KERNELS(Q4_0) KERNELS(Q4_1) KERNELS(Q5_0) KERNELS(Q5_1)

#define ROW(F) [QF_##F] = {{F##_1, 1}, {F##_2, 2}, {F##_4, 4}, {F##_8, 8}}
const qmm_skern qmm_pack_avx512[QF_COUNT][QMM_LEVELS] = {
    ROW(Q8_0), ROW(Q4_0), ROW(Q4_1), ROW(Q5_0), ROW(Q5_1),
};
#endif
