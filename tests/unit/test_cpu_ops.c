/* SPDX-License-Identifier: Apache-2.0 */
/* test_cpu_ops.c - the CPU backend's non-attention ops against naive double references.
 *
 * Fresh random inputs per shape (never zeros). Tolerances: f32 results of O(1) values with
 * reductions of length <= 1,000 carry relative errors around 1e-6; 1e-5 relative (1e-5
 * absolute near zero) is loose enough for that and tight enough to catch any wrong index,
 * missing term or wrong formula, whose errors are O(1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/qmatmul.h"
#include "qmm_ref.h"
#include "test_util.h"

static backend_t *be;

static int setup(void **state)
{
    (void)state;
    return backend_new("cpu", 2, &be);
}

static int teardown(void **state)
{
    (void)state;
    backend_destroy(&be);
    return 0;
}

static float *rnd(size_t n, uint64_t *seed, float scale)
{
    float *x = malloc(n * sizeof(float));
    test_fill_random(x, n, seed, scale);
    return x;
}

static void expect_close(const char *what, const float *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double tol = 1e-5 * fmax(1.0, fabs(want[i]));
        if (!(fabs(got[i] - want[i]) <= tol))
            fail_msg("%s: element %zu: got %.9g, expected %.9g", what, i, got[i], want[i]);
    }
}

static void matmul_matches_reference_with_and_without_bias(void **state)
{
    (void)state;
    uint64_t seed = 11;
    const int shapes[][3] = {{1, 7, 5}, {1, 576, 1536}, {3, 64, 96}, {17, 130, 64}, {64, 33, 1000}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int n = shapes[si][0], no = shapes[si][1], ni = shapes[si][2];
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            float *x = rnd((size_t)n * ni, &seed, 1), *w = rnd((size_t)no * ni, &seed, 0.2f);
            float *bias = with_bias ? rnd((size_t)no, &seed, 1) : NULL;
            float *y = malloc((size_t)n * no * sizeof(float));
            double *ref = malloc((size_t)n * no * sizeof(double));
            for (int i = 0; i < n; i++)
                for (int j = 0; j < no; j++) {
                    double acc = bias ? bias[j] : 0;
                    for (int k = 0; k < ni; k++)
                        acc += (double)x[i * ni + k] * w[(size_t)j * ni + k];
                    ref[(size_t)i * no + j] = acc;
                }
            const backend_weight wd = {.dtype = DT_F32, .rows = no, .cols = ni, .data = w};
            assert_int_equal(backend_matmul(be, y, x, &wd, bias, n), DERAS_OK);
            expect_close("matmul", y, ref, (size_t)n * no);
            free(x), free(w), free(bias), free(y), free(ref);
        }
    }
}

static void rmsnorm_and_fused_residual_match_reference(void **state)
{
    (void)state;
    uint64_t seed = 12;
    const int n = 5, d = 576;
    float *x = rnd((size_t)n * d, &seed, 2), *w = rnd(d, &seed, 1), *r = rnd((size_t)n * d, &seed, 1);
    float *res = malloc((size_t)n * d * sizeof(float)), *out = malloc((size_t)n * d * sizeof(float));
    memcpy(res, r, (size_t)n * d * sizeof(float));
    double *ref = malloc((size_t)n * d * sizeof(double)), *ref2 = malloc((size_t)n * d * sizeof(double));
    const float eps = 1e-5f;
    for (int i = 0; i < n; i++) {
        double ss = 0, ss2 = 0;
        for (int j = 0; j < d; j++) {
            ss += (double)x[i * d + j] * x[i * d + j];
            double s = (double)r[i * d + j] + x[i * d + j];
            ss2 += s * s;
        }
        double inv = 1 / sqrt(ss / d + eps), inv2 = 1 / sqrt(ss2 / d + eps);
        for (int j = 0; j < d; j++) {
            ref[i * d + j] = w[j] * x[i * d + j] * inv;
            ref2[i * d + j] = w[j] * ((double)r[i * d + j] + x[i * d + j]) * inv2;
        }
    }
    assert_int_equal(backend_rmsnorm(be, out, x, w, n, d, eps), DERAS_OK);
    expect_close("rmsnorm", out, ref, (size_t)n * d);
    assert_int_equal(backend_add_rmsnorm(be, out, res, x, w, n, d, eps), DERAS_OK);
    expect_close("add_rmsnorm", out, ref2, (size_t)n * d);
    for (int i = 0; i < n * d; i++)
        ref[i] = (double)r[i] + x[i];
    expect_close("add_rmsnorm residual", res, ref, (size_t)n * d);
    free(x), free(w), free(r), free(res), free(out), free(ref), free(ref2);
}

static void rope_rotates_half_pairs_by_position(void **state)
{
    (void)state;
    uint64_t seed = 13;
    const int n = 6, heads = 3, hd = 16, stride = heads * hd + 5;
    int32_t pos[6] = {0, 1, 7, 100, 4095, 31};
    float inv_freq[8];
    for (int j = 0; j < hd / 2; j++)
        inv_freq[j] = powf(10000.0f, -2.0f * j / hd);
    float *x = rnd((size_t)n * stride, &seed, 1), *orig = malloc((size_t)n * stride * sizeof(float));
    memcpy(orig, x, (size_t)n * stride * sizeof(float));
    float *cs = malloc((size_t)n * hd * sizeof(float));
    assert_int_equal(backend_rope_table(be, cs, pos, inv_freq, n, hd), DERAS_OK);
    assert_int_equal(backend_rope(be, x, cs, n, heads, hd, stride), DERAS_OK);
    double *ref = malloc((size_t)n * stride * sizeof(double));
    for (int i = 0; i < n * stride; i++)
        ref[i] = orig[i]; /* padding after the heads must stay untouched */
    for (int i = 0; i < n; i++)
        for (int h = 0; h < heads; h++)
            for (int j = 0; j < hd / 2; j++) {
                double a = (double)(float)((float)pos[i] * inv_freq[j]);
                const float *v = orig + i * stride + h * hd;
                ref[i * stride + h * hd + j] = v[j] * cos(a) - v[j + hd / 2] * sin(a);
                ref[i * stride + h * hd + j + hd / 2] = v[j + hd / 2] * cos(a) + v[j] * sin(a);
            }
    expect_close("rope", x, ref, (size_t)n * stride);
    free(x), free(orig), free(cs), free(ref);
}

