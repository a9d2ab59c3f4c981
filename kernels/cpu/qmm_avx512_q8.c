/* qmm_avx512_q8.c - Q8-mode kernels of qmatmul.h for AVX-512 F/BW/VL with VNNI (and, for
 * BF16 weights, AVX512-BF16).
 *
 * The integer products of qmm_avx2_q8.c, 64 elements per instruction:
 *   legacy formats  two blocks per zmm (an odd last block pairs with zeros, which add
 *                   nothing); vpdpbusd (u8 x s8, four products summed into s32 with no
 *                   16-bit step) on unsigned codes (Q4_1, Q5_1) or, for the signed formats,
 *                   on |w| against q negated where w < 0 (a masked subtract: AVX-512 has no
 *                   vpsignb); one f32 scale per block half.
 *   K formats       per super-block the codes of each weight row unpacked once to a stack
 *                   buffer; per pair, maddubs then vpdpwssd by the s16 scale of each
 *                   16-element group (one instruction for llama.cpp's madd + add), Q6_K's
 *                   offset and Q4_K/Q5_K's mins from the activations' per-16 sums.
 *   BF16            vdpbf16ps on the weights and the bf16 activations: 32 products per
 *                   instruction, summed in f32 (the instruction flushes bf16 subnormals).
 * Integer parts are exact, so results differ from the scalar path's only in the order of
 * f32 additions, fixed by n_in. Tile shapes: 4x1, 4x2, 4x4, 2x8. qmm_isa.c installs these
 * kernels only on CPUs with AVX512-VNNI (the BF16 ones only with AVX512-BF16); the AVX-512
 * path uses the AVX2 Q8 kernels otherwise.
 */
#include "kernels/cpu/qmm_impl.h"

#ifdef QMM_X86
#include <immintrin.h>
#include <string.h>

#define T5V __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define T5B __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) T5V
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

/* ---- legacy formats ---- */

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

INL void tile_legacy(qmm_tile *t, const int f, const int OT, const int RT)
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
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            t->res[o][r] = hsum(acc[o][r]);
}

/* ---- K formats ---- */

typedef struct kw {
    __m512i c[4];   /* codes, 64 elements each */
    __m512i sc[4];  /* s16 scale of each maddubs lane (two elements) of c[i] */
    __m256i mins;   /* s16 per 16-element group: mins (Q4_K/Q5_K) or the scales (Q6_K) */
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
        k->mins = sc;
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

INL void tile_k(qmm_tile *t, const int f, const int OT, const int RT)
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
    UNROLL for (int o = 0; o < OT; o++)
        UNROLL for (int r = 0; r < RT; r++)
            t->res[o][r] = hsum(acc[o][r]);
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
