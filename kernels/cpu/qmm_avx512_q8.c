/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_avx512_q8.c - Q8-mode kernels of qmatmul.h for AVX-512 F/BW/VL with VNNI (and, for
 * BF16 weights, AVX512-BF16).
 *
 * The integer products of qmm_avx2_q8.c, 64 elements per instruction:
 *   legacy formats  two blocks per zmm (an odd last block pairs with zeros, which add
 *                   nothing); vpdpbusd (u8 x s8, four products summed into s32 with no
 *                   16-bit step, so no saturation) on unsigned codes (Q8_0's w + 128), the
 *                   sum started at - off * S in lanes 0 and 8 (the codes' offset: 128, 8,
 *                   16), the _1 formats' m * dx * S added to those lanes of the f32
 *                   accumulator; one f32 scale per block half.
 *   K formats       per super-block the codes of each weight row unpacked once
 *                   (qmm_avx512_blocks.h); per pair, maddubs then vpdpwssd by the s16 scale
 *                   of each 16-element group (one instruction for llama.cpp's madd + add),
 *                   Q6_K's offset and Q4_K/Q5_K's mins from the activations' per-16 sums.
 *   BF16            vdpbf16ps on the weights and the bf16 activations: 32 products per
 *                   instruction, summed in f32 (the instruction flushes bf16 subnormals).
 * Integer parts are exact, so results differ from the scalar path's only in the order of
 * f32 additions, fixed by n_in. Tile shapes: 4x1, 4x2, 4x4, 2x8. qmm_isa.c installs these
 * kernels only on CPUs with AVX512-VNNI (the BF16 ones only with AVX512-BF16); the AVX-512
 * path uses the AVX2 Q8 kernels otherwise.
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include "kernels/cpu/qmm_avx512_blocks.h"

#define T5V __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define T5B __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define INLV static inline __attribute__((always_inline)) T5V

/* ---- legacy formats ---- */

INL __m512 halves(float a, float b)
{
    return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

/* a in lane 0, b in lane 8, zeros elsewhere: one value per block of a pair. */
INL __m512i lanes0_8(int a, int b)
{
    return _mm512_inserti32x4(_mm512_zextsi128_si512(_mm_cvtsi32_si128(a)), _mm_cvtsi32_si128(b), 2);
}

INL __m512 lanes0_8f(float a, float b)
{
    return _mm512_insertf32x4(_mm512_zextps128_ps512(_mm_set_ss(a)), _mm_set_ss(b), 2);
}

INLV void tile_legacy(qmm_tile *t, const int f, const int OT, const int RT)
{
    const int has_m = f == QF_Q4_1 || f == QF_Q5_1, off = QMM_OFF(f);
    __m512 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm512_setzero_ps();
    const int nb = t->n_in / 32;
    for (int b = 0; b < nb; b += 2) {
        const int two = b + 1 < nb;
        __m512i wc[QMM_MAX_OT];
        __m512 dw[QMM_MAX_OT], mw[QMM_MAX_OT];
        UNROLL for (int o = 0; o < OT; o++) {
            float d[2], m[2];
            wc[o] = codes64(f, t->w[o], b, two, d, m);
            dw[o] = halves(d[0], d[1]);
            mw[o] = has_m ? halves(m[0], m[1]) : dw[o];
        }
        UNROLL for (int r = 0; r < RT; r++) {
            const qmm_q8_32 *xb = (const qmm_q8_32 *)t->x[r] + b;
            __m512i xq = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)xb[0].q));
            xq = _mm512_inserti64x4(xq, two ? _mm256_loadu_si256((const __m256i *)xb[1].q)
                                            : _mm256_setzero_si256(), 1);
            const float dx1 = two ? xb[1].d : 0.0f;
            const int s1 = two ? xb[1].sum : 0;
            const __m512 dx = halves(xb[0].d, dx1);
            /* the codes' offset, - off * S per block, starts the integer sum */
            const __m512i start = off ? lanes0_8(-off * xb[0].sum, -off * s1) : _mm512_setzero_si512();
            /* the _1 formats' offsets: m * (dx * S) per block, in lanes 0 and 8 */
            const __m512 sx = has_m ? lanes0_8f(xb[0].d * (float)xb[0].sum, dx1 * (float)s1) : dx;
            UNROLL for (int o = 0; o < OT; o++) {
                const __m512i s = _mm512_dpbusd_epi32(start, wc[o], xq);
                acc[o][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw[o], dx), acc[o][r]);
                if (has_m)
                    acc[o][r] = _mm512_fmadd_ps(mw[o], sx, acc[o][r]);
            }
        }
    }
    TILE_SUMS(acc, OT, RT, t->res);
}

/* ---- K formats ---- */

