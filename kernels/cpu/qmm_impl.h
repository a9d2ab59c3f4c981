/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_impl.h - what the paths of qmatmul.h share (private to kernels/cpu/): the formats'
 * internal index, the quantized activation layouts, the tile a kernel computes and the
 * tables each path exports.
 *
 * A kernel computes one tile: the dot products of up to QMM_MAX_OT weight rows with up to
 * QMM_MAX_RT activation rows, reading each weight block once for all of the tile's rows.
 * Each SIMD kernel is compiled for one tile shape (ot, rt); the driver (qmatmul.c) fills
 * the row pointers, repeating the last valid row where the matrix runs out, and keeps
 * the valid results. Every (weight row, activation row) pair is reduced in an order fixed
 * by n_in alone, which is what makes results independent of the batch and the tile.
 *
 * Activation layouts of the Q8 mode (made once per call, read by every weight row):
 * qmm_q8_32 per 32 elements for the legacy formats, qmm_q8_256 per 256 for the K
 * formats, bf16 for BF16. q = round-to-nearest-even(x / d) with d = max|x| / 127, so
 * |q| <= 127 and every path computes the same bytes (qmm_q8_quant_ref is the semantics).
 */
#ifndef DERAS_QMM_IMPL_H
#define DERAS_QMM_IMPL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/base/dtype.h"

#if defined(__x86_64__)
#define QMM_X86 1
#endif

/* Internal format index (dense, for tables). */
enum qmm_fmt {
    QF_F32, QF_F16, QF_BF16, QF_Q8_0, QF_Q4_0, QF_Q4_1, QF_Q5_0, QF_Q5_1, QF_Q4_K, QF_Q5_K,
    QF_Q6_K, QF_COUNT
};

/* How activations reach the kernels. */
enum qmm_act { QA_F32, QA_BF16, QA_Q8_32, QA_Q8_256 };

#define QMM_MAX_OT 4
#define QMM_MAX_RT 8
#define QMM_LEVELS 4 /* level l: tiles of 1 << l activation rows */

typedef struct qmm_q8_32 {
    float d;      /* max|x| / 127 (0 for an all-zero block) */
    int32_t sum;  /* sum of q */
    int8_t q[32];
} qmm_q8_32;

typedef struct qmm_q8_256 {
    float d;
    int16_t bsums[16]; /* bsums[k]: sum of q[16k .. 16k + 15] */
    int8_t q[256];
} qmm_q8_256;

typedef struct qmm_tile {
    const uint8_t *w[QMM_MAX_OT]; /* weight rows */
    const void *x[QMM_MAX_RT];    /* activation rows: f32, bf16 or Q8 blocks (enum qmm_act) */
    int n_in;
    int ot, rt;                   /* the tile's shape (the scalar kernels read it) */
    float res[QMM_MAX_OT][QMM_MAX_RT];
} qmm_tile;

typedef void (*qmm_tile_fn)(qmm_tile *t);

typedef struct qmm_kern {
    qmm_tile_fn fn; /* NULL: no kernel at this level (the driver takes the level below) */
    int ot, rt;
} qmm_kern;

/* Activation converters: n_blocks blocks of 32 / 256 elements, or n elements to bf16. */
typedef struct qmm_act_fns {
    void (*q8_32)(const float *x, qmm_q8_32 *q, int n_blocks);
    void (*q8_256)(const float *x, qmm_q8_256 *q, int n_blocks);
    void (*bf16)(const float *x, uint16_t *q, int n);
} qmm_act_fns;

/* Rows of a block format decoded to f32, bit for bit as dtype_to_f32 (qmatmul.c's panel
 * mode): n_blocks whole blocks of format fmt at w into out. */
typedef void (*qmm_decode_fn)(int fmt, const uint8_t *w, float *out, int n_blocks);

/* What a path provides. exact/q8: [format][level]; a NULL q8 entry means the format's Q8
 * mode computes as its exact mode (F32, F16). decode: NULL where the path has no panel
 * mode (qmatmul.c). */
typedef struct qmm_path {
    qmm_kern exact[QF_COUNT][QMM_LEVELS];
    qmm_kern q8[QF_COUNT][QMM_LEVELS];
    qmm_act_fns act;
    qmm_decode_fn decode;
} qmm_path;

/* qmm_scalar.c: every format and mode in plain C. */
extern const qmm_path qmm_path_scalar;
#ifdef QMM_X86
/* qmm_avx2_exact.c, qmm_avx2_q8.c (AVX2 + FMA + F16C). */
extern const qmm_kern qmm_avx2_exact[QF_COUNT][QMM_LEVELS];
extern const qmm_kern qmm_avx2_q8[QF_COUNT][QMM_LEVELS];
extern const qmm_act_fns qmm_avx2_act;
/* qmm_avx512_exact.c (F/BW/VL), qmm_avx512_q8.c (plus VNNI; its BF16 entries need
 * AVX512-BF16 as well). */
extern const qmm_kern qmm_avx512_exact[QF_COUNT][QMM_LEVELS];
void qmm_avx512_decode(int fmt, const uint8_t *w, float *out, int n_blocks);
extern const qmm_kern qmm_avx512_vnni[QF_COUNT][QMM_LEVELS];
extern const qmm_kern qmm_avx512_bf16[QMM_LEVELS];
#endif

/* qmm_isa.c: the active path (selected on first use); the negative status of
 * qmm_isa_active() when $DERAS_CPU_ISA asks for a path that cannot run here. */
int qmm_path_active(const qmm_path **out);

/* dtype -> enum qmm_fmt, -1 for anything else. */
static inline int qmm_fmt_of(int dtype)
{
    switch (dtype) {
    case DT_F32: return QF_F32;
    case DT_F16: return QF_F16;
    case DT_BF16: return QF_BF16;
    case DT_Q8_0: return QF_Q8_0;
    case DT_Q4_0: return QF_Q4_0;
    case DT_Q4_1: return QF_Q4_1;
    case DT_Q5_0: return QF_Q5_0;
    case DT_Q5_1: return QF_Q5_1;
    case DT_Q4_K: return QF_Q4_K;
    case DT_Q5_K: return QF_Q5_K;
    case DT_Q6_K: return QF_Q6_K;
    default: return -1;
    }
}

/* The activation layout a format uses in a mode. */
static inline int qmm_act_of(int fmt, int q8)
{
    if (!q8 || fmt == QF_F32 || fmt == QF_F16)
        return QA_F32;
    if (fmt == QF_BF16)
        return QA_BF16;
    return fmt >= QF_Q4_K ? QA_Q8_256 : QA_Q8_32;
}

/* The Q8 quantization of n (32 or 256) elements: the semantics every path reproduces
 * byte for byte (max is exact in any order, the scale one division, the rounding
 * nearest-even as cvtps2dq does). Returns d; q gets the values. */
static inline float qmm_q8_quant_ref(const float *x, int8_t *q, int n)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < n; i++)
        q[i] = (int8_t)lrintf(x[i] * id);
    return d;
}

/* Q4_K/Q5_K's 12-byte table of 6-bit scales and mins unpacked with 32-bit word operations
 * (llama.cpp's trick): out[0..7] = the sub-blocks' scales, out[8..15] their mins, equal
 * to dtype.c's scale_min_k4 for j = 0..7. */
static inline void qmm_k4_scales(const uint8_t *q, uint8_t out[16])
{
    uint32_t u[4];
    memcpy(u, q, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    const uint32_t mins_lo = u[1] & 0x3f3f3f3f;
    u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = mins_lo;
    u[0] &= 0x3f3f3f3f;
    memcpy(out, u, 16);
}

#endif
