/* SPDX-License-Identifier: Apache-2.0 */
/* dtype.c - element and block types: sizes, half/bfloat16 conversion, dequantization.
 *
 * Design: one small table gives each computable type its name, block length and block
 * bytes; dtype_to_f32() walks whole blocks and hands each to a per-type decoder that
 * writes exactly ggml's reference result (dequantize_row_* in ggml-quants.c). Bit
 * exactness needs two things: the same float operations in the same order (scale * q,
 * then - or + the offset; never fused, which is why this library is compiled with
 * -ffp-contract=off), and an exact half -> float conversion, done here with integer bit
 * manipulation so no compiler or CPU flag can change it. Blocks are read with memcpy
 * because a row range inside a mapped file has no alignment.
 *
 * Conversions down to half and bfloat16 round to nearest, ties to even; out-of-range
 * values become infinities; NaN stays NaN with its sign and top payload bits (a payload
 * that would vanish becomes the quiet NaN), so f16 -> f32 -> f16 and bf16 -> f32 -> bf16
 * are the identity on all 65536 bit patterns.
 */
#include "dtype.h"

#include <string.h>
#include <strings.h>

#include "common/base/status.h"

#define QK 32    /* elements per block of the legacy quants */
#define QK_K 256 /* elements per super-block of the k-quants */

typedef void (*dequant_fn)(const uint8_t *blk, float *y);

struct dtype_info {
    int id;
    const char *name;
    int block_elems;
    size_t block_bytes;
    dequant_fn dequant;
};

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) /* inf / NaN: payload kept */
        return bits_to_f32(sign | 0x7f800000u | (mant << 13));
    if (exp != 0)
        return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0)
        return bits_to_f32(sign);
    /* subnormal: normalise into an f32 normal number (exact) */
    uint32_t e = 113;
    while (!(mant & 0x400)) {
        mant <<= 1;
        e--;
    }
    return bits_to_f32(sign | (e << 23) | ((mant & 0x3ff) << 13));
}

uint16_t f32_to_fp16(float f)
{
    uint32_t x = f32_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) { /* NaN */
        uint32_t m = (ax >> 13) & 0x3ff;
        return (uint16_t)(sign | 0x7c00 | (m ? m : 0x200));
    }
    if (ax >= 0x477ff000u) /* >= 65520 rounds past the largest half: inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax >= 0x38800000u) { /* normal half: rebias, round the 13 dropped bits */
        uint32_t h = (ax - 0x38000000u) >> 13;
        uint32_t rem = ax & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
            h++; /* a carry into the exponent is the correct result */
        return (uint16_t)(sign | h);
    }
    /* subnormal half (units of 2^-24) or zero */
    uint32_t exp = ax >> 23;
    if (exp < 102) /* below 2^-25: rounds to zero */
        return sign;
    uint32_t mant = (ax & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exp; /* 14 .. 24 */
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
        h++; /* may become 0x400, the smallest normal: still correct */
    return (uint16_t)(sign | h);
}

float bf16_to_f32(uint16_t h)
{
    return bits_to_f32((uint32_t)h << 16);
}

uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) { /* NaN */
        uint16_t top = (uint16_t)(x >> 16);
        return (top & 0x7f) ? top : (uint16_t)(top | 0x40);
    }
    /* round to nearest even; overflow to inf falls out of the carry */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* ---- per-block decoders (ggml reference semantics) ---- */

static void deq_f32(const uint8_t *b, float *y)
{
    memcpy(y, b, sizeof *y);
}

static void deq_f16(const uint8_t *b, float *y)
{
    *y = fp16_to_f32(rd16(b));
}

static void deq_bf16(const uint8_t *b, float *y)
{
    *y = bf16_to_f32(rd16(b));
}

/* Q4_0: f16 d, 16 bytes of nibbles; low nibbles are elements 0..15, high 16..31. */
static void deq_q4_0(const uint8_t *b, float *y)
{
    const float d = fp16_to_f32(rd16(b));
    const uint8_t *qs = b + 2;
    for (int j = 0; j < QK / 2; j++) {
        const int x0 = (qs[j] & 0x0f) - 8;
        const int x1 = (qs[j] >> 4) - 8;
        y[j] = (float)x0 * d;
        y[j + QK / 2] = (float)x1 * d;
    }
}

