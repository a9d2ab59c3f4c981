/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_pack.c - weights repacked for the Q8 mode (qmm_pack in qmatmul.h): the layout of
 * qmm_impl.h, and its strip kernels in plain C, which are the semantics the SIMD strip
 * kernels (qmm_pack_avx2.c, qmm_pack_avx512.c) reproduce bit for bit.
 *
 * Why: in the file's layout a Q8-mode dot product of one weight row costs, per 32-element
 * block, a few integer instructions and then several f32 ones (scale products, the
 * offset, the accumulation), and at batch 1 the f32 part is as large as the integer part:
 * the kernels were compute-bound at about 1.5x the memory floor. With 16 rows in the
 * lanes of one vector the scale work of a block is shared by 16 rows, and a strip is one
 * contiguous stream for the hardware prefetcher instead of four interleaved rows.
 * Cost: packing reads and writes each weight byte once in 32-bit words (O(n_out * n_in),
 * strips spread over a cpu_pool's threads: 2.3-3.8 GB/s of file bytes per thread on
 * Zen 4); the packed copy
 * has the file's bytes (Q4_K, Q5_K: 3% and 2% more, their scales unpacked), plus up to 15
 * rows of zeros at the end.
 */
#include <math.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "kernels/cpu/cpu_pool.h"
#include "kernels/cpu/qmatmul.h"
#include "kernels/cpu/qmm_impl.h"

bool qmm_packs(int dtype)
{
    const int f = qmm_fmt_of(dtype);
    return f >= 0 && qmm_pk_block(f) > 0;
}

static int check(const char *who, int dtype, int n_out, int n_in)
{
    if (!qmm_packs(dtype))
        return deras_fail(DERAS_EUNSUPPORTED, "%s: %s weights are not packed (the block formats "
                          "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K are)", who,
                          dtype_name(dtype));
    const int be = dtype_block_elems(dtype);
    if (n_out <= 0 || n_in <= 0 || n_in % be)
        return deras_fail(DERAS_EINVAL, "%s: %d rows of %d columns (whole blocks of %d expected)",
                          who, n_out, n_in, be);
    return DERAS_OK;
}

int qmm_pack_bytes(int dtype, int n_out, int n_in, size_t *out)
{
    int rc = check("qmm_pack_bytes", dtype, n_out, n_in);
    if (rc)
        return rc;
    if (!out)
        return deras_fail(DERAS_EINVAL, "qmm_pack_bytes: out is NULL");
    const size_t strips = ((size_t)n_out + QMM_STRIP - 1) / QMM_STRIP;
    *out = strips * (size_t)(n_in / dtype_block_elems(dtype)) * qmm_pk_block(qmm_fmt_of(dtype));
    return DERAS_OK;
}

/* Packing works on 32-bit words: in every format the 4 codes of a dword lane are 4
 * consecutive elements, and the file keeps 4-bit codes as nibble pairs (element e and
 * e + 16 of a 32-element group) exactly as a code group's low half does. */

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Dword k of row r's codes in the code group at g. */
static void put4(uint8_t *g, int r, int k, uint32_t v)
{
    memcpy(g + 64 * k + 4 * r, &v, 4);
}

/* Row r's fifth bits (bit e: element e's) into the mask ahead of a code group at g. */
static void put_h(uint8_t *g, int r, uint32_t h32)
{
    for (int k = 0; k < 8; k++) {
        uint64_t m;
        memcpy(&m, g + 8 * k, 8);
        m |= (uint64_t)((h32 >> (4 * k)) & 15) << (4 * r);
        memcpy(g + 8 * k, &m, 8);
    }
}

/* A 32-element group whose 4-bit codes are the nibbles at shift sh of the 32 bytes at q
 * (element l: (q[l] >> sh) & 15), as nibble pairs into the codes at g. */
static void put_nibbles(uint8_t *g, int r, const uint8_t *q, int sh)
{
    for (int k = 0; k < 4; k++) {
        const uint32_t a = rd32(q + 4 * k) >> sh & 0x0f0f0f0fu;
        const uint32_t b = rd32(q + 16 + 4 * k) >> sh & 0x0f0f0f0fu;
        put4(g, r, k, a | b << 4);
    }
}

