/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_avx2_exact.c - exact-mode kernels of qmatmul.h for AVX2 + FMA + F16C.
 *
 * Each weight block is decoded eight elements at a time straight into f32 lanes, bit for
 * bit as dtype_to_f32 does: every format's scale times code is exact in f32 (an f16 scale
 * has 11 significant bits, a K sub-block scale 6 more, a code at most 8), so a fused
 * multiply-add or a multiply gives the reference's value, offsets included. The decoded
 * vector then meets each activation row of the tile with one FMA into that pair's single
 * 8-lane accumulator; the lanes are summed in a fixed order at the end. The order of
 * additions is thus fixed by n_in alone, whatever the tile. Q4_0/Q4_1/Q8_0 widen bytes
 * straight from the block; Q5_0/Q5_1 and the K formats are first decoded to byte codes
 * (qmm_avx2_blocks.h: a K super-block's 256 codes and scales once per weight row), then
 * widened, converted and scaled; Q6_K's d * sc * (q - 32) is one fmsub of d * sc and
 * 32 * d * sc, exact like the rest.
 *
 * Tile shapes (weight rows x activation rows): 4x1, 4x2, 2x4 - at most 8 accumulators plus
 * the decoded vectors in the 16 ymm registers. Cost per 8 weights: 3 to 8 decode
 * operations per weight row, one FMA per pair. F32/F16/BF16 rows may end in a partial
 * vector (zero-padded weights, masked activations: zeros add nothing).
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include "kernels/cpu/qmm_avx2_blocks.h"

/* A K super-block of one weight row: codes and per-group f32 scale and subtracted
 * offset (Q4_K/Q5_K: a[j] = d * sc_j, a[8 + j] = dmin * m_j per 32-element sub-block j;
 * Q6_K: a[g] = d * sc_g, b[g] = 32 a[g] per 16-element group g). */
typedef struct kx {
    kw k;
    _Alignas(32) float a[16], b[16];
} kx;

INL void kx_unpack(int f, const uint8_t *p, kx *x)
{
    k_unpack(f, p, &x->k);
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(x->k.raw)));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(x->k.raw, 1)));
    const __m256 d = _mm256_set1_ps(x->k.d);
    _mm256_store_ps(x->a, _mm256_mul_ps(lo, d));
    _mm256_store_ps(x->a + 8, _mm256_mul_ps(hi, f == QF_Q6_K ? d : _mm256_set1_ps(x->k.dmin)));
    if (f == QF_Q6_K) {
        _mm256_store_ps(x->b, _mm256_mul_ps(_mm256_load_ps(x->a), _mm256_set1_ps(32.0f)));
        _mm256_store_ps(x->b + 8, _mm256_mul_ps(_mm256_load_ps(x->a + 8), _mm256_set1_ps(32.0f)));
    }
}

INL __m256i bytes8(const uint8_t *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* Nibbles of bytes p[0..7]: low ones (hi == 0) or high ones. */
INL __m256i nib8(const uint8_t *p, int hi)
{
    __m256i v = bytes8(p);
    return hi ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, _mm256_set1_epi32(15));
}

/* Per-32-element-block state of one weight row: scale, offset, byte codes. */
typedef struct st2 {
    __m256 a, b;
    __m256i c;
} st2;

INL st2 prep(int f, const uint8_t *w, int b)
{
    st2 s = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_si256()};
    const uint8_t *p;
    float d, m = 0.0f;
    switch (f) {
    case QF_Q8_0: s.a = _mm256_set1_ps(half_at(w + 34 * (size_t)b)); break;
    case QF_Q4_0: s.a = _mm256_set1_ps(half_at(w + 18 * (size_t)b)); break;
    case QF_Q4_1:
        p = w + 20 * (size_t)b;
        s.a = _mm256_set1_ps(half_at(p)), s.b = _mm256_set1_ps(half_at(p + 2));
        break;
    case QF_Q5_0:
    case QF_Q5_1:
        s.c = legacy_codes(f, w, b, &d, &m);
        s.a = _mm256_set1_ps(d), s.b = _mm256_set1_ps(m);
        break;
    default: break;
    }
    return s;
}

/* Elements 8v .. 8v + 7 of 32-element block b of row w (or of K sub-block j of x), the
 * reference values. */
INL __m256 vec(int f, const uint8_t *w, int b, const st2 *s, const kx *x, int j, int v)
{
    __m256i c;
    switch (f) {
    case QF_F32: return _mm256_loadu_ps((const float *)w + 32 * (size_t)b + 8 * v);
    case QF_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 64 * (size_t)b + 16 * v)));
    case QF_BF16:
        c = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(w + 64 * (size_t)b + 16 * v)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(c, 16));
    case QF_Q8_0:
        c = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w + 34 * (size_t)b + 2 + 8 * v)));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(c), s->a);
    case QF_Q4_0:
        c = nib8(w + 18 * (size_t)b + 2 + 8 * (v & 1), v >> 1);
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(8))), s->a);
    case QF_Q4_1:
        c = nib8(w + 20 * (size_t)b + 4 + 8 * (v & 1), v >> 1);
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), s->a, s->b);
    case QF_Q5_0:
    case QF_Q5_1: {
        const __m128i h = v >> 1 ? _mm256_extracti128_si256(s->c, 1) : _mm256_castsi256_si128(s->c);
        const __m128i q = v & 1 ? _mm_unpackhi_epi64(h, h) : h;
        c = _mm256_cvtepu8_epi32(q);
        if (f == QF_Q5_0)
            return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(16))), s->a);
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), s->a, s->b);
    }
    default: { /* K formats */
        const int g = f == QF_Q6_K ? 2 * j + (v >> 1) : j;
        c = bytes8(x->k.c + 32 * j + 8 * v);
        return _mm256_fmsub_ps(_mm256_cvtepi32_ps(c), _mm256_set1_ps(x->a[g]),
                               _mm256_set1_ps(f == QF_Q6_K ? x->b[g] : x->a[8 + g]));
    }
    }
}