/* Q4_1: f16 d, f16 m, nibbles; y = q * d + m. */
static void deq_q4_1(const uint8_t *b, float *y)
{
    const float d = fp16_to_f32(rd16(b));
    const float m = fp16_to_f32(rd16(b + 2));
    const uint8_t *qs = b + 4;
    for (int j = 0; j < QK / 2; j++) {
        const int x0 = qs[j] & 0x0f;
        const int x1 = qs[j] >> 4;
        y[j] = (float)x0 * d + m;
        y[j + QK / 2] = (float)x1 * d + m;
    }
}

/* Q5_0: f16 d, 32 high bits (bit j belongs to element j), nibbles; centred on 16. */
static void deq_q5_0(const uint8_t *b, float *y)
{
    const float d = fp16_to_f32(rd16(b));
    const uint32_t qh = rd32(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < QK / 2; j++) {
        const int h0 = (int)((qh >> j) & 1) << 4;
        const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
        const int x0 = ((qs[j] & 0x0f) | h0) - 16;
        const int x1 = ((qs[j] >> 4) | h1) - 16;
        y[j] = (float)x0 * d;
        y[j + QK / 2] = (float)x1 * d;
    }
}

/* Q5_1: f16 d, f16 m, 32 high bits, nibbles; y = q * d + m. */
static void deq_q5_1(const uint8_t *b, float *y)
{
    const float d = fp16_to_f32(rd16(b));
    const float m = fp16_to_f32(rd16(b + 2));
    const uint32_t qh = rd32(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < QK / 2; j++) {
        const int h0 = (int)((qh >> j) & 1) << 4;
        const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
        const int x0 = (qs[j] & 0x0f) | h0;
        const int x1 = (qs[j] >> 4) | h1;
        y[j] = (float)x0 * d + m;
        y[j + QK / 2] = (float)x1 * d + m;
    }
}

/* Q8_0: f16 d, 32 signed bytes. */
static void deq_q8_0(const uint8_t *b, float *y)
{
    const float d = fp16_to_f32(rd16(b));
    for (int j = 0; j < QK; j++)
        y[j] = (float)(int8_t)b[2 + j] * d;
}

/* The 12-byte table of eight 6-bit scales and eight 6-bit mins shared by Q4_K and Q5_K. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q4_K: f16 d, f16 dmin, 12 bytes of scales/mins, 128 bytes of nibbles. Each 64 elements
 * use one 32-byte run: low nibbles with sub-block scale 2k, high nibbles with 2k + 1. */
static void deq_q4_k(const uint8_t *b, float *y)
{
    const float d = fp16_to_f32(rd16(b));
    const float dmin = fp16_to_f32(rd16(b + 2));
    const uint8_t *scales = b + 4;
    const uint8_t *q = b + 16;
    int is = 0;
    for (int j = 0; j < QK_K; j += 64) {
        uint8_t sc, m;
        scale_min_k4(is + 0, scales, &sc, &m);
        const float d1 = d * (float)sc;
        const float m1 = dmin * (float)m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * (float)sc;
        const float m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)(q[l] & 0x0f) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)(q[l] >> 4) - m2;
        q += 32;
        is += 2;
    }
}

