/* qmm_avx512_exact.c - exact-mode kernels of qmatmul.h for AVX-512 F/BW/VL.
 *
 * The AVX2 kernels' design (qmm_avx2_exact.c) at twice the width: each 32-element block is
 * decoded sixteen elements at a time into f32 lanes, bit for bit as dtype_to_f32 does,
 * and meets each activation row of the tile with one FMA into that pair's single 16-lane
 * accumulator; lanes are summed in a fixed order at the end, so the order of additions is
 * fixed by n_in alone. F32/F16/BF16 rows ending in a partial vector use masked loads (no
 * padding copies). Tile shapes: 4x1, 4x2, 4x4, 2x8 - up to 16 accumulators in the 32 zmm
 * registers. Every function carries the AVX-512 target attribute and is reached only
 * through the table, after qmm_isa.c has checked the CPU.
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include <immintrin.h>
#include <string.h>

#define T5 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) T5
#define UNROLL _Pragma("GCC unroll 8")

typedef struct st5 {
    __m512 a, b;
    __m512i h;
} st5;

INL float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

INL __m512i bytes16(const uint8_t *p)
{
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

INL __m512i nib16(const uint8_t *p, int hi)
{
    __m512i v = bytes16(p);
    return hi ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, _mm512_set1_epi32(15));
}

INL void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

INL st5 prep(int f, const uint8_t *w, int b)
{
    st5 s = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_si512()};
    uint32_t qh;
    int sc, m;
    const uint8_t *p;
    switch (f) {
    case QF_Q8_0: s.a = _mm512_set1_ps(half_at(w + 34 * (size_t)b)); break;
    case QF_Q4_0: s.a = _mm512_set1_ps(half_at(w + 18 * (size_t)b)); break;
    case QF_Q4_1:
        p = w + 20 * (size_t)b;
        s.a = _mm512_set1_ps(half_at(p)), s.b = _mm512_set1_ps(half_at(p + 2));
        break;
    case QF_Q5_0:
        p = w + 22 * (size_t)b;
        memcpy(&qh, p + 2, 4);
        s.a = _mm512_set1_ps(half_at(p)), s.h = _mm512_set1_epi32((int)qh);
        break;
    case QF_Q5_1:
        p = w + 24 * (size_t)b;
        memcpy(&qh, p + 4, 4);
        s.a = _mm512_set1_ps(half_at(p)), s.b = _mm512_set1_ps(half_at(p + 2));
        s.h = _mm512_set1_epi32((int)qh);
        break;
    case QF_Q4_K:
    case QF_Q5_K:
        p = w + (f == QF_Q4_K ? 144 : 176) * (size_t)(b >> 3);
        scale_min_k4(b & 7, p + 4, &sc, &m);
        s.a = _mm512_set1_ps(half_at(p) * (float)sc);
        s.b = _mm512_set1_ps(half_at(p + 2) * (float)m);
        break;
    case QF_Q6_K: {
        p = w + 210 * (size_t)(b >> 3);
        const int8_t *scs = (const int8_t *)p + 192 + 8 * ((b & 7) >> 2) + 2 * (b & 3);
        const float d = half_at(p + 208);
        s.a = _mm512_set1_ps(d * (float)scs[0]), s.b = _mm512_set1_ps(d * (float)scs[1]);
        break;
    }
    default: break;
    }
    return s;
}

/* Elements 16v .. 16v + 15 of 32-element block b of row w, the reference values. */
INL __m512 vec(int f, const uint8_t *w, int b, const st5 *s, int v)
{
    const __m512i one = _mm512_set1_epi32(1);
    const uint8_t *p;
    __m512i c;
    switch (f) {
    case QF_F32: return _mm512_loadu_ps((const float *)w + 32 * (size_t)b + 16 * v);
    case QF_F16:
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + 64 * (size_t)b + 32 * v)));
    case QF_BF16:
        c = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + 64 * (size_t)b + 32 * v)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(c, 16));
    case QF_Q8_0:
        c = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + 34 * (size_t)b + 2 + 16 * v)));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(c), s->a);
    case QF_Q4_0:
        c = nib16(w + 18 * (size_t)b + 2, v);
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c, _mm512_set1_epi32(8))), s->a);
    case QF_Q4_1:
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(nib16(w + 20 * (size_t)b + 4, v)), s->a, s->b);
    case QF_Q5_0:
    case QF_Q5_1: {
        p = w + (f == QF_Q5_0 ? 22 * (size_t)b + 6 : 24 * (size_t)b + 8);
        const __m512i sh = _mm512_add_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(16 * v));
        const __m512i h = _mm512_and_si512(_mm512_srlv_epi32(s->h, sh), one);
        c = _mm512_or_si512(nib16(p, v), _mm512_slli_epi32(h, 4));
        if (f == QF_Q5_1)
            return _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), s->a, s->b);
        return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c, _mm512_set1_epi32(16))), s->a);
    }
    case QF_Q4_K:
        p = w + 144 * (size_t)(b >> 3) + 16 + 32 * ((b & 7) >> 1);
        return _mm512_fmsub_ps(_mm512_cvtepi32_ps(nib16(p + 16 * v, b & 1)), s->a, s->b);
    case QF_Q5_K: {
        p = w + 176 * (size_t)(b >> 3);
        const __m512i h = _mm512_srl_epi32(bytes16(p + 16 + 16 * v), _mm_cvtsi32_si128(b & 7));
        c = nib16(p + 48 + 32 * ((b & 7) >> 1) + 16 * v, b & 1);
        c = _mm512_or_si512(c, _mm512_slli_epi32(_mm512_and_si512(h, one), 4));
        return _mm512_fmsub_ps(_mm512_cvtepi32_ps(c), s->a, s->b);
    }
    default: { /* QF_Q6_K: quarter q of half hf */
        const int hf = (b & 7) >> 2, q = b & 3;
        p = w + 210 * (size_t)(b >> 3);
        c = nib16(p + 64 * hf + 32 * (q & 1) + 16 * v, q >> 1);
        const __m512i h = _mm512_srl_epi32(bytes16(p + 128 + 32 * hf + 16 * v), _mm_cvtsi32_si128(2 * q));
        c = _mm512_or_si512(c, _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(3)), 4));
        c = _mm512_sub_epi32(c, _mm512_set1_epi32(32));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(c), v ? s->b : s->a);
    }
    }
}