/* Bit j of each of the 32 bytes at q, as the bits of a word (byte l: bit l). */
static uint32_t bit_plane(const uint8_t *q, int j)
{
    uint32_t h = 0;
    for (int w = 0; w < 4; w++) {
        uint64_t v;
        memcpy(&v, q + 8 * w, 8);
        /* the low bit of byte i lands on bit 56 + i, every partial product elsewhere */
        h |= (uint32_t)((((v >> j) & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56)
             << (8 * w);
    }
    return h;
}

/* One file block of row r into strip block sb (zeroed by the caller). */
static void pack_block(int f, const uint8_t *src, uint8_t *sb, int r)
{
    memcpy(sb + 2 * r, src + (f == QF_Q6_K ? 208 : 0), 2); /* d */
    uint8_t *g = sb + qmm_pk_head(f);
    if (f < QF_Q4_K) { /* legacy: d, [m], [qh], qs */
        size_t at = 2;
        if (qmm_pk_has_m(f))
            memcpy(sb + 32 + 2 * r, src + 2, 2), at = 4;
        if (qmm_pk_has_h(f)) {
            put_h(g, r, rd32(src + at));
            g += 64, at += 4;
        }
        if (f == QF_Q8_0)
            for (int k = 0; k < 8; k++)
                put4(g, r, k, rd32(src + at + 4 * k) ^ 0x80808080u);
        else
            for (int k = 0; k < 4; k++)
                put4(g, r, k, rd32(src + at + 4 * k));
        return;
    }
    const size_t gb = qmm_pk_group(f);
    if (f == QF_Q6_K) { /* ql[128], qh[64], sc[16], d */
        for (int s = 0; s < 16; s++)
            sb[32 + 16 * s + r] = src[192 + s];
        for (int j = 0; j < 8; j++, g += gb) {
            /* group j = 4 h + t: low nibbles from ql[64 h + 32 (t & 1) ..] at shift
             * 4 (t >> 1), the top two bits from bits 2t, 2t + 1 of qh[32 h ..] */
            const int h = j / 4, t = j % 4;
            const uint8_t *qh = src + 128 + 32 * h;
            put_nibbles(g, r, src + 64 * h + 32 * (t & 1), 4 * (t >> 1));
            for (int half = 0; half < 2; half++) { /* elements 16 half .. 16 half + 15 */
                uint32_t v = 0;
                for (int s = 0; s < 4; s++)
                    v |= (rd32(qh + 16 * half + 4 * s) >> (2 * t) & 0x03030303u) << (2 * s);
                put4(g + 256, r, half, v);
            }
        }
        return;
    }
    /* Q4_K, Q5_K: d, dmin, 12 bytes of scales and mins, [qh[32]], qs[128] */
    uint8_t sm[16];
    memcpy(sb + 32 + 2 * r, src + 2, 2);
    qmm_k4_scales(src + 4, sm);
    for (int j = 0; j < 8; j++) {
        sb[64 + 16 * j + r] = sm[j];
        sb[192 + 32 * (j / 2) + 2 * r + j % 2] = sm[8 + j];
    }
    const uint8_t *qh = src + 16, *ql = f == QF_Q5_K ? src + 48 : src + 16;
    for (int j = 0; j < 8; j++, g += gb) {
        if (f == QF_Q5_K)
            put_h(g, r, bit_plane(qh, j));
        put_nibbles(g + (f == QF_Q5_K ? 64 : 0), r, ql + 32 * (j / 2), 4 * (j % 2));
    }
}

typedef struct pack_job {
    uint8_t *out;
    const uint8_t *w;
    int f, n_out, nb;
    size_t fb, bb;
} pack_job;

/* Strip s: zeroed, then its rows' blocks put in place. */
static void pack_strip(void *ctx, int s)
{
    const pack_job *j = ctx;
    uint8_t *strip = j->out + (size_t)s * j->nb * j->bb;
    memset(strip, 0, (size_t)j->nb * j->bb);
    for (int r = 0; r < QMM_STRIP && s * QMM_STRIP + r < j->n_out; r++) {
        const uint8_t *row = j->w + (size_t)(s * QMM_STRIP + r) * j->nb * j->fb;
        for (int b = 0; b < j->nb; b++)
            pack_block(j->f, row + (size_t)b * j->fb, strip + (size_t)b * j->bb, r);
    }
}

int qmm_pack(void *dst, const void *w, int dtype, int n_out, int n_in, struct cpu_pool *pool)
{
    int rc = check("qmm_pack", dtype, n_out, n_in);
    if (rc)
        return rc;
    if (!dst || !w)
        return deras_fail(DERAS_EINVAL, "qmm_pack: NULL dst or w");
    const int f = qmm_fmt_of(dtype);
    pack_job j = {dst, w, f, n_out, n_in / dtype_block_elems(dtype), dtype_block_bytes(dtype),
                  qmm_pk_block(f)};
    cpu_pool_run(pool, (n_out + QMM_STRIP - 1) / QMM_STRIP, 0, pack_strip, &j);
    return DERAS_OK;
}

/* ---- the semantics: strip kernels in plain C ---- */

static float rdh(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return fp16_to_f32(h);
}

/* Row r's code of element e (0..31) of the code group at p. */
static int code_at(int f, const uint8_t *p, int r, int e)
{
    const int k = e / 4, i = e % 4;
    if (f == QF_Q8_0)
        return p[64 * k + 4 * r + i];
    int hi = 0;
    if (qmm_pk_has_h(f)) {
        uint64_t m;
        memcpy(&m, p + 8 * k, 8);
        hi = (int)((m >> (4 * r + i)) & 1) << 4;
        p += 64;
    }
    const uint8_t v = p[64 * (k % 4) + 4 * r + i];
    if (f == QF_Q6_K)
        hi = ((p[256 + 64 * (k / 4) + 4 * r + i] >> (2 * (k % 4))) & 3) << 4;
    return (k < 4 ? v & 15 : v >> 4) | hi;
}

/* sum_{e < n} c_e q_e over elements e0 .. e0 + n - 1 of the code group at p. */
static int32_t dot(int f, const uint8_t *p, int r, const int8_t *q, int e0, int n)
{
    int32_t s = 0;
    for (int e = e0; e < e0 + n; e++)
        s += code_at(f, p, r, e) * q[e];
    return s;
}

static float legacy_block(int f, const uint8_t *p, int r, const qmm_q8_32 *xb, float acc)
{
    const int32_t isum = -qmm_pk_off(f) * xb->sum + dot(f, p + qmm_pk_head(f), r, xb->q, 0, 32);
    const float scale = rdh(p + 2 * r) * xb->d;
    acc = fmaf((float)isum, scale, acc);
    if (qmm_pk_has_m(f)) {
        const float mx = xb->d * (float)xb->sum;
        acc = fmaf(rdh(p + 32 + 2 * r), mx, acc);
    }
    return acc;
}

static float k_block(int f, const uint8_t *p, int r, const qmm_q8_256 *xb, float acc)
{
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
        const uint8_t *g = p + qmm_pk_head(f) + j * qmm_pk_group(f);
        const int8_t *q = xb->q + 32 * j;
        if (f == QF_Q6_K) {
            for (int h = 0; h < 2; h++)
                isum += (int8_t)p[32 + 16 * (2 * j + h) + r] *
                        (dot(f, g, r, q, 16 * h, 16) - 32 * xb->bsums[2 * j + h]);
        } else {
            isum += p[64 + 16 * j + r] * dot(f, g, r, q, 0, 32);
            msum += p[192 + 32 * (j / 2) + 2 * r + j % 2] * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
        }
    }
    const float scale = rdh(p + 2 * r) * xb->d;
    acc = fmaf((float)isum, scale, acc);
    if (f != QF_Q6_K) {
        const float mscale = rdh(p + 32 + 2 * r) * xb->d;
        acc = fmaf(-(float)msum, mscale, acc);
    }
    return acc;
}

static void strip_ref(int f, const uint8_t *s, const void *const *x, int nb, float *res, int rt)
{
    const size_t bb = qmm_pk_block(f);
    for (int a = 0; a < rt; a++)
        for (int r = 0; r < QMM_STRIP; r++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++)
                acc = f >= QF_Q4_K ? k_block(f, s + b * bb, r, (const qmm_q8_256 *)x[a] + b, acc)
                                   : legacy_block(f, s + b * bb, r, (const qmm_q8_32 *)x[a] + b, acc);
            res[a * QMM_STRIP + r] = acc;
        }
}

#define STRIPS(F)                                                                                  \
    static void F##_1(const uint8_t *s, const void *const *x, int nb, float *res)                  \
    {                                                                                              \
        strip_ref(QF_##F, s, x, nb, res, 1);                                                       \
    }                                                                                              \
    static void F##_8(const uint8_t *s, const void *const *x, int nb, float *res)                  \
    {                                                                                              \
        strip_ref(QF_##F, s, x, nb, res, 8);                                                       \
    }
STRIPS(Q8_0) STRIPS(Q4_0) STRIPS(Q4_1) STRIPS(Q5_0) STRIPS(Q5_1) STRIPS(Q4_K) STRIPS(Q5_K)
STRIPS(Q6_K)

#define ROW(F) [QF_##F] = {{F##_1, 1}, {F##_1, 1}, {F##_1, 1}, {F##_8, 8}}
const qmm_skern qmm_pack_scalar[QF_COUNT][QMM_LEVELS] = {
    ROW(Q8_0), ROW(Q4_0), ROW(Q4_1), ROW(Q5_0), ROW(Q5_1), ROW(Q4_K), ROW(Q5_K), ROW(Q6_K),
};