static void silu_mul_embed_and_gather(void **state)
{
    (void)state;
    uint64_t seed = 14;
    const int n = 4, dff = 37, vocab = 11, d = 9;
    float *gu = rnd((size_t)n * 2 * dff, &seed, 4), *out = malloc((size_t)n * dff * sizeof(float));
    double *ref = malloc((size_t)n * dff * sizeof(double));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < dff; j++) {
            double g = gu[i * 2 * dff + j];
            ref[i * dff + j] = g / (1 + exp(-g)) * gu[i * 2 * dff + dff + j];
        }
    assert_int_equal(backend_silu_mul(be, out, gu, n, dff), DERAS_OK);
    expect_close("silu_mul", out, ref, (size_t)n * dff);

    float *table = rnd((size_t)vocab * d, &seed, 1), *emb = malloc((size_t)3 * d * sizeof(float));
    int32_t ids[3] = {10, 0, 4};
    const backend_weight td = {.dtype = DT_F32, .rows = vocab, .cols = d, .data = table};
    assert_int_equal(backend_embed(be, emb, &td, ids, 3), DERAS_OK);
    for (int i = 0; i < 3; i++)
        assert_memory_equal(emb + i * d, table + ids[i] * d, d * sizeof(float));
    int32_t bad[2] = {3, 11};
    assert_int_equal(backend_embed(be, emb, &td, bad, 2), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "token id 11"));

    float *g = malloc((size_t)2 * d * sizeof(float));
    int32_t rows[2] = {2, 0};
    assert_int_equal(backend_gather_rows(be, g, emb, rows, 2, d), DERAS_OK);
    assert_memory_equal(g, emb + 2 * d, d * sizeof(float));
    assert_memory_equal(g + d, emb, d * sizeof(float));
    free(gu), free(out), free(ref), free(table), free(emb), free(g);
}

