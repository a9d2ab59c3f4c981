/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_ref.c - see qmm_ref.h. */
#include "qmm_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "test_util.h"

size_t qref_row_bytes(int dtype, int n_in)
{
    return (size_t)(n_in / dtype_block_elems(dtype)) * dtype_block_bytes(dtype);
}

static float uni(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (test_rng_float(s) * 0.5f + 0.5f);
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void random_bytes(uint8_t *p, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(test_rng_next(s) >> 56);
}

/* One block at p: random codes, realistic scales. */
static void random_block(int dtype, uint8_t *p, uint64_t *s)
{
    const size_t bytes = dtype_block_bytes(dtype);
    random_bytes(p, bytes, s);
    float d;
    switch (dtype) {
    case DT_F32: {
        float v = test_rng_float(s) * 0.1f;
        memcpy(p, &v, 4);
        break;
    }
    case DT_F16: put16(p, f32_to_fp16(test_rng_float(s) * 0.1f)); break;
    case DT_BF16: put16(p, f32_to_bf16(test_rng_float(s) * 0.1f)); break;
    case DT_Q8_0: put16(p, f32_to_fp16(uni(s, 2e-4f, 1e-3f))); break;
    case DT_Q4_0:
    case DT_Q5_0: put16(p, f32_to_fp16(uni(s, 2e-3f, 1e-2f))); break;
    case DT_Q4_1:
    case DT_Q5_1:
        d = uni(s, 2e-3f, 1e-2f);
        put16(p, f32_to_fp16(d));
        put16(p + 2, f32_to_fp16(-d * uni(s, dtype == DT_Q4_1 ? 6 : 13, dtype == DT_Q4_1 ? 9 : 18)));
        break;
    case DT_Q4_K:
    case DT_Q5_K:
        put16(p, f32_to_fp16(uni(s, 1e-4f, 6e-4f)));
        put16(p + 2, f32_to_fp16(uni(s, 1e-4f, 6e-4f)));
        break;
    case DT_Q6_K: put16(p + 208, f32_to_fp16(uni(s, 1e-5f, 6e-5f))); break;
    default: break;
    }
}

void qref_weights(int dtype, int n_out, int n_in, uint64_t *seed, uint8_t *out)
{
    const size_t bytes = dtype_block_bytes(dtype);
    const size_t n_blocks = (size_t)n_out * (size_t)(n_in / dtype_block_elems(dtype));
    for (size_t b = 0; b < n_blocks; b++)
        random_block(dtype, out + b * bytes, seed);
}

static float half_at(const uint8_t *p)
{
    return fp16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* |offset| of element i (0..block_elems-1) of the block at p. */
static float block_offset(int dtype, const uint8_t *p, int i)
{
    if (dtype == DT_Q4_1 || dtype == DT_Q5_1)
        return fabsf(half_at(p + 2));
    if (dtype != DT_Q4_K && dtype != DT_Q5_K)
        return 0.0f;
    const int j = i / 32;
    const uint8_t *q = p + 4;
    const int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    return fabsf(half_at(p + 2) * (float)m);
}

void qref_dequant(int dtype, const uint8_t *w, int n_out, int n_in, float *wf, float *wmin)
{
    const size_t row = qref_row_bytes(dtype, n_in);
    const int be = dtype_block_elems(dtype);
    const size_t bb = dtype_block_bytes(dtype);
    for (int o = 0; o < n_out; o++) {
        dtype_to_f32(dtype, w + o * row, wf + (size_t)o * n_in, n_in);
        for (int i = 0; wmin && i < n_in; i++)
            wmin[(size_t)o * n_in + i] = block_offset(dtype, w + o * row + (size_t)(i / be) * bb, i % be);
    }
}

void qref_activations(float *x, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        float v = test_rng_float(seed);
        if (v == 0.0f)
            v = 0.5f;
        x[i] = (test_rng_next(seed) & 63) ? v : 8.0f * v;
    }
}

void qref_q8_activations(int dtype, const float *x, int n_in, float *xhat, float *step)
{
    if (dtype == DT_F32 || dtype == DT_F16) {
        memcpy(xhat, x, (size_t)n_in * sizeof(float));
        for (int i = 0; step && i < n_in; i++)
            step[i] = 0.0f;
        return;
    }
    if (dtype == DT_BF16) {
        for (int i = 0; i < n_in; i++) {
            xhat[i] = bf16_to_f32(f32_to_bf16(x[i]));
            if (step)
                step[i] = fabsf(x[i]) * 0x1p-8f; /* half an ulp of an 8-bit significand */
        }
        return;
    }
    const int blk = dtype_block_elems(dtype) == 256 ? 256 : 32;
    for (int b = 0; b < n_in; b += blk) {
        float amax = 0.0f;
        for (int i = b; i < b + blk; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int i = b; i < b + blk; i++) {
            xhat[i] = d * nearbyintf(x[i] * id);
            /* half a step, plus x * id's own rounding (a few ulps of 127) */
            if (step)
                step[i] = d * (0.5f + 1e-4f);
        }
    }
}

void qref_pairs(int dtype, const float *wf, const float *wmin, const float *x, int n, int n_out,
                int n_in, qref_pair *out)
{
    float *xhat = malloc((size_t)n_in * sizeof(float)), *step = malloc((size_t)n_in * sizeof(float));
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * n_in;
        qref_q8_activations(dtype, xr, n_in, xhat, step);
        for (int o = 0; o < n_out; o++) {
            const float *w = wf + (size_t)o * n_in, *m = wmin + (size_t)o * n_in;
            qref_pair p = {0};
            for (int i = 0; i < n_in; i++) {
                const double wi = w[i];
                p.exact += wi * xr[i];
                p.quant += wi * xhat[i];
                p.abs_wx += fabs(wi * xr[i]);
                p.qbound += fabs(wi) * step[i];
                p.mag += (fabs(wi) + 2.0 * m[i]) * (fabs(xr[i]) + step[i]);
                p.one_step = fmax(p.one_step, 2.0 * fabs(wi) * step[i]);
            }
            out[(size_t)r * n_out + o] = p;
        }
    }
    free(xhat);
    free(step);
}
