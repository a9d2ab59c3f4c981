/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_avx512_blocks.h - the GGUF blocks decoded to integer codes and scales in AVX-512
 * registers, for the exact and Q8 kernels of that path (private to kernels/cpu/).
 *
 * Legacy blocks become 32 unsigned byte codes (Q8_0's signed ones offset by 128), with the
 * offset the format subtracts (QMM_OFF) left to the caller; a K super-block becomes 256
 * byte codes in element order plus its scales as s16 vectors, ready for maddubs/vpdpwssd
 * (Q8 mode) or conversion to f32 (exact mode). Everything here is always_inline with the
 * path's target attribute, so it exists only inside the kernels that use it.
 */
#ifndef DERAS_QMM_AVX512_BLOCKS_H
#define DERAS_QMM_AVX512_BLOCKS_H

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/qmm_impl.h"

#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) T5
#define UNROLL _Pragma("GCC unroll 8")

INL float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INL float hsum(__m512 v)
{
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* The tile's results: res[o][r] = hsum(acc[o][r]) bit for bit, sixteen accumulators at a
 * time through one transposed tree (15 shuffle pairs and adds for 16 sums instead of ~7
 * operations each): level 1 adds lanes i and i + 8, level 2 i and i + 4, level 3 i and
 * i + 2, level 4 i and i + 1, exactly hsum's pairs, so every sum is hsum's. After level
 * 4, accumulator k sits in lane 4 (k % 4) + k / 4. Unused accumulators are zeros, which
 * never meet a used one. */
/* Macros, not functions: the shuffles' selectors must be constants where they are written
 * (clang checks before inlining, and the fuzz build is clang at -O0). */
#define SUM_PAIRS_X4(a, b, lo, hi)                                                                \
    _mm512_add_ps(_mm512_shuffle_f32x4((a), (b), (lo)), _mm512_shuffle_f32x4((a), (b), (hi)))
#define SUM_PAIRS_PS(a, b, lo, hi)                                                                \
    _mm512_add_ps(_mm512_shuffle_ps((a), (b), (lo)), _mm512_shuffle_ps((a), (b), (hi)))

INL void hsum16(const __m512 *a, const int n, float out[16])
{
    __m512 l1[8], l2[4], l3[2];
    const __m512 z = _mm512_setzero_ps();
    UNROLL for (int k = 0; k < 8; k++)
        l1[k] = 2 * k < n ? SUM_PAIRS_X4(a[2 * k], 2 * k + 1 < n ? a[2 * k + 1] : z, 0x44, 0xEE) : z;
    UNROLL for (int k = 0; k < 4; k++)
        l2[k] = 4 * k < n ? SUM_PAIRS_X4(l1[2 * k], l1[2 * k + 1], 0x88, 0xDD) : z;
    UNROLL for (int k = 0; k < 2; k++)
        l3[k] = 8 * k < n ? SUM_PAIRS_PS(l2[2 * k], l2[2 * k + 1], 0x44, 0xEE) : z;
    _mm512_storeu_ps(out, SUM_PAIRS_PS(l3[0], l3[1], 0x88, 0xDD));
}

/* res[o][r] = hsum(acc[o][r]) for an OT x RT tile (OT * RT <= 32); below 8 sums, one hsum
 * each. */
#define TILE_SUMS(acc, OT, RT, res)                                                               \
    do {                                                                                          \
        __m512 flat_[32];                                                                         \
        float sums_[32];                                                                          \
        UNROLL for (int o_ = 0; o_ < (OT); o_++)                                                  \
            UNROLL for (int r_ = 0; r_ < (RT); r_++)                                              \
                flat_[o_ * (RT) + r_] = (acc)[o_][r_];                                            \
        const int n_ = (OT) * (RT);                                                               \
        if (n_ < 8) { /* too few to share the tree's shuffles */                                 \
            UNROLL for (int k_ = 0; k_ < n_; k_++)                                                \
                (res)[k_ / (RT)][k_ % (RT)] = hsum(flat_[k_]);                                    \
            break;                                                                                \
        }                                                                                         \
        hsum16(flat_, n_ < 16 ? n_ : 16, sums_);                                                  \
        if (n_ > 16)                                                                              \
            hsum16(flat_ + 16, n_ - 16, sums_ + 16);                                              \
        UNROLL for (int o_ = 0; o_ < (OT); o_++)                                                  \
            UNROLL for (int r_ = 0; r_ < (RT); r_++) {                                            \
                const int k_ = o_ * (RT) + r_, j_ = k_ % 16;                                      \
                (res)[o_][r_] = sums_[16 * (k_ / 16) + 4 * (j_ % 4) + j_ / 4];                    \
            }                                                                                     \
    } while (0)

INL __m256i bits_to_bytes(uint32_t bits)
{
    return _mm256_maskz_mov_epi8((__mmask32)bits, _mm256_set1_epi8(16));
}

INL __m256i nibbles32(const uint8_t *p)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* Block b's 32 codes, unsigned (Q8_0's w + 128, by flipping the sign bit), scale and
 * offset; the code offset the format subtracts is QMM_OFF below. */
INL __m256i legacy_codes(int f, const uint8_t *w, int b, float *d, float *m)
{
    uint32_t qh;
    const uint8_t *p;
    switch (f) {
    case QF_Q8_0:
        p = w + 34 * (size_t)b;
        *d = half_at(p);
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 2)), _mm256_set1_epi8(-128));
    case QF_Q4_0:
        p = w + 18 * (size_t)b;
        *d = half_at(p);
        return nibbles32(p + 2);
    case QF_Q4_1:
        p = w + 20 * (size_t)b;
        *d = half_at(p), *m = half_at(p + 2);
        return nibbles32(p + 4);
    case QF_Q5_0:
        p = w + 22 * (size_t)b;
        *d = half_at(p);
        memcpy(&qh, p + 2, 4);
        return _mm256_or_si256(nibbles32(p + 6), bits_to_bytes(qh));
    default: /* QF_Q5_1 */
        p = w + 24 * (size_t)b;
        *d = half_at(p), *m = half_at(p + 2);
        memcpy(&qh, p + 4, 4);
        return _mm256_or_si256(nibbles32(p + 8), bits_to_bytes(qh));
    }
}
#define QMM_OFF(f) ((f) == QF_Q8_0 ? 128 : (f) == QF_Q4_0 ? 8 : (f) == QF_Q5_0 ? 16 : 0)