/* F32/F16/BF16 elements e .. e + 15 under mask m (lanes off read nothing and are 0). */
INL __m512 float_masked(int f, const uint8_t *w, int e, __mmask16 m)
{
    if (f == QF_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)w + e);
    const __m256i h = _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, (const uint16_t *)w + e));
    if (f == QF_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INL float hsum(__m512 v)
{
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

INL void tile(qmm_tile *t, const int f, const int OT, const int RT)
{
    __m512 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm512_setzero_ps();
    const int nb = t->n_in / 32;
    for (int b = 0; b < nb; b++) {
        st5 s[QMM_MAX_OT];
        UNROLL for (int o = 0; o < OT; o++)
            s[o] = prep(f, t->w[o], b);
        UNROLL for (int v = 0; v < 2; v++) {
            __m512 wv[QMM_MAX_OT];
            UNROLL for (int o = 0; o < OT; o++)
                wv[o] = vec(f, t->w[o], b, &s[o], v);
            UNROLL for (int r = 0; r < RT; r++) {
                const __m512 xv = _mm512_loadu_ps((const float *)t->x[r] + 32 * b + 16 * v);
                UNROLL for (int o = 0; o < OT; o++)
                    acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
            }
        }
    }
    if (f == QF_F32 || f == QF_F16 || f == QF_BF16) {
        for (int e = nb * 32; e < t->n_in; e += 16) {
            const int k = t->n_in - e < 16 ? t->n_in - e : 16;
            const __mmask16 m = (__mmask16)((1u << k) - 1);
            __m512 wv[QMM_MAX_OT];
            UNROLL for (int o = 0; o < OT; o++)
                wv[o] = float_masked(f, t->w[o], e, m);
            UNROLL for (int r = 0; r < RT; r++) {
                const __m512 xv = _mm512_maskz_loadu_ps(m, (const float *)t->x[r] + e);
                UNROLL for (int o = 0; o < OT; o++)
                    acc[o][r] = _mm512_fmadd_ps(wv[o], xv, acc[o][r]);
            }
        }
    }
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            t->res[o][r] = hsum(acc[o][r]);
}

#define KERNELS(F)                                                                                 \
    T5 static void F##_1(qmm_tile *t) { tile(t, QF_##F, 4, 1); }                                   \
    T5 static void F##_2(qmm_tile *t) { tile(t, QF_##F, 4, 2); }                                   \
    T5 static void F##_4(qmm_tile *t) { tile(t, QF_##F, 4, 4); }                                   \
    T5 static void F##_8(qmm_tile *t) { tile(t, QF_##F, 2, 8); }
KERNELS(F32) KERNELS(F16) KERNELS(BF16) KERNELS(Q8_0) KERNELS(Q4_0) KERNELS(Q4_1) KERNELS(Q5_0)
KERNELS(Q5_1) KERNELS(Q4_K) KERNELS(Q5_K) KERNELS(Q6_K)

#define ROW(F) [QF_##F] = {{F##_1, 4, 1}, {F##_2, 4, 2}, {F##_4, 4, 4}, {F##_8, 2, 8}}
const qmm_kern qmm_avx512_exact[QF_COUNT][QMM_LEVELS] = {
    ROW(F32), ROW(F16), ROW(BF16), ROW(Q8_0), ROW(Q4_0), ROW(Q4_1),
    ROW(Q5_0), ROW(Q5_1), ROW(Q4_K), ROW(Q5_K), ROW(Q6_K),
};
#endif
