/* SPDX-License-Identifier: Apache-2.0 */
/* qmm_pack.c - weights repacked for the Q8 mode (qmm_pack in qmatmul.h): the layout of
 * qmm_impl.h, and its strip kernels in plain C, which are the semantics the SIMD strip
 * kernels (qmm_pack_avx2.c, qmm_pack_avx512.c) reproduce bit for bit.
 *
 * Why: in the file's layout a Q8-mode dot product of one weight row costs, per 32-element
 * block, a few integer instructions and then several f32 ones (scale products, the
 * offset, the accumulation), and at batch 1 the f32 part is as large as the integer part:
 * the kernels were compute-bound at about 1.4x the memory floor. With 16 rows in the
 * lanes of one vector the f32 work of a block is shared by 16 rows, and a strip is one
 * contiguous stream for the hardware prefetcher instead of four interleaved rows.
 * Cost: packing reads and writes each weight byte once (O(n_out * n_in)); the packed copy
 * has exactly the file's bytes (16 rows per strip: up to 15 rows of zeros at the end).
 */
#include <math.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
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
        return deras_fail(DERAS_EUNSUPPORTED, "%s: %s weights are not packed (the legacy block "
                          "formats Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 are)", who, dtype_name(dtype));
    if (n_out <= 0 || n_in <= 0 || n_in % 32)
        return deras_fail(DERAS_EINVAL, "%s: %d rows of %d columns (whole blocks of 32 expected)",
                          who, n_out, n_in);
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
    *out = strips * (size_t)(n_in / 32) * qmm_pk_block(qmm_fmt_of(dtype));
    return DERAS_OK;
}

/* One file block of row r into strip block sb (zeroed by the caller). */
static void pack_block(int f, const uint8_t *src, uint8_t *sb, int r)
{
    uint8_t *p = sb;
    memcpy(p + 2 * r, src, 2); /* d */
    p += 32;
    size_t at = 2; /* what follows d in the file block */
    if (qmm_pk_has_m(f)) {
        memcpy(p + 2 * r, src + 2, 2);
        p += 32, at = 4;
    }
    if (qmm_pk_has_h(f)) {
        uint32_t qh;
        memcpy(&qh, src + at, 4);
        at += 4;
        for (int k = 0; k < 8; k++) {
            uint64_t m;
            memcpy(&m, p + 8 * k, 8);
            for (int i = 0; i < 4; i++)
                m |= (uint64_t)((qh >> (4 * k + i)) & 1) << (4 * r + i);
            memcpy(p + 8 * k, &m, 8);
        }
        p += 64;
    }
    const uint8_t *qs = src + at;
    if (f == QF_Q8_0)
        for (int k = 0; k < 8; k++)
            for (int i = 0; i < 4; i++)
                p[64 * k + 4 * r + i] = (uint8_t)(qs[4 * k + i] ^ 0x80);
    else
        for (int g = 0; g < 4; g++)
            memcpy(p + 64 * g + 4 * r, qs + 4 * g, 4);
}

int qmm_pack(void *dst, const void *w, int dtype, int n_out, int n_in)
{
    int rc = check("qmm_pack", dtype, n_out, n_in);
    if (rc)
        return rc;
    if (!dst || !w)
        return deras_fail(DERAS_EINVAL, "qmm_pack: NULL dst or w");
    const int f = qmm_fmt_of(dtype), nb = n_in / 32;
    const size_t fb = dtype_block_bytes(dtype), bb = qmm_pk_block(f);
    const int strips = (n_out + QMM_STRIP - 1) / QMM_STRIP;
    uint8_t *out = dst;
    memset(out, 0, (size_t)strips * nb * bb);
    for (int s = 0; s < strips; s++)
        for (int r = 0; r < QMM_STRIP && s * QMM_STRIP + r < n_out; r++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)(s * QMM_STRIP + r) * nb * fb;
            for (int b = 0; b < nb; b++)
                pack_block(f, row + (size_t)b * fb, out + ((size_t)s * nb + b) * bb, r);
        }
    return DERAS_OK;
}

/* ---- the semantics: strip kernels in plain C ---- */

static float rdh(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return fp16_to_f32(h);
}

/* Row r's code of element e = 4k + i of strip block p (scales past). */
static int code_at(int f, const uint8_t *codes, const uint8_t *hmask, int r, int e)
{
    const int k = e / 4, i = e % 4;
    if (f == QF_Q8_0)
        return codes[64 * k + 4 * r + i];
    const uint8_t v = codes[64 * (k % 4) + 4 * r + i];
    int c = k < 4 ? v & 0x0f : v >> 4;
    if (hmask) {
        uint64_t m;
        memcpy(&m, hmask + 8 * k, 8);
        c |= (int)((m >> (4 * r + i)) & 1) << 4;
    }
    return c;
}

static void strip_ref(int f, const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *res,
                      int rt)
{
    const size_t bb = qmm_pk_block(f);
    const int off = qmm_pk_off(f);
    for (int a = 0; a < rt; a++)
        for (int r = 0; r < QMM_STRIP; r++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                const uint8_t *p = s + (size_t)b * bb;
                const float d = rdh(p + 2 * r);
                const float m = qmm_pk_has_m(f) ? rdh(p + 32 + 2 * r) : 0.0f;
                const uint8_t *h = qmm_pk_has_h(f) ? p + 32 + 32 * qmm_pk_has_m(f) : NULL;
                const uint8_t *codes = p + 32 + 32 * qmm_pk_has_m(f) + 64 * qmm_pk_has_h(f);
                const qmm_q8_32 *xb = x[a] + b;
                int32_t isum = -off * xb->sum;
                for (int e = 0; e < 32; e++)
                    isum += code_at(f, codes, h, r, e) * xb->q[e];
                const float scale = d * xb->d;
                acc = fmaf((float)isum, scale, acc);
                if (qmm_pk_has_m(f)) {
                    const float mx = xb->d * (float)xb->sum;
                    acc = fmaf(m, mx, acc);
                }
            }
            res[a * QMM_STRIP + r] = acc;
        }
}

#define STRIPS(F)                                                                                  \
    static void F##_1(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *res)             \
    {                                                                                              \
        strip_ref(QF_##F, s, x, nb, res, 1);                                                       \
    }                                                                                              \
    static void F##_8(const uint8_t *s, const qmm_q8_32 *const *x, int nb, float *res)             \
    {                                                                                              \
        strip_ref(QF_##F, s, x, nb, res, 8);                                                       \
    }
STRIPS(Q8_0) STRIPS(Q4_0) STRIPS(Q4_1) STRIPS(Q5_0) STRIPS(Q5_1)

#define ROW(F) [QF_##F] = {{F##_1, 1}, {F##_1, 1}, {F##_1, 1}, {F##_8, 8}}
const qmm_skern qmm_pack_scalar[QF_COUNT][QMM_LEVELS] = {
    ROW(Q8_0), ROW(Q4_0), ROW(Q4_1), ROW(Q5_0), ROW(Q5_1),
};
