/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_pack_avx512.c - strip kernels of the packed weights (qmm_impl.h) for AVX-512
 * F/BW/VL with VNNI: 16 rows in the lanes of one zmm.
 *
 * A code group (32 elements of 16 rows) becomes 8 zmm (the nibble split: and, shift; the
 * fifth bits: a byte add under the stored 64-bit mask; Q6_K's top bits: shift, and, or);
 * each meets 4 activations, broadcast to every lane, in one vpdpbusd (u8 codes x s8
 * activations, four products summed into s32, exact). Legacy blocks: the sum starts at
 * - off * S, then per block and activation row one int-to-f32 conversion, one product of
 * the 16 scales by the activation's and one FMA (one more for the _1 formats' offsets).
 * K super-blocks: each group's (or half group's, Q6_K) sum times its 16 rows' scales
 * (vpmulld), the mins against the activations' sums by vpdpwssd, and the f32 steps once
 * per 256 elements. Results equal qmm_pack.c's bit for bit. Tiles of 1, 2, 4 and 8
 * activation rows (K formats: 1, 2, 4) share the decoded codes. qmm_isa.c installs these
 * only where the CPU has AVX512-VNNI (the AVX2 strip kernels otherwise).
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include <immintrin.h>
#include <string.h>

#define T5V __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define INLV static inline __attribute__((always_inline)) T5V
#define UNROLL _Pragma("GCC unroll 8")

/* The 8 code vectors of the code group at p. */
INLV void group_codes(const int f, const uint8_t *p, __m512i c[8])
{
    const __m512i low = _mm512_set1_epi8(0x0f);
    if (f == QF_Q8_0) {
        UNROLL for (int k = 0; k < 8; k++)
            c[k] = _mm512_loadu_si512(p + 64 * k);
        return;
    }
    const uint8_t *hm = p;
    if (qmm_pk_has_h(f))
        p += 64;
    UNROLL for (int g = 0; g < 4; g++) {
        const __m512i v = _mm512_loadu_si512(p + 64 * g);
        c[g] = _mm512_and_si512(v, low);
        c[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
    if (qmm_pk_has_h(f))
        UNROLL for (int k = 0; k < 8; k++) {
            uint64_t m;
            memcpy(&m, hm + 8 * k, 8);
            c[k] = _mm512_mask_add_epi8(c[k], (__mmask64)m, c[k], _mm512_set1_epi8(16));
        }
    if (f == QF_Q6_K)
        UNROLL for (int t = 0; t < 2; t++) {
            const __m512i h = _mm512_loadu_si512(p + 256 + 64 * t), top = _mm512_set1_epi8(0x30);
            /* bits 2s, 2s + 1 of each byte to bits 4, 5 (16-bit shifts: the mask keeps
             * only bits that stayed in their byte) */
            c[4 * t + 0] = _mm512_or_si512(c[4 * t + 0], _mm512_and_si512(_mm512_slli_epi16(h, 4), top));
            c[4 * t + 1] = _mm512_or_si512(c[4 * t + 1], _mm512_and_si512(_mm512_slli_epi16(h, 2), top));
            c[4 * t + 2] = _mm512_or_si512(c[4 * t + 2], _mm512_and_si512(h, top));
            c[4 * t + 3] = _mm512_or_si512(c[4 * t + 3], _mm512_and_si512(_mm512_srli_epi16(h, 2), top));
        }
}

/* is + sum over code vectors k0 .. k1 - 1 of c[k] x q[4k .. 4k + 3] (broadcast). */
INLV __m512i dots(__m512i is, const __m512i *c, const int8_t *q, const int k0, const int k1)
{
    UNROLL for (int k = k0; k < k1; k++) {
        int32_t q4;
        memcpy(&q4, q + 4 * k, 4);
        is = _mm512_dpbusd_epi32(is, c[k], _mm512_set1_epi32(q4));
    }
    return is;
}

INLV void strip(const uint8_t *s, const void *const *x, int nb, float *res, const int f,
                const int RT)
{
    const int has_m = qmm_pk_has_m(f), off = qmm_pk_off(f);
    const size_t bb = qmm_pk_block(f);
    __m512 acc[8];
    UNROLL for (int a = 0; a < RT; a++)
        acc[a] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = s + (size_t)b * bb;
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512 mw = has_m ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32))) : dw;
        __m512i c[8];
        group_codes(f, p + qmm_pk_head(f), c);
        UNROLL for (int a = 0; a < RT; a++) {
            const qmm_q8_32 *xb = (const qmm_q8_32 *)x[a] + b;
            const __m512i is = dots(_mm512_set1_epi32(-off * xb->sum), c, xb->q, 0, 8);
            acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
                                     _mm512_mul_ps(dw, _mm512_set1_ps(xb->d)), acc[a]);
            if (has_m)
                acc[a] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xb->d * (float)xb->sum), acc[a]);
        }
    }
    UNROLL for (int a = 0; a < RT; a++)
        _mm512_storeu_ps(res + QMM_STRIP * a, acc[a]);
}