INLV void tile_k(qmm_tile *t, const int f, const int OT, const int RT)
{
    const size_t bb = f == QF_Q4_K ? 144 : f == QF_Q5_K ? 176 : 210;
    __m512 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm512_setzero_ps();
    kw k[QMM_MAX_OT];
    for (int sb = 0; sb < t->n_in / 256; sb++) {
        UNROLL for (int o = 0; o < OT; o++)
            k_unpack(f, t->w[o] + sb * bb, &k[o]);
        UNROLL for (int r = 0; r < RT; r++) {
            const qmm_q8_256 *xb = (const qmm_q8_256 *)t->x[r] + sb;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
            UNROLL for (int o = 0; o < OT; o++) {
                __m512i is = _mm512_setzero_si512();
                UNROLL for (int i = 0; i < 4; i++)
                    is = _mm512_dpwssd_epi32(
                        is, _mm512_maddubs_epi16(k[o].c[i], _mm512_loadu_si512(xb->q + 64 * i)),
                        k[o].sc[i]);
                const __m256i mb = _mm256_madd_epi16(k[o].mins, bs);
                if (f == QF_Q6_K)
                    is = _mm512_sub_epi32(is, _mm512_zextsi256_si512(_mm256_slli_epi32(mb, 5)));
                acc[o][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(k[o].d * xb->d),
                                            acc[o][r]);
                if (f != QF_Q6_K)
                    acc[o][r] = _mm512_fnmadd_ps(_mm512_zextps256_ps512(_mm256_cvtepi32_ps(mb)),
                                                 _mm512_set1_ps(k[o].dmin * xb->d), acc[o][r]);
            }
        }
    }
    TILE_SUMS(acc, OT, RT, t->res);
}

/* ---- BF16 with bf16 activations (AVX512-BF16) ---- */

static inline __attribute__((always_inline)) T5B void tile_bf16(qmm_tile *t, const int OT, const int RT)
{
    __m512 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm512_setzero_ps();
    for (int e = 0; e < t->n_in; e += 32) {
        const int k = t->n_in - e < 32 ? t->n_in - e : 32;
        const __mmask32 m = k == 32 ? 0xffffffffu : (1u << k) - 1;
        __m512i wv[QMM_MAX_OT];
        UNROLL for (int o = 0; o < OT; o++)
            wv[o] = _mm512_maskz_loadu_epi16(m, (const uint16_t *)t->w[o] + e);
        UNROLL for (int r = 0; r < RT; r++) {
            const __m512i xv = _mm512_maskz_loadu_epi16(m, (const uint16_t *)t->x[r] + e);
            UNROLL for (int o = 0; o < OT; o++)
                acc[o][r] = _mm512_dpbf16_ps(acc[o][r], (__m512bh)wv[o], (__m512bh)xv);
        }
    }
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++) {
            const __m512 v = acc[o][r];
            const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                           _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
            __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            t->res[o][r] = _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
        }
}

#define KERNELS(F, body)                                                                           \
    T5V static void F##_1(qmm_tile *t) { body(t, QF_##F, 4, 1); }                                  \
    T5V static void F##_2(qmm_tile *t) { body(t, QF_##F, 4, 2); }                                  \
    T5V static void F##_4(qmm_tile *t) { body(t, QF_##F, 4, 4); }                                  \
    T5V static void F##_8(qmm_tile *t) { body(t, QF_##F, 2, 8); }
KERNELS(Q8_0, tile_legacy) KERNELS(Q4_0, tile_legacy) KERNELS(Q4_1, tile_legacy)
KERNELS(Q5_0, tile_legacy) KERNELS(Q5_1, tile_legacy)
KERNELS(Q4_K, tile_k) KERNELS(Q5_K, tile_k) KERNELS(Q6_K, tile_k)
T5B static void BF16_1(qmm_tile *t) { tile_bf16(t, 4, 1); }
T5B static void BF16_2(qmm_tile *t) { tile_bf16(t, 4, 2); }
T5B static void BF16_4(qmm_tile *t) { tile_bf16(t, 4, 4); }
T5B static void BF16_8(qmm_tile *t) { tile_bf16(t, 2, 8); }

#define ROW(F) [QF_##F] = {{F##_1, 4, 1}, {F##_2, 4, 2}, {F##_4, 4, 4}, {F##_8, 2, 8}}
const qmm_kern qmm_avx512_vnni[QF_COUNT][QMM_LEVELS] = {
    ROW(Q8_0), ROW(Q4_0), ROW(Q4_1), ROW(Q5_0), ROW(Q5_1), ROW(Q4_K), ROW(Q5_K), ROW(Q6_K),
};
const qmm_kern qmm_avx512_bf16[QMM_LEVELS] = {
    {BF16_1, 4, 1}, {BF16_2, 4, 2}, {BF16_4, 4, 4}, {BF16_8, 2, 8}};
#endif
