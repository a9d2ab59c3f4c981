/* SPDX-License-Identifier: Apache-2.0 */
/* attn_avx2.c - the AVX2+FMA+F16C path of the CPU attention (attn_impl.h), for head dims
 * that are a multiple of 8; also the KV element converters of both SIMD paths.
 *
 * One query vector meets a group of 8 keys (group_step): eight dot products, each kept
 * in its own 8-lane accumulator over head_dim / 8 fused multiply-adds, then reduced all
 * at once by a transposing tree (reduce8: three levels of shuffle + add, the same tree for
 * every key) into one vector of 8 scores; the group's maximum, an 8-lane exp (Cephes'
 * polynomial, within 2 ulp), the probabilities' sum (a fixed tree) and the output update
 * (acc * correction, then one FMA per key and element, keys in order). Cost per query
 * vector and key: head_dim / 4 FMA lanes-of-8 plus about 10 shuffle/exp operations per
 * 8 keys. Every function carries the target attribute and is reached only through the
 * table, after kernels/cpu/qmm_isa.c has checked the CPU.
 */
#include "kernels/cpu/attn_impl.h"

#ifdef ATTN_X86
#include <float.h>
#include <immintrin.h>
#include <math.h>

#include "common/base/dtype.h"

#define ATTN_W 8
#define ATTN_TARGET __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) ATTN_TARGET

/* exp per lane: Cephes' expf (range reduction by ln 2 in two parts, degree-5 polynomial);
 * lanes below -87.3 (past the smallest normal) give 0. */
INL __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f);
    const __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.37626f));
    __m256 n = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
    n = _mm256_floor_ps(n);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x);
    y = _mm256_add_ps(y, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(tiny, y);
}

/* Lane k of the result = the sum of a[k]'s lanes by the tree ((x_i + x_i+4) + (.. + ..+2))
 * + (.. + ..+1): the same additions for every k. */
INL __m256 reduce8(const __m256 a[8])
{
    __m256 b[4], c[2];
    for (int i = 0; i < 4; i++)
        b[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x20),
                             _mm256_permute2f128_ps(a[2 * i], a[2 * i + 1], 0x31));
    /* b[i]: key 2i in the low half, 2i+1 in the high half, 4 partial sums each */
    for (int i = 0; i < 2; i++)
        c[i] = _mm256_add_ps(_mm256_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* c[i], half h: keys 4i+h, 4i+2+h with 2 partial sums each */
    const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* lane 4h + t holds key h + 2t: put key k in lane k */
    return _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

INL float hsum8(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

INL float hmax8(__m256 v)
{
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* One query vector q (scaled) with running max *m, sum *l and output acc meets keys
 * kp[j * hd], values vp[j * hd], j < gn (<= 8); only j0 <= j < j1 count. */
INL void group_step(const float *q, float *acc, float *m, float *l, const float *kp,
                    const float *vp, int hd, int gn, int j0, int j1)
{
    __m256 a[8];
    const float *kr[8];
    for (int j = 0; j < 8; j++) {
        a[j] = _mm256_setzero_ps();
        kr[j] = kp + (size_t)(j < gn ? j : gn - 1) * hd; /* past the block: a copy, unused */
    }
    for (int c = 0; c < hd; c += 8) { /* 8 keys in flight, q read once per 8 */
        const __m256 qc = _mm256_load_ps(q + c);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            a[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kr[j] + c), a[j]);
    }
    const __m256 s = reduce8(a);
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 valid = _mm256_castsi256_ps(_mm256_and_si256(
        _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(j0 - 1)),
        _mm256_cmpgt_epi32(_mm256_set1_epi32(j1), idx)));
    const float gmax = hmax8(_mm256_blendv_ps(_mm256_set1_ps(-FLT_MAX), s, valid));
    const float m_new = gmax > *m ? gmax : *m;
    const float corr = m_new == *m ? 1.0f : expf(*m - m_new); /* expf(0) is 1 exactly */
    const __m256 p = _mm256_and_ps(exp8(_mm256_sub_ps(s, _mm256_set1_ps(m_new))), valid);
    *l = fmaf(*l, corr, hsum8(p));
    *m = m_new;
    _Alignas(32) float pa[8];
    _mm256_store_ps(pa, p);
    const __m256 vc = _mm256_set1_ps(corr);
    for (int c0 = 0; c0 < hd; c0 += 64) { /* 8 accumulators at a time */
        const int cn = hd - c0 < 64 ? (hd - c0) / 8 : 8;
        __m256 o[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) /* a product with 1 is exact: skipped */
            o[k] = k >= cn      ? _mm256_setzero_ps()
                   : corr == 1.0f ? _mm256_load_ps(acc + c0 + 8 * k)
                                  : _mm256_mul_ps(_mm256_load_ps(acc + c0 + 8 * k), vc);
        for (int j = j0; j < j1; j++) {
            const __m256 pj = _mm256_set1_ps(pa[j]);
            const float *vr = vp + (size_t)j * hd + c0;
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                if (k < cn)
                    o[k] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 8 * k), o[k]);
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            if (k < cn)
                _mm256_store_ps(acc + c0 + 8 * k, o[k]);
    }
}

/* n (a multiple of 8) f16 or bf16 elements to f32: exact. */
INL void widen(const uint16_t *src, int dtype, float *dst, int n)
{
    for (int i = 0; i < n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        const __m256 f = dtype == DT_F16
                             ? _mm256_cvtph_ps(h)
                             : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        _mm256_store_ps(dst + i, f);
    }
}

#define ATTN_TILE_NAME tile_avx2
#include "kernels/cpu/attn_tile_body.h"

/* Eight f32 lanes to eight u16 in order. */
INL __m128i pack8(__m256i v)
{
    const __m256i p = _mm256_packus_epi32(v, v); /* per 128-bit half: lo4 lo4 | hi4 hi4 */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0)));
}

/* Groups of 8 holding a NaN go through the scalar converter (dtype.h's NaN rule). */
ATTN_TARGET static void to_f16_avx2(const float *x, uint16_t *y, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)))
            for (int k = 0; k < 8; k++)
                y[i + k] = f32_to_fp16(x[i + k]);
        else
            _mm_storeu_si128((__m128i *)(y + i),
                             _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++)
        y[i] = f32_to_fp16(x[i]);
}

ATTN_TARGET static void to_bf16_avx2(const float *x, uint16_t *y, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int k = 0; k < 8; k++)
                y[i + k] = f32_to_bf16(x[i + k]);
            continue;
        }
        /* round to nearest even: add 0x7fff plus the lowest kept bit, keep the top half */
        const __m256i b = _mm256_castps_si256(v);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
        const __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), odd), 16);
        _mm_storeu_si128((__m128i *)(y + i), pack8(r));
    }
    for (; i < n; i++)
        y[i] = f32_to_bf16(x[i]);
}

const attn_path attn_path_avx2 = {tile_avx2, 8, to_f16_avx2, to_bf16_avx2};
#endif