/* Q5_K: Q4_K plus 32 bytes of fifth bits; bit k of qh[l] belongs to sub-block k. */
static void deq_q5_k(const uint8_t *b, float *y)
{
    const float d = fp16_to_f32(rd16(b));
    const float dmin = fp16_to_f32(rd16(b + 2));
    const uint8_t *scales = b + 4;
    const uint8_t *qh = b + 16;
    const uint8_t *ql = b + 48;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64) {
        uint8_t sc, m;
        scale_min_k4(is + 0, scales, &sc, &m);
        const float d1 = d * (float)sc;
        const float m1 = dmin * (float)m;
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * (float)sc;
        const float m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (float)((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        ql += 32;
        is += 2;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

/* Q6_K: 128 bytes low nibbles, 64 bytes of 2-bit highs, 16 int8 scales, f16 d. Each half
 * of 128 elements interleaves four 32-element quarters; y = d * scale * (q - 32). */
static void deq_q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b;
    const uint8_t *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = fp16_to_f32(rd16(b + 208));
    for (int n = 0; n < QK_K; n += 128) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * (float)sc[is + 0] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

static const struct dtype_info dtype_table[] = {
    {DT_F32, "F32", 1, 4, deq_f32},
    {DT_F16, "F16", 1, 2, deq_f16},
    {DT_Q4_0, "Q4_0", QK, 18, deq_q4_0},
    {DT_Q4_1, "Q4_1", QK, 20, deq_q4_1},
    {DT_Q5_0, "Q5_0", QK, 22, deq_q5_0},
    {DT_Q5_1, "Q5_1", QK, 24, deq_q5_1},
    {DT_Q8_0, "Q8_0", QK, 34, deq_q8_0},
    {DT_Q4_K, "Q4_K", QK_K, 144, deq_q4_k},
    {DT_Q5_K, "Q5_K", QK_K, 176, deq_q5_k},
    {DT_Q6_K, "Q6_K", QK_K, 210, deq_q6_k},
    {DT_BF16, "BF16", 1, 2, deq_bf16},
};

static const struct dtype_info *dtype_lookup(int dtype)
{
    for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (dtype_table[i].id == dtype)
            return &dtype_table[i];
    return NULL;
}

bool dtype_supported(int dtype)
{
    return dtype_lookup(dtype) != NULL;
}

const char *dtype_name(int dtype)
{
    const struct dtype_info *t = dtype_lookup(dtype);
    return t ? t->name : "unknown";
}

int dtype_parse(const char *name, int *out)
{
    for (size_t i = 0; name && i < sizeof dtype_table / sizeof dtype_table[0]; i++)
        if (!strcasecmp(name, dtype_table[i].name)) {
            if (out)
                *out = dtype_table[i].id;
            return DERAS_OK;
        }
    return deras_fail(DERAS_EINVAL, "'%.32s' is not a tensor type (F32, F16, BF16, Q8_0, Q4_0, "
                      "Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)", name ? name : "(null)");
}

int dtype_block_elems(int dtype)
{
    const struct dtype_info *t = dtype_lookup(dtype);
    return t ? t->block_elems : 0;
}

size_t dtype_block_bytes(int dtype)
{
    const struct dtype_info *t = dtype_lookup(dtype);
    return t ? t->block_bytes : 0;
}

int dtype_nbytes(int dtype, int64_t n_elems, size_t *out)
{
    const struct dtype_info *t = dtype_lookup(dtype);
    if (!out)
        return deras_fail(DERAS_EINVAL, "dtype_nbytes: out is NULL");
    if (!t)
        return deras_fail(DERAS_EUNSUPPORTED, "dtype %d is not a computable type", dtype);
    if (n_elems < 0)
        return deras_fail(DERAS_EINVAL, "dtype_nbytes: negative element count %lld",
                          (long long)n_elems);
    if (n_elems % t->block_elems)
        return deras_fail(DERAS_EFORMAT,
                          "%lld elements are not a whole number of %s blocks of %d",
                          (long long)n_elems, t->name, t->block_elems);
    uint64_t n_blocks = (uint64_t)(n_elems / t->block_elems);
    if (n_blocks > SIZE_MAX / t->block_bytes)
        return deras_fail(DERAS_ERANGE, "%lld %s elements overflow a byte count",
                          (long long)n_elems, t->name);
    *out = (size_t)n_blocks * t->block_bytes;
    return DERAS_OK;
}

int dtype_to_f32(int dtype, const void *src, float *dst, int64_t n_elems)
{
    const struct dtype_info *t = dtype_lookup(dtype);
    if (!t)
        return deras_fail(DERAS_EUNSUPPORTED, "dtype %d (%s) cannot be converted to f32", dtype,
                          dtype_name(dtype));
    if (n_elems < 0 || (n_elems > 0 && (!src || !dst)))
        return deras_fail(DERAS_EINVAL, "dtype_to_f32: bad arguments (n_elems %lld)",
                          (long long)n_elems);
    if (n_elems % t->block_elems)
        return deras_fail(DERAS_EFORMAT,
                          "%lld elements are not a whole number of %s blocks of %d",
                          (long long)n_elems, t->name, t->block_elems);
    if (n_elems == 0)
        return DERAS_OK;
    const uint8_t *p = src;
    const int64_t n_blocks = n_elems / t->block_elems;
    if (dtype == DT_F32) { /* the common case of unquantized checkpoints: one copy */
        memcpy(dst, src, (size_t)n_elems * sizeof(float));
        return DERAS_OK;
    }
    for (int64_t i = 0; i < n_blocks; i++)
        t->dequant(p + (size_t)i * t->block_bytes, dst + i * t->block_elems);
    return DERAS_OK;
}

int64_t tensor_view_numel(const tensor_view *v)
{
    if (!v)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < v->n_dims && i < TENSOR_MAX_DIMS; i++)
        n *= v->shape[i];
    return n;
}