/* Blocks b and b + 1 (if `two`; zeros otherwise) as one zmm. */
INL __m512i codes64(int f, const uint8_t *w, int b, int two, float *d, float *m)
{
    const __m256i c0 = legacy_codes(f, w, b, &d[0], &m[0]);
    __m256i c1 = _mm256_setzero_si256();
    d[1] = m[1] = 0.0f;
    if (two)
        c1 = legacy_codes(f, w, b + 1, &d[1], &m[1]);
    return _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
}

typedef struct kw {
    __m512i c[4];   /* codes, 64 elements each */
    __m512i sc[4];  /* s16 scale of each maddubs lane (two elements) of c[i] */
    __m256i mins;   /* s16 per 16-element group: mins (Q4_K/Q5_K) or the scales (Q6_K) */
    __m256i raw;    /* s16: Q4_K/Q5_K's 8 scales then 8 mins, Q6_K's 16 scales */
    float d, dmin;
} kw;

/* vpermw indices: lane l of 64-element step i takes group (element / 16) 4i + l / 8 (Q6_K),
 * or sub-block 2i + l / 16 (Q4_K/Q5_K, whose table holds 8 scales then 8 mins). */
static const struct {
    _Alignas(64) int16_t g16[4][32], g32[4][32];
} lanes = {
#define G16(i) {4*i, 4*i, 4*i, 4*i, 4*i, 4*i, 4*i, 4*i, 4*i+1, 4*i+1, 4*i+1, 4*i+1, 4*i+1, 4*i+1, \
    4*i+1, 4*i+1, 4*i+2, 4*i+2, 4*i+2, 4*i+2, 4*i+2, 4*i+2, 4*i+2, 4*i+2, 4*i+3, 4*i+3, 4*i+3, \
    4*i+3, 4*i+3, 4*i+3, 4*i+3, 4*i+3}
#define G32(i) {2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, 2*i, \
    2*i+1, 2*i+1, 2*i+1, 2*i+1, 2*i+1, 2*i+1, 2*i+1, 2*i+1, 2*i+1, 2*i+1, 2*i+1, 2*i+1, 2*i+1, \
    2*i+1, 2*i+1, 2*i+1}
    {G16(0), G16(1), G16(2), G16(3)},
    {G32(0), G32(1), G32(2), G32(3)},
#undef G16
#undef G32
};

INL void k_unpack(int f, const uint8_t *p, kw *k)
{
    const __m512i m4 = _mm512_set1_epi8(15);
    if (f == QF_Q6_K) {
        k->d = half_at(p + 208), k->dmin = 0.0f;
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192)));
        for (int i = 0; i < 4; i++)
            k->sc[i] = _mm512_permutexvar_epi16(_mm512_load_si512(lanes.g16[i]), _mm512_castsi256_si512(sc));
        k->mins = k->raw = sc;
        const __m512i m2 = _mm512_set1_epi8(3);
        for (int hf = 0; hf < 2; hf++) {
            const __m512i l = _mm512_loadu_si512(p + 64 * hf);
            const __m256i h = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * hf));
            const __m512i h2 = _mm512_inserti64x4(_mm512_castsi256_si512(h), _mm256_srli_epi16(h, 2), 1);
            k->c[2 * hf] = _mm512_or_si512(_mm512_and_si512(l, m4),
                                           _mm512_slli_epi16(_mm512_and_si512(h2, m2), 4));
            k->c[2 * hf + 1] = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h2, 4), m2), 4));
        }
        return;
    }
    k->d = half_at(p), k->dmin = half_at(p + 2);
    uint8_t s[16];
    qmm_k4_scales(p + 4, s);
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s));
    k->raw = sm;
    for (int i = 0; i < 4; i++)
        k->sc[i] = _mm512_permutexvar_epi16(_mm512_load_si512(lanes.g32[i]), _mm512_castsi256_si512(sm));
    k->mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(s + 8)),
                                                     _mm_loadl_epi64((const __m128i *)(s + 8))));
    const uint8_t *ql = p + (f == QF_Q5_K ? 48 : 16);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 16));
    const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
    for (int i = 0; i < 4; i++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(ql + 32 * i));
        __m512i c = _mm512_and_si512(
            _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), m4);
        if (f == QF_Q5_K) { /* bit 2i of qh for the low nibbles, 2i + 1 for the high */
            const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * i))),
                                                   _mm256_set1_epi8((char)(2 << (2 * i))), 1);
            c = _mm512_mask_add_epi8(c, _mm512_test_epi8_mask(qh2, bit), c, _mm512_set1_epi8(16));
        }
        k->c[i] = c;
    }
}

#endif
