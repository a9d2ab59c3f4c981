/* qmm_avx2_exact.c - exact-mode kernels of qmatmul.h for AVX2 + FMA + F16C.
 *
 * Each weight block is decoded eight elements at a time straight into f32 lanes, bit for
 * bit as dtype_to_f32 does: every format's scale times code is exact in f32 (an f16 scale
 * has 11 significant bits, a K sub-block scale 6 more, a code at most 8), so a fused
 * multiply-add or a multiply gives the reference's value, offsets included. The decoded
 * vector then meets each activation row of the tile with one FMA into that pair's single
 * 8-lane accumulator; the lanes are summed in a fixed order at the end. The order of
 * additions is thus fixed by n_in alone, whatever the tile.
 *
 * Tile shapes (weight rows x activation rows): 4x1, 4x2, 2x4 - at most 8 accumulators plus
 * the decoded vectors in the 16 ymm registers. Cost per 8 weights: 3 to 8 decode
 * operations per weight row, one FMA per pair. F32/F16/BF16 rows may end in a partial
 * vector (zero-padded weights, masked activations: zeros add nothing).
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include <immintrin.h>
#include <string.h>

#define T2 __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) T2
#define UNROLL _Pragma("GCC unroll 8")

/* Per-32-element-block state of one weight row: scale, offset (or the second 16
 * elements' scale for Q6_K), high bits broadcast. */
typedef struct st2 {
    __m256 a, b;
    __m256i h;
} st2;

INL float half_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
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

INL st2 prep(int f, const uint8_t *w, int b)
{
    st2 s = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_si256()};
    uint32_t qh;
    int sc, m;
    const uint8_t *p;
    switch (f) {
    case QF_Q8_0: s.a = _mm256_set1_ps(half_at(w + 34 * (size_t)b)); break;
    case QF_Q4_0: s.a = _mm256_set1_ps(half_at(w + 18 * (size_t)b)); break;
    case QF_Q4_1:
        p = w + 20 * (size_t)b;
        s.a = _mm256_set1_ps(half_at(p)), s.b = _mm256_set1_ps(half_at(p + 2));
        break;
    case QF_Q5_0:
        p = w + 22 * (size_t)b;
        memcpy(&qh, p + 2, 4);
        s.a = _mm256_set1_ps(half_at(p)), s.h = _mm256_set1_epi32((int)qh);
        break;
    case QF_Q5_1:
        p = w + 24 * (size_t)b;
        memcpy(&qh, p + 4, 4);
        s.a = _mm256_set1_ps(half_at(p)), s.b = _mm256_set1_ps(half_at(p + 2));
        s.h = _mm256_set1_epi32((int)qh);
        break;
    case QF_Q4_K:
    case QF_Q5_K:
        p = w + (f == QF_Q4_K ? 144 : 176) * (size_t)(b >> 3);
        scale_min_k4(b & 7, p + 4, &sc, &m);
        s.a = _mm256_set1_ps(half_at(p) * (float)sc);
        s.b = _mm256_set1_ps(half_at(p + 2) * (float)m);
        break;
    case QF_Q6_K: {
        p = w + 210 * (size_t)(b >> 3);
        const int8_t *scs = (const int8_t *)p + 192 + 8 * ((b & 7) >> 2) + 2 * (b & 3);
        const float d = half_at(p + 208);
        s.a = _mm256_set1_ps(d * (float)scs[0]), s.b = _mm256_set1_ps(d * (float)scs[1]);
        break;
    }
    default: break;
    }
    return s;
}

/* Elements 8v .. 8v + 7 of 32-element block b of row w (f32 lanes, the reference values). */
INL __m256 vec(int f, const uint8_t *w, int b, const st2 *s, int v)
{
    const __m256i one = _mm256_set1_epi32(1);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const uint8_t *p;
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
        p = w + (f == QF_Q5_0 ? 22 * (size_t)b + 6 : 24 * (size_t)b + 8);
        const __m256i sh = _mm256_add_epi32(lane, _mm256_set1_epi32(8 * v));
        const __m256i h = _mm256_and_si256(_mm256_srlv_epi32(s->h, sh), one);
        c = _mm256_or_si256(nib8(p + 8 * (v & 1), v >> 1), _mm256_slli_epi32(h, 4));
        if (f == QF_Q5_1)
            return _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), s->a, s->b);
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(c, _mm256_set1_epi32(16))), s->a);
    }
    case QF_Q4_K:
        p = w + 144 * (size_t)(b >> 3) + 16 + 32 * ((b & 7) >> 1);
        c = nib8(p + 8 * v, b & 1);
        return _mm256_fmsub_ps(_mm256_cvtepi32_ps(c), s->a, s->b);
    case QF_Q5_K: {
        p = w + 176 * (size_t)(b >> 3);
        const __m256i h = _mm256_srl_epi32(bytes8(p + 16 + 8 * v), _mm_cvtsi32_si128(b & 7));
        c = nib8(p + 48 + 32 * ((b & 7) >> 1) + 8 * v, b & 1);
        c = _mm256_or_si256(c, _mm256_slli_epi32(_mm256_and_si256(h, one), 4));
        return _mm256_fmsub_ps(_mm256_cvtepi32_ps(c), s->a, s->b);
    }
    default: { /* QF_Q6_K: quarter q of half hf */
        const int hf = (b & 7) >> 2, q = b & 3;
        p = w + 210 * (size_t)(b >> 3);
        c = nib8(p + 64 * hf + 32 * (q & 1) + 8 * v, q >> 1);
        const __m256i h = _mm256_srl_epi32(bytes8(p + 128 + 32 * hf + 8 * v), _mm_cvtsi32_si128(2 * q));
        c = _mm256_or_si256(c, _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(3)), 4));
        c = _mm256_sub_epi32(c, _mm256_set1_epi32(32));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(c), v < 2 ? s->a : s->b);
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

INL float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

INL void tile(qmm_tile *t, const int f, const int OT, const int RT)
{
    __m256 acc[QMM_MAX_OT][QMM_MAX_RT];
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            acc[o][r] = _mm256_setzero_ps();
    const int nb = t->n_in / 32;
    for (int b = 0; b < nb; b++) {
        st2 s[QMM_MAX_OT];
        UNROLL for (int o = 0; o < OT; o++)
            s[o] = prep(f, t->w[o], b);
        UNROLL for (int v = 0; v < 4; v++) {
            __m256 wv[QMM_MAX_OT];
            UNROLL for (int o = 0; o < OT; o++)
                wv[o] = vec(f, t->w[o], b, &s[o], v);
            UNROLL for (int r = 0; r < RT; r++) {
                const __m256 xv = _mm256_loadu_ps((const float *)t->x[r] + 32 * b + 8 * v);
                UNROLL for (int o = 0; o < OT; o++)
                    acc[o][r] = _mm256_fmadd_ps(wv[o], xv, acc[o][r]);
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