/* rows x cols Q8_0 weights: random f16 scales 0.002..0.017, codes -127..127 (never all
 * zero). */
static uint8_t *q8_0_weights(int rows, int cols, uint64_t *seed)
{
    const int n_blocks = rows * cols / 32;
    uint8_t *q = malloc((size_t)n_blocks * 34);
    for (int b = 0; b < n_blocks; b++) {
        const uint16_t dh = f32_to_fp16(0.002f + 0.001f * (float)(test_rng_next(seed) % 16));
        memcpy(q + (size_t)b * 34, &dh, 2);
        for (int i = 0; i < 32; i++)
            q[(size_t)b * 34 + 2 + i] = (uint8_t)(test_rng_next(seed) % 255 + 1);
    }
    return q;
}

/* Weights kept in a block format (Q8_0 here; kernels/cpu/qmatmul.h tests every format)
 * go through the same calls: the product and the embedding rows equal those of the
 * dequantized f32 weights, up to f32 summation order for the product (exact mode: the
 * weights are the dequantized ones bit for bit, so only the order of the n_in additions
 * differs, within (n_in + 16) u sum|w x|, u = 2^-24). */
static void block_format_weights_match_their_f32_dequantization(void **state)
{
    (void)state;
    enum { N = 5, NO = 37, NI = 96, BB = 34 };
    assert_int_equal(backend_weight_dtype(be, DT_Q8_0), DT_Q8_0);
    assert_int_equal(backend_weight_dtype(be, 10 /* Q2_K */), DT_F32);
    assert_int_equal(backend_weight_bytes(DT_Q8_0, NO, NI), (size_t)NO * NI / 32 * BB);
    uint64_t seed = 21;
    uint8_t *q = q8_0_weights(NO, NI, &seed);
    float *wf = malloc(sizeof(float) * NO * NI), *x = rnd((size_t)N * NI, &seed, 1);
    float *bias = rnd(NO, &seed, 1), *yq = malloc(sizeof(float) * N * NO);
    float *yf = malloc(sizeof(float) * N * NO), *eq = malloc(sizeof(float) * 2 * NI);
    assert_int_equal(dtype_to_f32(DT_Q8_0, q, wf, (int64_t)NO * NI), DERAS_OK);
    const backend_weight wq = {.dtype = DT_Q8_0, .rows = NO, .cols = NI, .data = q},
                         wd = {.dtype = DT_F32, .rows = NO, .cols = NI, .data = wf};
    assert_int_equal(backend_matmul(be, yq, x, &wq, bias, N), DERAS_OK);
    assert_int_equal(backend_matmul(be, yf, x, &wd, bias, N), DERAS_OK);
    for (int i = 0; i < N * NO; i++) {
        double mag = fabs(bias[i % NO]);
        for (int k = 0; k < NI; k++)
            mag += fabs((double)x[i / NO * NI + k] * wf[(size_t)(i % NO) * NI + k]);
        if (!(fabs(yq[i] - yf[i]) <= 2 * (NI + 16) * 0x1p-24 * 1.01 * mag))
            fail_msg("Q8_0 product row %d out %d: %.9g, f32 weights %.9g", i / NO, i % NO, yq[i],
                     yf[i]);
    }
    const int32_t ids[2] = {36, 3}, bad[1] = {NO};
    assert_int_equal(backend_embed(be, eq, &wq, ids, 2), DERAS_OK);
    assert_memory_equal(eq, wf + 36 * NI, NI * sizeof(float));
    assert_memory_equal(eq + NI, wf + 3 * NI, NI * sizeof(float));
    assert_int_equal(backend_embed(be, eq, &wq, bad, 1), DERAS_ERANGE);
    free(q), free(wf), free(x), free(bias), free(yq), free(yf), free(eq);
}

/* silu's e^x (cpu_kernels.h's cpu_expf, which the backend's 8-lane loop repeats step for
 * step): within 2 ulp of e^x over its range (the Cephes polynomial's bound, 0.98 ulp
 * measured here, in units of the f32 spacing at the double result), saturating beyond it; and the backend's
 * silu_mul, vector lanes and scalar tail alike, equal to the scalar formula bit for bit on
 * values from -120 to 120 (both clamps), zeros of both signs and tiny ones. */
