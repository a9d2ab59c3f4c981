/* SPDX-License-Identifier: Apache-2.0 */
/* quantize.c - f32 to the GGUF formats (see quantize.h).
 *
 * Each quantizer is ggml's quantize_row_*_ref for one block of 32, written so that every
 * float operation is the reference's, in its order, rounded to f32 on its own (this file
 * is compiled with -ffp-contract=off: a fused x * id + 8.5 would round once and differ).
 * The scale's f16 and the stored bytes are written with explicit little-endian stores,
 * so the output does not depend on dst's alignment. Converting a value outside a
 * format's range (NaN, inf) goes through clamps written so that NaN picks the lower end,
 * never through a float-to-integer cast of an unrepresentable value.
 */
#include "quantize.h"

#include <math.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"

#define QK 32

static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* trunc(v) clipped to [0, hi]; NaN gives 0. v >= 0 for finite inputs by construction. */
static uint8_t trunc_clip(float v, int hi)
{
    if (!(v >= 0.0f))
        return 0;
    return v >= (float)hi ? (uint8_t)hi : (uint8_t)(int)v;
}

static void q8_0_block(const float *x, uint8_t *b)
{
    float amax = 0.0f;
    for (int j = 0; j < QK; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(b, f32_to_fp16(d));
    for (int j = 0; j < QK; j++) {
        float v = roundf(x[j] * id);
        v = v > 127.0f ? 127.0f : v;
        v = v >= -127.0f ? v : (v == v ? -127.0f : 0.0f);
        b[2 + j] = (uint8_t)(int8_t)(int)v;
    }
}

/* Q4_0 and Q5_0: d from the element of largest magnitude, q = trunc(x / d + half). */
static float signed_max_scale(const float *x, float div)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++)
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max / div;
}

static void q4_0_block(const float *x, uint8_t *b)
{
    const float d = signed_max_scale(x, -8.0f);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(b, f32_to_fp16(d));
    for (int j = 0; j < QK / 2; j++) {
        const float x0 = x[j] * id, x1 = x[j + QK / 2] * id;
        b[2 + j] = (uint8_t)(trunc_clip(x0 + 8.5f, 15) | (trunc_clip(x1 + 8.5f, 15) << 4));
    }
}

static void q5_0_block(const float *x, uint8_t *b)
{
    const float d = signed_max_scale(x, -16.0f);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    wr16(b, f32_to_fp16(d));
    for (int j = 0; j < QK / 2; j++) {
        const float x0 = x[j] * id, x1 = x[j + QK / 2] * id;
        const uint8_t q0 = trunc_clip(x0 + 16.5f, 31), q1 = trunc_clip(x1 + 16.5f, 31);
        b[6 + j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
        qh |= (uint32_t)(q0 >> 4) << j;
        qh |= (uint32_t)(q1 >> 4) << (j + QK / 2);
    }
    for (int k = 0; k < 4; k++)
        b[2 + k] = (uint8_t)(qh >> (8 * k));
}

/* Q4_1 and Q5_1: d = (max - min) / levels, m = min, q = trunc((x - min) / d + 0.5). */
static void min_max(const float *x, float *min, float *max)
{
    float lo = 3.40282347e38f, hi = -3.40282347e38f;
    for (int j = 0; j < QK; j++) {
        lo = x[j] < lo ? x[j] : lo;
        hi = x[j] > hi ? x[j] : hi;
    }
    *min = lo;
    *max = hi;
}

static void q4_1_block(const float *x, uint8_t *b)
{
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    wr16(b, f32_to_fp16(d));
    wr16(b + 2, f32_to_fp16(min));
    for (int j = 0; j < QK / 2; j++) {
        const float x0 = (x[j] - min) * id, x1 = (x[j + QK / 2] - min) * id;
        b[4 + j] = (uint8_t)(trunc_clip(x0 + 0.5f, 15) | (trunc_clip(x1 + 0.5f, 15) << 4));
    }
}

static void q5_1_block(const float *x, uint8_t *b)
{
    float min, max;
    min_max(x, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint32_t qh = 0;
    wr16(b, f32_to_fp16(d));
    wr16(b + 2, f32_to_fp16(min));
    for (int j = 0; j < QK / 2; j++) {
        const float x0 = (x[j] - min) * id, x1 = (x[j + QK / 2] - min) * id;
        const uint8_t q0 = trunc_clip(x0 + 0.5f, 31), q1 = trunc_clip(x1 + 0.5f, 31);
        b[8 + j] = (uint8_t)((q0 & 0x0f) | ((q1 & 0x0f) << 4));
        qh |= (uint32_t)(q0 >> 4) << j;
        qh |= (uint32_t)(q1 >> 4) << (j + QK / 2);
    }
    for (int k = 0; k < 4; k++)
        b[4 + k] = (uint8_t)(qh >> (8 * k));
}

typedef void (*quant_fn)(const float *x, uint8_t *b);

static quant_fn block_quantizer(int dtype)
{
    switch (dtype) {
    case DT_Q8_0: return q8_0_block;
    case DT_Q4_0: return q4_0_block;
    case DT_Q4_1: return q4_1_block;
    case DT_Q5_0: return q5_0_block;
    case DT_Q5_1: return q5_1_block;
    default: return NULL;
    }
}

bool dtype_can_quantize(int dtype)
{
    return dtype == DT_F32 || dtype == DT_F16 || dtype == DT_BF16 || block_quantizer(dtype);
}

int dtype_from_f32(int dtype, const float *src, void *dst, int64_t n_elems)
{
    if (!dtype_can_quantize(dtype)) {
        const bool k = dtype == DT_Q4_K || dtype == DT_Q5_K || dtype == DT_Q6_K;
        return deras_fail(DERAS_EUNSUPPORTED, "converting weights to %s is not supported%s",
                          dtype_name(dtype),
                          k ? " (K formats are used as stored, never written: choose f32, f16, "
                              "bf16, q8_0, q4_0, q4_1, q5_0 or q5_1)"
                            : "");
    }
    if (n_elems < 0 || (n_elems > 0 && (!src || !dst)))
        return deras_fail(DERAS_EINVAL, "dtype_from_f32: bad arguments (n_elems %lld)",
                          (long long)n_elems);
    const int blk = dtype_block_elems(dtype);
    if (n_elems % blk)
        return deras_fail(DERAS_EFORMAT, "%lld elements are not a whole number of %s blocks of %d",
                          (long long)n_elems, dtype_name(dtype), blk);
    uint8_t *out = dst;
    switch (dtype) {
    case DT_F32:
        memcpy(dst, src, (size_t)n_elems * sizeof(float));
        return DERAS_OK;
    case DT_F16:
        for (int64_t i = 0; i < n_elems; i++)
            wr16(out + 2 * i, f32_to_fp16(src[i]));
        return DERAS_OK;
    case DT_BF16:
        for (int64_t i = 0; i < n_elems; i++)
            wr16(out + 2 * i, f32_to_bf16(src[i]));
        return DERAS_OK;
    default:
        break;
    }
    const quant_fn q = block_quantizer(dtype);
    const size_t bb = dtype_block_bytes(dtype);
    for (int64_t i = 0; i < n_elems / blk; i++)
        q(src + i * blk, out + (size_t)i * bb);
    return DERAS_OK;
}
