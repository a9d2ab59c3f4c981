/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_avx2_blocks.h - the GGUF blocks decoded to integer codes and scales in AVX2
 * registers, for the exact and Q8 kernels of that path (private to kernels/cpu/).
 *
 * Legacy blocks become 32 byte codes, Q8_0's signed (for the sign trick: maddubs would
 * saturate on w + 128), the others unsigned with the offset the format subtracts
 * (QMM_OFF) left to the caller; a K super-block becomes 256 unsigned byte
 * codes in element order in a stack buffer plus its scales as s16 vectors (maddubs/madd
 * in Q8 mode, f32 in exact mode). Everything here is always_inline with the path's
 * target attribute, so it exists only inside the kernels that use it.
 */
#ifndef DERAS_QMM_AVX2_BLOCKS_H
#define DERAS_QMM_AVX2_BLOCKS_H

#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/qmm_impl.h"

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) T2
#define UNROLL _Pragma("GCC unroll 8")

INL float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INL int hsum_i32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

INL float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* 32 bit flags -> 32 bytes 0xff / 0x00 (llama.cpp's bytes_from_bits_32). */
INL __m256i bits_to_bytes(uint32_t bits)
{
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0..15), then high ones. */
INL __m256i nibbles32(const uint8_t *p)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p), m = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

/* Block b's 32 codes (Q8_0's signed, the others unsigned: Q4_0 and Q5_0 subtract
 * QMM_OFF from them), scale, offset. */
INL __m256i legacy_codes(int f, const uint8_t *w, int b, float *d, float *m)
{
    uint32_t qh;
    const uint8_t *p;
    switch (f) {
    case QF_Q8_0:
        p = w + 34 * (size_t)b;
        *d = half_at(p);
        return _mm256_loadu_si256((const __m256i *)(p + 2));
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
        return _mm256_or_si256(nibbles32(p + 6),
                               _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16)));
    default: /* QF_Q5_1 */
        p = w + 24 * (size_t)b;
        *d = half_at(p), *m = half_at(p + 2);
        memcpy(&qh, p + 4, 4);
        return _mm256_or_si256(nibbles32(p + 8),
                               _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16)));
    }
}

#define QMM_OFF(f) ((f) == QF_Q4_0 ? 8 : (f) == QF_Q5_0 ? 16 : 0)

typedef struct kw {
    uint8_t c[256];     /* codes, element order */
    __m256i sc[8];      /* sub-block j's scales as s16: elements 0..15 | 16..31 */
    __m256i mins;       /* s16 per 16-element group: mins (Q4_K/Q5_K) or the scales (Q6_K) */
    __m256i raw;        /* s16: Q4_K/Q5_K's 8 scales then 8 mins, Q6_K's 16 scales */
    float d, dmin;
} kw;

/* s16 vector: group g0's value in lanes 0..7 (elements 0..15 of a 32-element step), g1's in
 * lanes 8..15; v holds 16 s16 values, g0 and g1 in the same half of it. */
INL __m256i pick_pair(__m256i v, int g0, int g1)
{
    const __m256i half = g0 < 8 ? _mm256_permute4x64_epi64(v, 0x44) : _mm256_permute4x64_epi64(v, 0xee);
    const short c0 = (short)((2 * (g0 & 7)) | ((2 * (g0 & 7) + 1) << 8));
    const short c1 = (short)((2 * (g1 & 7)) | ((2 * (g1 & 7) + 1) << 8));
    return _mm256_shuffle_epi8(half, _mm256_set_m128i(_mm_set1_epi16(c1), _mm_set1_epi16(c0)));
}

INL void k_unpack(int f, const uint8_t *p, kw *k)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    if (f == QF_Q6_K) {
        k->d = half_at(p + 208), k->dmin = 0.0f;
        k->mins = k->raw = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 192)));
        UNROLL for (int j = 0; j < 8; j++)
            k->sc[j] = pick_pair(k->mins, 2 * j, 2 * j + 1);
        const __m256i m2 = _mm256_set1_epi8(3);
        for (int hf = 0; hf < 2; hf++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(p + 64 * hf));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(p + 64 * hf + 32));
            const __m256i h = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * hf));
            __m256i *c = (__m256i *)(k->c + 128 * hf);
#define HB(s) _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, s), m2), 4)
            _mm256_storeu_si256(c + 0, _mm256_or_si256(_mm256_and_si256(l0, m4), HB(0)));
            _mm256_storeu_si256(c + 1, _mm256_or_si256(_mm256_and_si256(l1, m4), HB(2)));
            _mm256_storeu_si256(c + 2, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), HB(4)));
            _mm256_storeu_si256(c + 3, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), HB(6)));
#undef HB
        }
        return;
    }
    k->d = half_at(p), k->dmin = half_at(p + 2);
    uint8_t s[16];
    qmm_k4_scales(p + 4, s);
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s));
    k->raw = sm;
    UNROLL for (int j = 0; j < 8; j++)
        k->sc[j] = pick_pair(sm, j, j);
    const __m128i mn = _mm_loadl_epi64((const __m128i *)(s + 8));
    k->mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn, mn));
    const uint8_t *ql = p + (f == QF_Q5_K ? 48 : 16);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 16));
    for (int i = 0; i < 4; i++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(ql + 32 * i));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if (f == QF_Q5_K) {
            const __m256i one = _mm256_set1_epi8(1);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i + 1), one), 4));
        }
        _mm256_storeu_si256((__m256i *)(k->c + 64 * i), lo);
        _mm256_storeu_si256((__m256i *)(k->c + 64 * i + 32), hi);
    }
}

#endif