static void silu_exp_is_within_two_ulp_and_lanes_match_the_scalar_formula(void **state)
{
    (void)state;
    double worst = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
        const double want = exp((double)x), got = cpu_expf(x);
        const double ulp = ldexp(1.0, ilogb(want) - 23);
        worst = fmax(worst, fabs(got - want) / ulp);
    }
    print_message("cpu_expf: worst error %.2f ulp\n", worst);
    assert_true(worst <= 2.0);
    assert_true(cpu_expf(-200.0f) > 0 && cpu_expf(-200.0f) < 1.2e-38f);
    assert_true(cpu_expf(200.0f) > 2e38f && isfinite(cpu_expf(200.0f)));
    assert_true(isnan(cpu_expf(NAN)));

    enum { N = 3, DFF = 8 * 40 + 5 }; /* 40 vector steps and a 5-element tail per row */
    uint64_t seed = 41;
    float *gu = rnd((size_t)N * 2 * DFF, &seed, 1), *out = malloc(sizeof(float) * N * DFF);
    for (int i = 0; i < N * 2 * DFF; i += 2 * DFF)
        for (int j = 0; j < DFF; j++) /* gate from -120 to 120, plus specials */
            gu[i + j] = j % 41 == 0 ? 0.0f : j % 41 == 1 ? -0.0f : j % 41 == 2 ? 1e-30f
                                                                 : -120.0f + 240.0f * j / DFF;
    assert_int_equal(backend_silu_mul(be, out, gu, N, DFF), DERAS_OK);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < DFF; j++) {
            const float g = gu[(size_t)i * 2 * DFF + j], u = gu[(size_t)i * 2 * DFF + DFF + j];
            const float want = g / (1.0f + cpu_expf(-g)) * u;
            if (memcmp(&want, &out[i * DFF + j], sizeof want))
                fail_msg("silu row %d col %d (g %g): %.9g, scalar formula %.9g", i, j, g,
                         out[i * DFF + j], want);
        }
    free(gu), free(out);
}

/* The matmul mode switches the backend's products between qmatmul.h's modes: q8 through the
 * backend equals qmm_matmul's q8 bit for bit (the backend adds nothing but the scratch,
 * reserved or grown), exact again after switching back; names parse both ways. Rows: 17
 * and 3, across exact mode's panel threshold (qmatmul.c), so both of its kernels run. */
static void matmul_mode_picks_the_kernels_arithmetic(void **state)
{
    (void)state;
    enum { NO = 37, NI = 96 };
    uint64_t seed = 31;
    uint8_t *q = q8_0_weights(NO, NI, &seed);
    const backend_weight wq = {.dtype = DT_Q8_0, .rows = NO, .cols = NI, .data = q};
    const int rows[] = {17, 3};
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
        const int n = rows[ri];
        float *x = rnd((size_t)n * NI, &seed, 1), *y = malloc(sizeof(float) * n * NO);
        float *want = malloc(sizeof(float) * n * NO), *exact = malloc(sizeof(float) * n * NO);
        size_t bytes;
        assert_int_equal(qmm_scratch_bytes(DT_Q8_0, QMM_Q8, n, NI, &bytes), DERAS_OK);
        void *scratch = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        qmm_args a = {want, x, q, DT_Q8_0, n, NO, NI, QMM_Q8, 1, scratch, bytes, 0, NULL, 0};
        assert_int_equal(qmm_matmul(&a), DERAS_OK);
        a.y = exact, a.mode = QMM_EXACT;
        assert_int_equal(qmm_matmul(&a), DERAS_OK);
        assert_int_equal(backend_set_matmul_mode(be, BACKEND_MM_Q8), DERAS_OK);
        if (ri == 0) /* the first size reserved, the second within it */
            assert_int_equal(backend_reserve_matmul(be, n, NI), DERAS_OK);
        assert_int_equal(backend_matmul(be, y, x, &wq, NULL, n), DERAS_OK);
        assert_memory_equal(y, want, sizeof(float) * n * NO);
        assert_true(memcmp(y, exact, sizeof(float) * n * NO) != 0); /* int8 activations show */
        assert_int_equal(backend_set_matmul_mode(be, BACKEND_MM_EXACT), DERAS_OK);
        assert_int_equal(backend_matmul(be, y, x, &wq, NULL, n), DERAS_OK);
        assert_memory_equal(y, exact, sizeof(float) * n * NO);
        free(x), free(y), free(want), free(exact), free(scratch);
    }
    int m = -1;
    assert_int_equal(backend_mm_mode_parse("q8", &m), DERAS_OK);
    assert_int_equal(m, BACKEND_MM_Q8);
    assert_int_equal(backend_mm_mode_parse("exact", &m), DERAS_OK);
    assert_int_equal(m, BACKEND_MM_EXACT);
    assert_int_equal(backend_mm_mode_parse("int8", &m), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "exact or q8"));
    assert_string_equal(backend_mm_mode_name(BACKEND_MM_Q8), "q8");
    assert_string_equal(backend_mm_mode_name(5), "unknown");
    assert_int_equal(backend_set_matmul_mode(be, 2), DERAS_EINVAL);
    assert_int_equal(backend_reserve_matmul(be, 0, 5), DERAS_EINVAL);
    free(q);
}

