/* SPDX-License-Identifier: Apache-2.0 */
/* attn_avx512.c - the AVX-512 (F/BW/VL) path of the CPU attention (attn_impl.h), for head
 * dims that are a multiple of 16.
 *
 * The AVX2 path's design (attn_avx2.c) at twice the width: a group is 16 keys, each dot
 * product one 16-lane accumulator over head_dim / 16 FMAs, reduced all at once by a
 * four-level transposing tree (reduce16, the same tree for every key); masks select the
 * keys a row sees. The KV element converters are the AVX2 ones (cache writes are a small
 * part of a step). Cost per query vector and key: head_dim / 8 FMA lanes-of-16 plus
 * about 5 shuffle/exp operations. Every function carries the target attribute and is
 * reached only through the table, after kernels/cpu/qmm_isa.c has checked the CPU.
 */
#include "kernels/cpu/attn_impl.h"

#ifdef ATTN_X86
#include <float.h>
#include <immintrin.h>
#include <math.h>

#include "common/base/dtype.h"

#define ATTN_W 16
#define ATTN_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) ATTN_TARGET

/* exp per lane, as attn_avx2.c's exp8 (the same polynomial and constants). */
INL __m512 exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33654f);
    const __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.37626f));
    __m512 n = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f));
    n = _mm512_roundscale_ps(n, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), x);
    __m512 y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), x);
    y = _mm512_add_ps(y, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    return _mm512_maskz_mov_ps((__mmask16)~tiny, y);
}

/* Lane k of the result = the sum of a[k]'s lanes by one tree (+8, +4, +2, +1 apart),
 * the same additions for every k. */
INL __m512 reduce16(const __m512 a[16])
{
    __m512 b[8], c[4], d[2];
    for (int i = 0; i < 8; i++) /* quarters: key 2i's halves, then key 2i+1's */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; i++) /* quarter g: key 4i + g, 4 partial sums */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; i++) /* quarter g: keys 8i + g, 8i + 4 + g, 2 partial sums each */
        d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* lane 4g + t holds key g + 4t: put key k in lane k */
    const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(perm, s);
}

/* attn_avx2.c's group_step with 16 keys, for C = head_dim / 16 vectors (a constant where
 * the caller dispatches on it, so q and the accumulators stay in registers). */
INL void group_step_c(const float *q, float *acc, float *m, float *l, const float *kp,
                      const float *vp, const int C, int gn, int j0, int j1)
{
    const int hd = 16 * C;
    __m512 qr[16], a[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++)
        qr[c] = c < C ? _mm512_load_ps(q + 16 * c) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) { /* past the block: a copy of the last key, unused */
        const float *row = kp + (size_t)(j < gn ? j : gn - 1) * hd;
        __m512 x = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int c = 0; c < C; c++)
            x = _mm512_fmadd_ps(qr[c], _mm512_loadu_ps(row + 16 * c), x);
        a[j] = x;
    }
    const __m512 s = reduce16(a);
    const __mmask16 valid = (__mmask16)(((1u << j1) - 1) & ~((1u << j0) - 1));
    const float gmax = _mm512_mask_reduce_max_ps(valid, s);
    const float m_new = gmax > *m ? gmax : *m;
    const float corr = m_new == *m ? 1.0f : expf(*m - m_new); /* expf(0) is 1 exactly */
    const __m512 p = _mm512_maskz_mov_ps(valid, exp16(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
    *l = fmaf(*l, corr, _mm512_reduce_add_ps(p));
    *m = m_new;
    _Alignas(64) float pa[16];
    _mm512_store_ps(pa, p);
    const __m512 vc = _mm512_set1_ps(corr);
    for (int c0 = 0; c0 < C; c0 += 8) { /* 8 accumulators at a time */
        const int cn = C - c0 < 8 ? C - c0 : 8;
        __m512 o[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) /* a product with 1 is exact: skipped */
            o[k] = k >= cn      ? _mm512_setzero_ps()
                   : corr == 1.0f ? _mm512_load_ps(acc + 16 * (c0 + k))
                                  : _mm512_mul_ps(_mm512_load_ps(acc + 16 * (c0 + k)), vc);
        for (int j = j0; j < j1; j++) {
            const __m512 pj = _mm512_set1_ps(pa[j]);
            const float *vr = vp + (size_t)j * hd + 16 * c0;
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                if (k < cn)
                    o[k] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vr + 16 * k), o[k]);
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            if (k < cn)
                _mm512_store_ps(acc + 16 * (c0 + k), o[k]);
    }
}

/* One query vector q (scaled) with running max *m, sum *l and output acc meets keys
 * kp[j * hd], values vp[j * hd], j < gn (<= 16); only j0 <= j < j1 count. The common head
 * dims get their own copy (the same arithmetic, unrolled). */
INL void group_step(const float *q, float *acc, float *m, float *l, const float *kp,
                    const float *vp, int hd, int gn, int j0, int j1)
{
    switch (hd) {
    case 64: group_step_c(q, acc, m, l, kp, vp, 4, gn, j0, j1); break;
    case 128: group_step_c(q, acc, m, l, kp, vp, 8, gn, j0, j1); break;
    default: group_step_c(q, acc, m, l, kp, vp, hd / 16, gn, j0, j1); break;
    }
}

/* n (a multiple of 16) f16 or bf16 elements to f32: exact. */
INL void widen(const uint16_t *src, int dtype, float *dst, int n)
{
    for (int i = 0; i < n; i += 16) {
        const __m256i h = _mm256_loadu_si256((const __m256i *)(src + i));
        const __m512 f = dtype == DT_F16
                             ? _mm512_cvtph_ps(h)
                             : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        _mm512_store_ps(dst + i, f);
    }
}

#define ATTN_TILE_NAME tile_avx512
#include "kernels/cpu/attn_tile_body.h"

const attn_path attn_path_avx512 = {tile_avx512, 16, NULL, NULL}; /* converters: AVX2's */
#endif