INLV void strip_k(const uint8_t *s, const void *const *x, int nb, float *res, const int f,
                  const int RT)
{
    const size_t bb = qmm_pk_block(f), gb = qmm_pk_group(f);
    __m512 acc[4];
    UNROLL for (int a = 0; a < RT; a++)
        acc[a] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *p = s + (size_t)b * bb;
        const qmm_q8_256 *xb[4];
        __m512i is[4], ms[4];
        UNROLL for (int a = 0; a < RT; a++) {
            xb[a] = (const qmm_q8_256 *)x[a] + b;
            is[a] = ms[a] = _mm512_setzero_si512();
        }
        for (int j = 0; j < 8; j++) {
            __m512i c[8];
            group_codes(f, p + qmm_pk_head(f) + j * gb, c);
            if (f == QF_Q6_K) {
                const __m512i s0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 32 + 32 * j)));
                const __m512i s1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 48 + 32 * j)));
                UNROLL for (int a = 0; a < RT; a++) {
                    const int8_t *q = xb[a]->q + 32 * j;
                    const __m512i t0 = dots(_mm512_set1_epi32(-32 * xb[a]->bsums[2 * j]), c, q, 0, 4);
                    const __m512i t1 = dots(_mm512_set1_epi32(-32 * xb[a]->bsums[2 * j + 1]), c, q, 4, 8);
                    is[a] = _mm512_add_epi32(is[a], _mm512_add_epi32(_mm512_mullo_epi32(t0, s0),
                                                                     _mm512_mullo_epi32(t1, s1)));
                }
            } else {
                const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 64 + 16 * j)));
                UNROLL for (int a = 0; a < RT; a++) {
                    const __m512i t = dots(_mm512_setzero_si512(), c, xb[a]->q + 32 * j, 0, 8);
                    is[a] = _mm512_add_epi32(is[a], _mm512_mullo_epi32(t, sc));
                }
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
        const __m512 dmw = f == QF_Q6_K ? dw : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 32)));
        UNROLL for (int a = 0; a < RT; a++) {
            acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[a]),
                                     _mm512_mul_ps(dw, _mm512_set1_ps(xb[a]->d)), acc[a]);
            if (f != QF_Q6_K) {
                const int16_t *bs = xb[a]->bsums;
                UNROLL for (int pr = 0; pr < 4; pr++) { /* mins of sub-blocks 2pr, 2pr + 1 */
                    const __m512i mn = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(p + 192 + 32 * pr)));
                    const int lo = bs[4 * pr] + bs[4 * pr + 1], hi = bs[4 * pr + 2] + bs[4 * pr + 3];
                    ms[a] = _mm512_dpwssd_epi32(ms[a], mn, _mm512_set1_epi32((int)((uint32_t)(uint16_t)lo | (uint32_t)hi << 16)));
                }
                acc[a] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms[a]),
                                          _mm512_mul_ps(dmw, _mm512_set1_ps(xb[a]->d)), acc[a]);
            }
        }
    }
    UNROLL for (int a = 0; a < RT; a++)
        _mm512_storeu_ps(res + QMM_STRIP * a, acc[a]);
}

#define KERNEL(F, body, RT)                                                                        \
    T5V static void F##_##RT(const uint8_t *s, const void *const *x, int nb, float *r)             \
    {                                                                                              \
        body(s, x, nb, r, QF_##F, RT);                                                             \
    }
#define KERNELS(F) KERNEL(F, strip, 1) KERNEL(F, strip, 2) KERNEL(F, strip, 4) KERNEL(F, strip, 8)
#define KERNELS_K(F) KERNEL(F, strip_k, 1) KERNEL(F, strip_k, 2) KERNEL(F, strip_k, 4)
KERNELS(Q8_0) KERNELS(Q4_0) KERNELS(Q4_1) KERNELS(Q5_0) KERNELS(Q5_1)
KERNELS_K(Q4_K) KERNELS_K(Q5_K) KERNELS_K(Q6_K)

#define ROW(F) [QF_##F] = {{F##_1, 1}, {F##_2, 2}, {F##_4, 4}, {F##_8, 8}}
#define ROW_K(F) [QF_##F] = {{F##_1, 1}, {F##_2, 2}, {F##_4, 4}, {F##_4, 4}}
const qmm_skern qmm_pack_avx512[QF_COUNT][QMM_LEVELS] = {
    ROW(Q8_0), ROW(Q4_0), ROW(Q4_1), ROW(Q5_0), ROW(Q5_1), ROW_K(Q4_K), ROW_K(Q5_K), ROW_K(Q6_K),
};
#endif