/* A fused matrix of parts, each in its own format and place, some in GGUF's Q/K row
 * order: y must be, element for element, the product of each part computed alone (rows
 * unpermuted), so a file's tensors fused without copying give the arithmetic of the
 * tensors themselves; and close to the double product of the whole matrix in HF order. */
enum { PNI = 256, PHD = 8 };

typedef struct part_spec { int dtype, rows, perm; } part_spec;

static const part_spec PARTS[] = {{DT_Q4_K, 16, PHD}, {DT_Q6_K, 16, PHD}, {DT_F32, 5, 0},
                                  {DT_F16, 7, 0}};
#define N_PARTS ((int)(sizeof PARTS / sizeof PARTS[0]))

/* Stored-order row s of a part holding HF rows in GGUF's order: HF row of stored s. */
static int hf_row(int s, int perm)
{
    if (!perm)
        return s;
    const int h = s / perm, w = s % perm;
    return h * perm + (w % 2) * (perm / 2) + w / 2;
}

static void parts_multiply_as_their_tensors_do(void **state)
{
    (void)state;
    uint64_t seed = (uint64_t)time(NULL) | 1;
    printf("parts seed %llu\n", (unsigned long long)seed);
    int rows = 0;
    uint8_t *data[N_PARTS];
    float *wf = malloc(sizeof(float) * 64 * PNI), *wmin = malloc(sizeof(float) * 64 * PNI);
    float *whf = malloc(sizeof(float) * 64 * PNI); /* the whole matrix, HF order */
    backend_weight w = {.dtype = PARTS[0].dtype, .cols = PNI, .n_parts = N_PARTS};
    for (int p = 0; p < N_PARTS; p++) {
        const int r = PARTS[p].rows, dt = PARTS[p].dtype;
        data[p] = malloc(qref_row_bytes(dt, PNI) * (size_t)r + 1);
        qref_weights(dt, r, PNI, &seed, data[p]);
        qref_dequant(dt, data[p], r, PNI, wf, wmin);
        for (int s = 0; s < r; s++)
            memcpy(whf + (size_t)(rows + hf_row(s, PARTS[p].perm)) * PNI, wf + (size_t)s * PNI,
                   PNI * sizeof(float));
        w.parts[p] = (backend_weight_part){dt, r, data[p], PARTS[p].perm, NULL};
        rows += r;
    }
    w.rows = rows;
    for (int n = 1; n <= 3; n += 2) {
        float *x = malloc(sizeof(float) * n * PNI), *bias = malloc(sizeof(float) * rows);
        float *y = malloc(sizeof(float) * n * rows), *yp = malloc(sizeof(float) * n * 32);
        qref_activations(x, (size_t)n * PNI, &seed);
        qref_activations(bias, (size_t)rows, &seed);
        assert_int_equal(backend_matmul(be, y, x, &w, bias, n), DERAS_OK);
        for (int i = 0; i < n * rows; i++) { /* the whole matrix in double */
            const int r = i / rows, o = i % rows;
            double want = bias[o], mag = fabs(bias[o]);
            for (int k = 0; k < PNI; k++) {
                want += (double)x[r * PNI + k] * whf[(size_t)o * PNI + k];
                mag += fabs((double)x[r * PNI + k] * whf[(size_t)o * PNI + k]);
            }
            if (!(fabs(y[i] - want) <= 2 * (PNI + 16) * 0x1p-24 * 1.01 * mag))
                fail_msg("parts n %d row %d out %d: %.9g, double %.9g", n, r, o, y[i], want);
        }
        for (int p = 0, off = 0; p < N_PARTS; off += PARTS[p++].rows) { /* each part alone */
            const backend_weight one = {.dtype = PARTS[p].dtype, .rows = PARTS[p].rows,
                                        .cols = PNI, .data = data[p]};
            assert_int_equal(backend_matmul(be, yp, x, &one, NULL, n), DERAS_OK);
            for (int r = 0; r < n; r++)
                for (int s = 0; s < PARTS[p].rows; s++) {
                    const int o = off + hf_row(s, PARTS[p].perm);
                    const float got = y[r * rows + o] - bias[o];
                    if (y[r * rows + o] != yp[r * PARTS[p].rows + s] + bias[o])
                        fail_msg("part %d (%s) n %d row %d stored row %d: %.9g in the fused "
                                 "product, %.9g alone", p, dtype_name(PARTS[p].dtype), n, r, s,
                                 got, yp[r * PARTS[p].rows + s]);
                }
        }
        free(x), free(bias), free(y), free(yp);
    }
    /* embedding lookups read each row from its part, in HF order, exactly */
    float *e = malloc(sizeof(float) * PNI);
    for (int id = 0; id < rows; id++) {
        const int32_t ids[1] = {id};
        assert_int_equal(backend_embed(be, e, &w, ids, 1), DERAS_OK);
        if (memcmp(e, whf + (size_t)id * PNI, PNI * sizeof(float)))
            fail_msg("embedding row %d of the parts differs from the matrix's", id);
    }
    free(e);
    for (int p = 0; p < N_PARTS; p++)
        free(data[p]);
    free(wf), free(wmin), free(whf);
}