/* F32/F16/BF16 elements e .. e + k - 1 (k <= 8), zero-padded. */
INL __m256 float_tail(int f, const uint8_t *w, int e, int k)
{
    const size_t es = f == QF_F32 ? 4 : 2;
    uint8_t buf[32] = {0};
    memcpy(buf, w + es * (size_t)e, es * (size_t)k);
    if (f == QF_F32)
        return _mm256_loadu_ps((const float *)buf);
    if (f == QF_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)buf));
    __m256i c = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)buf));
    return _mm256_castsi256_ps(_mm256_slli_epi32(c, 16));
}

INL void tile(qmm_tile *t, const int f, const int OT, const int RT)
{
    const int is_k = f == QF_Q4_K || f == QF_Q5_K || f == QF_Q6_K;
    const int per = is_k ? 8 : 1; /* 32-element blocks per step */
    const size_t kb = f == QF_Q4_K ? 144 : f == QF_Q5_K ? 176 : 210;
    __m256 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm256_setzero_ps();
    const int nb = t->n_in / 32;
    kx x[QMM_MAX_OT];
    for (int b0 = 0; b0 < nb; b0 += per) {
        if (is_k)
            UNROLL for (int o = 0; o < OT; o++)
                kx_unpack(f, t->w[o] + (size_t)(b0 / 8) * kb, &x[o]);
        for (int j = 0; j < per; j++) {
            st2 s[QMM_MAX_OT];
            UNROLL for (int o = 0; o < OT; o++)
                s[o] = prep(f, t->w[o], b0 + j);
            UNROLL for (int v = 0; v < 4; v++) {
                __m256 wv[QMM_MAX_OT];
                UNROLL for (int o = 0; o < OT; o++)
                    wv[o] = vec(f, t->w[o], b0 + j, &s[o], &x[o], j, v);
                UNROLL for (int r = 0; r < RT; r++) {
                    const __m256 xv = _mm256_loadu_ps((const float *)t->x[r] + 32 * (b0 + j) + 8 * v);
                    UNROLL for (int o = 0; o < OT; o++)
                        acc[o][r] = _mm256_fmadd_ps(wv[o], xv, acc[o][r]);
                }
            }
        }
    }
    if (f == QF_F32 || f == QF_F16 || f == QF_BF16) {
        for (int e = nb * 32; e < t->n_in; e += 8) {
            const int k = t->n_in - e < 8 ? t->n_in - e : 8;
            const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(k),
                                                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            __m256 wv[QMM_MAX_OT];
            UNROLL for (int o = 0; o < OT; o++)
                wv[o] = float_tail(f, t->w[o], e, k);
            UNROLL for (int r = 0; r < RT; r++) {
                const __m256 xv = _mm256_maskload_ps((const float *)t->x[r] + e, mask);
                UNROLL for (int o = 0; o < OT; o++)
                    acc[o][r] = _mm256_fmadd_ps(wv[o], xv, acc[o][r]);
            }
        }
    }
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            t->res[o][r] = hsum(acc[o][r]);
}

#define KERNELS(F)                                                                                 \
    T2 static void F##_1(qmm_tile *t) { tile(t, QF_##F, 4, 1); }                                   \
    T2 static void F##_2(qmm_tile *t) { tile(t, QF_##F, 4, 2); }                                   \
    T2 static void F##_4(qmm_tile *t) { tile(t, QF_##F, 2, 4); }
KERNELS(F32) KERNELS(F16) KERNELS(BF16) KERNELS(Q8_0) KERNELS(Q4_0) KERNELS(Q4_1) KERNELS(Q5_0)
KERNELS(Q5_1) KERNELS(Q4_K) KERNELS(Q5_K) KERNELS(Q6_K)

#define ROW(F) [QF_##F] = {{F##_1, 4, 1}, {F##_2, 4, 2}, {F##_4, 2, 4}, {NULL, 0, 0}}
const qmm_kern qmm_avx2_exact[QF_COUNT][QMM_LEVELS] = {
    ROW(F32), ROW(F16), ROW(BF16), ROW(Q8_0), ROW(Q4_0), ROW(Q4_1),
    ROW(Q5_0), ROW(Q5_1), ROW(Q4_K), ROW(Q5_K), ROW(Q6_K),
};
#endif
