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

/* Packed weights (qmm_pack in qmatmul.h; Q8 mode). A strip is QMM_STRIP consecutive
 * weight rows (the last strip padded with zero rows), and its blocks (legacy formats: 32
 * elements; K formats: super-blocks of 256) follow one another. The codes of 32 elements
 * of 16 rows are always laid out the same way, a "code group":
 *   codes     Q8_0: 8 vectors of 64 bytes, byte 4r + i of vector k = row r's code of
 *             element 4k + i plus 128 (unsigned); the other formats: 4 vectors of 64
 *             bytes, byte 4r + i of vector g = row r's code of element 4g + i in the low
 *             nibble and of element 16 + 4g + i in the high one (legacy formats: the
 *             file's byte 4g + i as it is)
 *   hmask[8]  u64 (Q5_0, Q5_1, Q5_K, before the codes): bit 4r + i of hmask[k] is the
 *             fifth bit of element 4k + i of row r
 *   high[2]   64 bytes each (Q6_K, after the codes): bits 2s, 2s + 1 of byte 4r + i of
 *             high[t] are the top two bits of element 4k + i of row r, k = 4t + s
 * so that vector k (after the nibble split) holds elements 4k .. 4k + 3 of each of the 16
 * rows in its dword lane r: one vpdpbusd against those 4 activations, broadcast, adds
 * them for 16 rows, and a block's scale work is done once for 16 rows. A strip block:
 *   legacy    d[16] f16 (the file's bits); m[16] f16 (_1 formats); one code group
 *   Q4_K/Q5_K d[16], dmin[16] f16; sc[8][16] u8 (sub-block j's 6-bit scale of row r at
 *             16 j + r); mn[4][16][2] u8 (the mins of sub-blocks 2p, 2p + 1 of row r at
 *             32 p + 2 r); 8 code groups
 *   Q6_K      d[16] f16; sc[16][16] s8 (per 16 elements); 8 code groups
 * Every strip block but Q4_K's and Q5_K's (1.03x, 1.02x) has exactly the bytes of 16 file
 * blocks.
 *
 * The arithmetic every path reproduces bit for bit (qmm_pack.c's scalar kernels are the
 * semantics): per row and activation row (Q8 blocks of 32 or 256, scale dx, sums S or
 * bs[16]), acc = 0, then per block in order (all integer sums exact, in int32):
 *   legacy  isum = sum_i (c_i - off) q_i, off 128 (Q8_0's stored codes), 8 (Q4_0), 16
 *           (Q5_0), 0 (_1 formats); acc = fmaf((float)isum, d * dx, acc); then the _1
 *           formats: acc = fmaf(m, dx * (float)S, acc)
 *   Q4_K/Q5_K  isum = sum_j sc_j sum_{32 j <= i < 32 j + 32} c_i q_i;
 *           msum = sum_j mn_j (bs[2j] + bs[2j + 1]); acc = fmaf((float)isum, d * dx, acc);
 *           acc = fmaf(-(float)msum, dmin * dx, acc)
 *   Q6_K    isum = sum_g sc_g (sum_{16 g <= i < 16 g + 16} c_i q_i - 32 bs[g]);
 *           acc = fmaf((float)isum, d * dx, acc) */
#define QMM_STRIP 16

/* A strip kernel: res[a * QMM_STRIP + r] = row r of the strip against activation row a
 * (nb blocks of qmm_q8_32 or qmm_q8_256 at x[a]), for a < rt. */
typedef void (*qmm_strip_fn)(const uint8_t *strip, const void *const *x, int nb, float *res);

typedef struct qmm_skern {
    qmm_strip_fn fn; /* NULL: no kernel at this level */
    int rt;
} qmm_skern;

static inline int qmm_pk_has_m(int fmt)
{
    return fmt == QF_Q4_1 || fmt == QF_Q5_1;
}

static inline int qmm_pk_has_h(int fmt)
{
    return fmt == QF_Q5_0 || fmt == QF_Q5_1 || fmt == QF_Q5_K;
}

static inline int qmm_pk_off(int fmt)
{
    return fmt == QF_Q8_0 ? 128 : fmt == QF_Q4_0 ? 8 : fmt == QF_Q5_0 ? 16 : 0;
}

/* Bytes of one code group (hmask and high bits included). */
static inline size_t qmm_pk_group(int fmt)
{
    return fmt == QF_Q8_0 ? 512 : 256 + 64 * (size_t)qmm_pk_has_h(fmt) + (fmt == QF_Q6_K ? 128 : 0);
}

/* Bytes before the code groups in a strip block. */
static inline size_t qmm_pk_head(int fmt)
{
    return fmt == QF_Q6_K ? 288 : fmt >= QF_Q4_K ? 320 : 32 + 32 * (size_t)qmm_pk_has_m(fmt);
}

/* Bytes of one strip block of a packed format (0: the format is not packed). */
static inline size_t qmm_pk_block(int fmt)
{
    if (fmt < QF_Q8_0 || fmt >= QF_COUNT)
        return 0;
    return qmm_pk_head(fmt) + (fmt >= QF_Q4_K ? 8 : 1) * qmm_pk_group(fmt);
}

/* What a path provides. exact/q8: [format][level]; a NULL q8 entry means the format's Q8
 * mode computes as its exact mode (F32, F16). packed: strip kernels per level (rows of
 * 1 << level at most). decode: NULL where the path has no panel mode (qmatmul.c). */
typedef struct qmm_path {
    qmm_kern exact[QF_COUNT][QMM_LEVELS];
    qmm_kern q8[QF_COUNT][QMM_LEVELS];
    qmm_skern packed[QF_COUNT][QMM_LEVELS];
    qmm_act_fns act;
    qmm_decode_fn decode;
} qmm_path;

/* qmm_scalar.c: every format and mode in plain C. */
extern const qmm_path qmm_path_scalar;
/* qmm_pack.c: the packed formats' strip kernels in plain C (the semantics). */
extern const qmm_skern qmm_pack_scalar[QF_COUNT][QMM_LEVELS];
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
/* qmm_pack_avx2.c (AVX2 + FMA + F16C), qmm_pack_avx512.c (F/BW/VL + VNNI). */
extern const qmm_skern qmm_pack_avx2[QF_COUNT][QMM_LEVELS];
extern const qmm_skern qmm_pack_avx512[QF_COUNT][QMM_LEVELS];
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