static void parts_that_do_not_make_a_matrix_are_refused(void **state)
{
    (void)state;
    static uint8_t q[4 * 2 * 144], f[64 * 4];
    float x[256] = {1}, y[64];
    const backend_weight ok = {.dtype = DT_Q4_K, .rows = 8, .cols = 256, .n_parts = 2,
                               .parts = {{DT_Q4_K, 4, q, 0}, {DT_Q4_K, 4, q + 4 * 144, 4}}};
    assert_int_equal(backend_matmul(be, y, x, &ok, NULL, 1), DERAS_OK);
    backend_weight w = ok;
    w.rows = 9; /* parts of 8 rows */
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, 1), DERAS_EINVAL);
    w = ok, w.n_parts = BACKEND_WEIGHT_MAX_PARTS + 1;
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, 1), DERAS_EINVAL);
    w = ok, w.n_parts = -1;
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, 1), DERAS_EINVAL);
    w = ok, w.parts[1].qk_perm_hd = 3; /* odd */
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, 1), DERAS_EINVAL);
    w = ok, w.parts[1].qk_perm_hd = 8; /* does not divide 4 rows */
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, 1), DERAS_EINVAL);
    w = ok, w.parts[1].qk_perm_hd = BACKEND_WEIGHT_MAX_PERM_HD + 2;
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, 1), DERAS_EINVAL);
    w = ok, w.parts[0].data = NULL;
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, 1), DERAS_EINVAL);
    w = ok, w.parts[0].dtype = 10; /* Q2_K: not computed here */
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, 1), DERAS_EUNSUPPORTED);
    w = ok, w.cols = 96, w.parts[1].dtype = DT_F32, w.parts[1].data = f; /* Q4_K of 96 */
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, 1), DERAS_EINVAL);
    const int32_t id[1] = {8};
    assert_int_equal(backend_embed(be, y, &ok, id, 1), DERAS_ERANGE);
    /* what the CPU computes on in place: F32 needs float alignment, the rest reads any */
    assert_true(backend_can_map(be, DT_F32, f));
    assert_false(backend_can_map(be, DT_F32, f + 2));
    assert_true(backend_can_map(be, DT_Q8_0, q + 1));
    assert_true(backend_can_map(be, DT_BF16, q + 1));
    assert_false(backend_can_map(be, 10, q));
    assert_false(backend_can_map(be, DT_Q8_0, NULL));
    assert_int_equal(backend_weight_dtype(be, DT_F16), DT_F16);
    assert_int_equal(backend_weight_dtype(be, DT_BF16), DT_BF16);
}

/* backend_alloc: zeroed, 64-byte aligned, every byte writable; buffers of 1 MiB and more
 * (mapped) start on a 2 MiB boundary, where packed weights can be given huge pages. */
static void memory_is_zeroed_aligned_and_large_buffers_start_on_huge_pages(void **state)
{
    (void)state;
    const size_t sizes[] = {1, 100, ((size_t)1 << 20) - 64, (size_t)1 << 20, ((size_t)3 << 20) + 5};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = NULL;
        assert_int_equal(backend_alloc(be, sizes[i], (void **)&p), DERAS_OK);
        assert_int_equal((uintptr_t)p % 64, 0);
        if (sizes[i] >= (size_t)1 << 20)
            assert_int_equal((uintptr_t)p % ((size_t)2 << 20), 0);
        for (size_t k = 0; k < sizes[i]; k++)
            if (p[k])
                fail_msg("buffer of %zu bytes: byte %zu is %d", sizes[i], k, p[k]);
        memset(p, 0xa5, sizes[i]);
        backend_free(be, p);
    }
}

static void ops_reject_invalid_arguments(void **state)
{
    (void)state;
    float buf[16] = {1};
    const backend_weight w1 = {.dtype = DT_F32, .rows = 1, .cols = 1, .data = buf},
                         q2k = {.dtype = 10 /* Q2_K */, .rows = 1, .cols = 256, .data = buf};
    assert_int_equal(backend_matmul(be, buf, buf, &w1, NULL, 1), DERAS_EINVAL);
    assert_int_equal(backend_matmul(be, buf + 8, buf, &q2k, NULL, 1), DERAS_EUNSUPPORTED);
    assert_int_equal(backend_rmsnorm(be, buf, buf, buf, 0, 4, 1e-5f), DERAS_EINVAL);
    assert_int_equal(backend_rope(be, buf, buf, 1, 1, 3, 3), DERAS_EINVAL);
    backend_t *none = NULL;
    assert_int_equal(backend_new("tpu", 1, &none), DERAS_EINVAL);
    assert_null(none);
}

/* backend_pack in q8 mode: the packable parts (legacy formats) get packed copies, the
 * others none; products then equal qmatmul.h's packed products part by part, bit for bit
 * (rows of a GGUF-ordered part unpermuted), and exact mode still reads the stored rows. In
 * exact mode nothing is packed. */
static void packing_lays_out_q8_weights_for_the_kernels(void **state)
{
    (void)state;
    enum { NI = 256, NP = 4 };
    static const part_spec specs[NP] = {{DT_Q4_1, 20, 4}, {DT_Q8_0, 16, 0}, {DT_Q4_K, 16, 0},
                                        {DT_Q5_0, 7, 0}};
    uint64_t seed = 97;
    uint8_t *data[NP];
    backend_weight w = {.dtype = specs[0].dtype, .cols = NI, .n_parts = NP};
    for (int p = 0; p < NP; p++) {
        data[p] = malloc(qref_row_bytes(specs[p].dtype, NI) * (size_t)specs[p].rows);
        qref_weights(specs[p].dtype, specs[p].rows, NI, &seed, data[p]);
        w.parts[p] = (backend_weight_part){specs[p].dtype, specs[p].rows, data[p], specs[p].perm, NULL};
        w.rows += specs[p].rows;
    }
    assert_int_equal(backend_pack_bytes(be, &w), 0); /* exact mode */
    assert_int_equal(backend_set_matmul_mode(be, BACKEND_MM_Q8), DERAS_OK);
    size_t want = 0, one;
    for (int p = 0; p < NP; p++)
        if (qmm_packs(specs[p].dtype)) {
            assert_int_equal(qmm_pack_bytes(specs[p].dtype, specs[p].rows, NI, &one), DERAS_OK);
            want += (one + 63) & ~(size_t)63;
        }
    assert_int_equal(backend_pack_bytes(be, &w), want);
    void *buf = NULL;
    assert_int_equal(backend_alloc(be, want, &buf), DERAS_OK);
    assert_int_equal(backend_pack(be, &w, buf), DERAS_OK);
    for (int p = 0; p < NP; p++)
        assert_true((w.parts[p].packed != NULL) == qmm_packs(specs[p].dtype));
    const int n = 3;
    float *x = rnd((size_t)n * NI, &seed, 1), *y = malloc(sizeof(float) * n * w.rows);
    float *yp = malloc(sizeof(float) * n * 32);
    size_t sb;
    assert_int_equal(qmm_scratch_bytes(DT_Q4_K, QMM_Q8, n, NI, &sb), DERAS_OK);
    void *scratch = aligned_alloc(64, sb);
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, n), DERAS_OK);
    for (int p = 0, off = 0; p < NP; off += specs[p++].rows) {
        const backend_weight_part *pt = &w.parts[p];
        qmm_args a = {yp, x, pt->packed ? pt->packed : pt->data, pt->dtype, n, pt->rows, NI,
                      QMM_Q8, 1, scratch, sb, 0, NULL, pt->packed != NULL};
        assert_int_equal(qmm_matmul(&a), DERAS_OK);
        for (int r = 0; r < n; r++)
            for (int s2 = 0; s2 < pt->rows; s2++)
                if (y[r * w.rows + off + hf_row(s2, specs[p].perm)] != yp[r * pt->rows + s2])
                    fail_msg("packed part %d (%s) row %d stored row %d: %.9g, kernels %.9g", p,
                             dtype_name(pt->dtype), r, s2,
                             y[r * w.rows + off + hf_row(s2, specs[p].perm)], yp[r * pt->rows + s2]);
    }
    /* exact mode reads the stored rows as before packing */
    assert_int_equal(backend_set_matmul_mode(be, BACKEND_MM_EXACT), DERAS_OK);
    float *ye = malloc(sizeof(float) * n * w.rows);
    backend_weight plain = w;
    for (int p = 0; p < NP; p++)
        plain.parts[p].packed = NULL;
    assert_int_equal(backend_matmul(be, y, x, &w, NULL, n), DERAS_OK);
    assert_int_equal(backend_matmul(be, ye, x, &plain, NULL, n), DERAS_OK);
    assert_memory_equal(y, ye, sizeof(float) * n * w.rows);
    assert_int_equal(backend_pack(be, &w, NULL), DERAS_EINVAL);
    for (int p = 0; p < NP; p++)
        free(data[p]);
    backend_free(be, buf);
    free(x), free(y), free(yp), free(ye), free(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matmul_matches_reference_with_and_without_bias),
        cmocka_unit_test(rmsnorm_and_fused_residual_match_reference),
        cmocka_unit_test(rope_rotates_half_pairs_by_position),
        cmocka_unit_test(silu_mul_embed_and_gather),
        cmocka_unit_test(block_format_weights_match_their_f32_dequantization),
        cmocka_unit_test(matmul_mode_picks_the_kernels_arithmetic),
        cmocka_unit_test(silu_exp_is_within_two_ulp_and_lanes_match_the_scalar_formula),
        cmocka_unit_test(parts_multiply_as_their_tensors_do),
        cmocka_unit_test(packing_lays_out_q8_weights_for_the_kernels),
        cmocka_unit_test(parts_that_do_not_make_a_matrix_are_refused),
        cmocka_unit_test(memory_is_zeroed_aligned_and_large_buffers_start_on_huge_pages),
        cmocka_unit_test(ops_reject_invalid_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
