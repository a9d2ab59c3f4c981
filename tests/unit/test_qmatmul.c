/* SPDX-License-Identifier: Apache-2.0 */
/* test_qmatmul.c - the quantized matrix products (kernels/cpu/qmatmul.h): every format x
 * mode x path this CPU has, against double-precision references and against the scalar
 * path, batch and thread invariance bit for bit, the path selection, bad arguments.
 *
 * Data (qmm_ref.c): fresh random blocks (every code pattern valid, realistic f16 scales)
 * and activations with outliers, never zeros; n in {1, 2, 3, 7, 16, 33}, 37 outputs (no
 * tile divides it), n_in one block and many (odd and even block counts; F32/F16/BF16
 * rows ending in a partial vector).
 *
 * Tolerances, u = 2^-24 (f32 unit roundoff):
 *   exact mode   the weights are the reference's bit for bit (checked below with one-hot
 *                activations), so only the f32 summation differs: a sum of n_in products
 *                in any order of at most n_in + log2(16) + 1 steps, each rounding once,
 *                is within (n_in + 16) u sum|w x| of the exact sum (the classic gamma_k
 *                bound, 1% slack for gamma_k's denominator).
 *   q8 mode      (a) against sum w xhat, xhat the activations rounded as the kernels must
 *                (written again in qmm_ref.c): the integer parts are exact, the f32 steps
 *                (scale products, int to f32 when a sum passes 2^24, the additions) are
 *                fewer than n_in + 16, each relative to the size of its operands, which is
 *                sum (|w| + 2|offset|) |xhat| (the _1 and K formats add scale * code and
 *                offset separately, so their parts may be larger than w); plus one
 *                activation rounded the other way at an exact tie.
 *                (b) against sum w x: (a) plus the rounding of the activations, each off
 *                by at most half a step, max|x_block| / 254 (bf16: 2^-8 |x|): sum |w| step.
 *                The activation scales are f32 here (no f16 rounding, unlike ggml's Q8_0).
 *   SIMD vs scalar: both are within the f32 bound of the same exact value: twice it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "kernels/cpu/cpu_pool.h"
#include "kernels/cpu/qmatmul.h"
#include "kernels/cpu/qmm_impl.h"
#include "qmm_ref.h"
#include "test_util.h"

#define N_OUT 37
#define N_MAX 33
#define U 0x1p-24

static const int dtypes[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_1,
                             DT_Q5_0, DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K};
#define N_DTYPES (int)(sizeof dtypes / sizeof dtypes[0])
static const int batches[] = {1, 2, 3, 7, 16, 33};

/* n_in values for a dtype: one block, and more (odd and even block counts, partial
 * vectors for the float formats). */
static int n_ins(int dtype, int out[3])
{
    switch (dtype_block_elems(dtype)) {
    case 1: out[0] = 1, out[1] = 45, out[2] = 1003; return 3;
    case 32: out[0] = 32, out[1] = 576, out[2] = 1056; return 3;
    default: out[0] = 256, out[1] = 768, out[2] = 1536; return 3;
    }
}

static void *scratch_for(int dtype, int mode, int n, int n_in, size_t *bytes)
{
    assert_int_equal(qmm_scratch_bytes(dtype, mode, n, n_in, bytes), DERAS_OK);
    return *bytes ? aligned_alloc(64, (*bytes + 63) & ~(size_t)63) : NULL;
}

static int run_as(int dtype, int mode, int packed, const uint8_t *w, const float *x, int n,
                  int n_out, int n_in, int threads, float *y)
{
    size_t bytes;
    void *scratch = scratch_for(dtype, mode, n, n_in, &bytes);
    static cpu_pool_t *pool; /* two threads, kept for the whole run */
    if (!pool)
        assert_int_equal(cpu_pool_new(2, &pool), DERAS_OK);
    qmm_args a = {y, x, w, dtype, n, n_out, n_in, mode, threads, scratch, bytes, 0, pool, packed};
    int rc = qmm_matmul(&a);
    free(scratch);
    return rc;
}

static int run(int dtype, int mode, const uint8_t *w, const float *x, int n, int n_out, int n_in,
               int threads, float *y)
{
    return run_as(dtype, mode, 0, w, x, n, n_out, n_in, threads, y);
}

/* One format and n_in: random weights (N_OUT rows), N_MAX activation rows, their
 * references, and room for three results. */
typedef struct tcase {
    uint8_t *w;
    float *wf, *wmin, *x, *ys, *y1, *yb;
    qref_pair *pairs;
} tcase;

static void tcase_new(tcase *c, int dt, int n_in, uint64_t *seed)
{
    c->w = malloc(qref_row_bytes(dt, n_in) * N_OUT);
    c->wf = malloc(sizeof(float) * N_OUT * n_in);
    c->wmin = malloc(sizeof(float) * N_OUT * n_in);
    c->x = malloc(sizeof(float) * N_MAX * n_in);
    c->pairs = malloc(sizeof *c->pairs * N_MAX * N_OUT);
    c->ys = malloc(sizeof(float) * N_MAX * N_OUT);
    c->y1 = malloc(sizeof(float) * N_MAX * N_OUT);
    c->yb = malloc(sizeof(float) * N_MAX * N_OUT);
    qref_weights(dt, N_OUT, n_in, seed, c->w);
    qref_dequant(dt, c->w, N_OUT, n_in, c->wf, c->wmin);
    qref_activations(c->x, (size_t)N_MAX * n_in, seed);
    qref_pairs(dt, c->wf, c->wmin, c->x, N_MAX, N_OUT, n_in, c->pairs);
}

static void tcase_free(tcase *c)
{
    free(c->w), free(c->wf), free(c->wmin), free(c->x), free(c->pairs), free(c->ys), free(c->y1);
    free(c->yb);
}

static double tol_f32(int mode, int dtype, const qref_pair *p, int n_in)
{
    const int q8 = mode == QMM_Q8 && dtype != DT_F32 && dtype != DT_F16;
    return (n_in + 16) * U * 1.01 * (q8 ? p->mag : p->abs_wx);
}

static void check_against_references(int dtype, int mode, int isa, const float *y,
                                     const float *ys, const qref_pair *pairs, int n_in,
                                     double *max_rel)
{
    const int q8 = mode == QMM_Q8 && dtype != DT_F32 && dtype != DT_F16;
    for (int i = 0; i < N_MAX * N_OUT; i++) {
        const qref_pair *p = &pairs[i];
        const double tf = tol_f32(mode, dtype, p, n_in), e = fabs(y[i] - p->exact);
        const char *what = NULL;
        double want = p->exact, tol = tf;
        if (!q8 && !(e <= tf))
            what = "exact vs double";
        else if (q8 && !(fabs(y[i] - p->quant) <= tf + p->one_step))
            what = "q8 vs double on rounded activations", want = p->quant, tol = tf + p->one_step;
        else if (q8 && !(e <= tf + p->one_step + p->qbound))
            what = "q8 vs double", tol = tf + p->one_step + p->qbound;
        else if (!(fabs(y[i] - ys[i]) <= 2 * tf))
            what = "path vs scalar", want = ys[i], tol = 2 * tf;
        if (what)
            fail_msg("%s %s %s n_in %d row %d out %d: %s: got %.9g want %.9g (tol %.3g)",
                     dtype_name(dtype), mode ? "q8" : "exact", qmm_isa_name(isa), n_in,
                     i / N_OUT, i % N_OUT, what, y[i], want, tol);
        *max_rel = fmax(*max_rel, e / p->abs_wx);
    }
}

static void every_format_mode_and_path_matches_references(void **state)
{
    (void)state;
    uint64_t seed = 20240611;
    const int best = qmm_isa_best();
    print_message("paths tested:");
    for (int isa = QMM_ISA_SCALAR; isa <= best; isa++)
        print_message(" %s", qmm_isa_name(isa));
#ifdef QMM_X86 /* the AVX-512 path's Q8 kernels: its own (VNNI, BF16) or AVX2's */
    if (best == QMM_ISA_AVX512)
        print_message(" (avx512 q8: %s, bf16: %s)",
                      __builtin_cpu_supports("avx512vnni") ? "vnni" : "avx2 kernels",
                      __builtin_cpu_supports("avx512bf16") ? "vdpbf16ps" : "avx2 kernels");
#endif
    print_message("\n");
    for (int di = 0; di < N_DTYPES; di++) {
        const int dt = dtypes[di];
        int sizes[3], n_sizes = n_ins(dt, sizes);
        for (int si = 0; si < n_sizes; si++) {
            const int n_in = sizes[si];
            tcase c;
            tcase_new(&c, dt, n_in, &seed);
            uint8_t *w = c.w;
            float *x = c.x, *ys = c.ys, *y1 = c.y1, *yb = c.yb;
            const qref_pair *pairs = c.pairs;
            for (int mode = QMM_EXACT; mode <= QMM_Q8; mode++) {
                double max_rel = 0;
                assert_int_equal(qmm_isa_force(QMM_ISA_SCALAR), DERAS_OK);
                assert_int_equal(run(dt, mode, w, x, N_MAX, N_OUT, n_in, 2, ys), DERAS_OK);
                for (int isa = QMM_ISA_SCALAR; isa <= best; isa++) {
                    assert_int_equal(qmm_isa_force(isa), DERAS_OK);
                    for (int r = 0; r < N_MAX; r++) /* each row alone */
                        assert_int_equal(run(dt, mode, w, x + (size_t)r * n_in, 1, N_OUT, n_in, 1,
                                             y1 + (size_t)r * N_OUT), DERAS_OK);
                    check_against_references(dt, mode, isa, y1, ys, pairs, n_in, &max_rel);
                    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                        const int n = batches[bi];
                        for (int threads = 1; threads <= (n == N_MAX ? 2 : 1); threads++) {
                            assert_int_equal(run(dt, mode, w, x, n, N_OUT, n_in, threads, yb), DERAS_OK);
                            if (memcmp(yb, y1, sizeof(float) * n * N_OUT))
                                fail_msg("%s %s %s n_in %d: a batch of %d on %d threads differs "
                                         "from the rows alone", dtype_name(dt), mode ? "q8" : "exact",
                                         qmm_isa_name(isa), n_in, n, threads);
                        }
                    }
                }
                print_message("%-5s %-5s n_in %4d: max |y - ref| / sum|w x| = %.2e\n", dtype_name(dt),
                              mode ? "q8" : "exact", n_in, max_rel);
            }
            tcase_free(&c);
        }
    }
    assert_int_equal(qmm_isa_force(best), DERAS_OK);
}

/* Packed weights (Q8 mode, the block formats; 37 rows: the last strip padded): every
 * path equals the packed scalar kernels bit for bit (qmm_impl.h fixes the arithmetic), and
 * those meet the Q8 mode's references within its tolerances (the header's (a) and (b));
 * batches and threads change nothing. */
static void packed_weights_match_references_on_every_path(void **state)
{
    (void)state;
    uint64_t seed = 424242;
    const int best = qmm_isa_best(), packed[] = {DT_Q8_0, DT_Q4_0, DT_Q4_1, DT_Q5_0,
                                                 DT_Q5_1, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    for (size_t di = 0; di < sizeof packed / sizeof packed[0]; di++) {
        const int dt = packed[di];
        int sizes[3], n_sizes = n_ins(dt, sizes);
        for (int si = 0; si < n_sizes; si++) {
            const int n_in = sizes[si];
            size_t pbytes;
            assert_int_equal(qmm_pack_bytes(dt, N_OUT, n_in, &pbytes), DERAS_OK);
            /* 3 strips of 16 rows: the file's bytes of 48 rows, but for Q4_K/Q5_K's scales */
            const size_t file48 = 3 * 16 * qref_row_bytes(dt, n_in);
            assert_int_equal(pbytes, dt == DT_Q4_K ? file48 / 144 * 148
                                     : dt == DT_Q5_K ? file48 / 176 * 180 : file48);
            tcase c;
            tcase_new(&c, dt, n_in, &seed);
            uint8_t *w = c.w, *pw = malloc(pbytes);
            float *x = c.x, *ys = c.ys, *y1 = c.y1, *yb = c.yb;
            const qref_pair *pairs = c.pairs;
            assert_int_equal(qmm_pack(pw, w, dt, N_OUT, n_in, NULL), DERAS_OK);
            { /* packing on threads writes the same bytes */
                uint8_t *pw2 = malloc(pbytes);
                cpu_pool_t *pool;
                assert_int_equal(cpu_pool_new(2, &pool), DERAS_OK);
                memset(pw2, 0xa5, pbytes);
                assert_int_equal(qmm_pack(pw2, w, dt, N_OUT, n_in, pool), DERAS_OK);
                assert_memory_equal(pw, pw2, pbytes);
                cpu_pool_destroy(&pool);
                free(pw2);
            }
            double max_rel = 0;
            assert_int_equal(qmm_isa_force(QMM_ISA_SCALAR), DERAS_OK);
            assert_int_equal(run_as(dt, QMM_Q8, 1, pw, x, N_MAX, N_OUT, n_in, 2, ys), DERAS_OK);
            check_against_references(dt, QMM_Q8, QMM_ISA_SCALAR, ys, ys, pairs, n_in, &max_rel);
            for (int isa = QMM_ISA_SCALAR; isa <= best; isa++) {
                assert_int_equal(qmm_isa_force(isa), DERAS_OK);
                for (int r = 0; r < N_MAX; r++)
                    assert_int_equal(run_as(dt, QMM_Q8, 1, pw, x + (size_t)r * n_in, 1, N_OUT,
                                            n_in, 1, y1 + (size_t)r * N_OUT), DERAS_OK);
                if (memcmp(y1, ys, sizeof(float) * N_MAX * N_OUT))
                    fail_msg("packed %s %s n_in %d: differs from the scalar kernels", dtype_name(dt),
                             qmm_isa_name(isa), n_in);
                for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++)
                    for (int threads = 1; threads <= 2; threads++) {
                        const int n = batches[bi];
                        assert_int_equal(run_as(dt, QMM_Q8, 1, pw, x, n, N_OUT, n_in, threads, yb),
                                         DERAS_OK);
                        if (memcmp(yb, y1, sizeof(float) * n * N_OUT))
                            fail_msg("packed %s %s n_in %d: a batch of %d on %d threads differs "
                                     "from the rows alone", dtype_name(dt), qmm_isa_name(isa),
                                     n_in, n, threads);
                    }
            }
            print_message("%-5s packed n_in %4d: max |y - ref| / sum|w x| = %.2e\n", dtype_name(dt),
                          n_in, max_rel);
            free(pw);
            tcase_free(&c);
        }
    }
    assert_int_equal(qmm_isa_force(best), DERAS_OK);
    /* refused: exact mode, formats without a packed layout */
    float xx[32] = {1}, yy[16];
    uint8_t ww[16 * 34] = {0};
    assert_int_equal(run_as(DT_Q8_0, QMM_EXACT, 1, ww, xx, 1, 16, 32, 1, yy), DERAS_EINVAL);
    assert_int_equal(run_as(DT_BF16, QMM_Q8, 1, ww, xx, 1, 1, 32, 1, yy), DERAS_EINVAL);
    size_t b;
    assert_int_equal(qmm_pack_bytes(DT_BF16, 16, 256, &b), DERAS_EUNSUPPORTED);
    assert_int_equal(qmm_pack_bytes(DT_Q4_K, 16, 288, &b), DERAS_EINVAL);
    assert_int_equal(qmm_pack_bytes(DT_Q8_0, 16, 48, &b), DERAS_EINVAL);
    assert_int_equal(qmm_pack(NULL, ww, DT_Q8_0, 16, 32, NULL), DERAS_EINVAL);
}

/* Exact mode against one-hot activations returns the weights themselves: the in-register
 * decoding equals dtype_to_f32 bit for bit, in every path and tile. */
static void exact_mode_decodes_weights_bit_for_bit(void **state)
{
    (void)state;
    uint64_t seed = 77;
    for (int di = 0; di < N_DTYPES; di++) {
        const int dt = dtypes[di];
        int sizes[3], n_sizes = n_ins(dt, sizes);
        for (int si = 0; si < n_sizes; si++) {
            const int n_in = sizes[si], n = n_in < 64 ? n_in : 64;
            uint8_t *w = malloc(qref_row_bytes(dt, n_in) * N_OUT);
            float *wf = malloc(sizeof(float) * N_OUT * n_in), *x = calloc((size_t)n * n_in, sizeof(float));
            float *y = malloc(sizeof(float) * n * N_OUT);
            int *col = malloc(sizeof(int) * n);
            qref_weights(dt, N_OUT, n_in, &seed, w);
            qref_dequant(dt, w, N_OUT, n_in, wf, NULL);
            for (int r = 0; r < n; r++) { /* every column when few, else random ones */
                col[r] = n == n_in ? r : (int)(test_rng_next(&seed) % (uint64_t)n_in);
                x[(size_t)r * n_in + col[r]] = 1.0f;
            }
            for (int isa = QMM_ISA_SCALAR; isa <= qmm_isa_best(); isa++) {
                assert_int_equal(qmm_isa_force(isa), DERAS_OK);
                assert_int_equal(run(dt, QMM_EXACT, w, x, n, N_OUT, n_in, 2, y), DERAS_OK);
                for (int r = 0; r < n; r++)
                    for (int o = 0; o < N_OUT; o++)
                        if (y[r * N_OUT + o] != wf[(size_t)o * n_in + col[r]])
                            fail_msg("%s %s n_in %d: w[%d][%d] decoded as %.9g, reference %.9g",
                                     dtype_name(dt), qmm_isa_name(isa), n_in, o, col[r],
                                     y[r * N_OUT + o], wf[(size_t)o * n_in + col[r]]);
            }
            free(w), free(wf), free(x), free(y), free(col);
        }
    }
    assert_int_equal(qmm_isa_force(qmm_isa_best()), DERAS_OK);
}

/* The SIMD activation converters write the scalar one's bytes (qmm_impl.h's contract). */
static void activation_converters_agree_byte_for_byte(void **state)
{
    (void)state;
#ifdef QMM_X86
    if (qmm_isa_best() < QMM_ISA_AVX2)
        skip();
    enum { N = 1024 + 7 };
    uint64_t seed = 5;
    float *x = malloc(sizeof(float) * N);
    qref_activations(x, N, &seed);
    memset(x + 256, 0, 32 * sizeof(float)); /* an all-zero block: d = 0 */
    x[300] = 0.5f / 127.0f * 3.0f;          /* values near rounding ties */
    x[301] = -x[300];
    qmm_q8_32 a32[N / 32], b32[N / 32];
    qmm_q8_256 a256[N / 256], b256[N / 256];
    uint16_t a16[N], b16[N];
    const qmm_act_fns *s = &qmm_path_scalar.act, *v = &qmm_avx2_act;
    s->q8_32(x, a32, N / 32), v->q8_32(x, b32, N / 32);
    s->q8_256(x, a256, N / 256), v->q8_256(x, b256, N / 256);
    s->bf16(x, a16, N), v->bf16(x, b16, N);
    assert_memory_equal(a32, b32, sizeof a32);
    assert_memory_equal(a256, b256, sizeof a256);
    assert_memory_equal(a16, b16, sizeof a16);
    free(x);
#else
    skip();
#endif
}

static void paths_can_be_forced_and_are_refused_when_missing(void **state)
{
    (void)state;
    const int best = qmm_isa_best();
    for (int isa = QMM_ISA_SCALAR; isa <= QMM_ISA_AVX512; isa++) {
        int rc = qmm_isa_force(isa);
        if (isa <= best) {
            assert_int_equal(rc, DERAS_OK);
            assert_int_equal(qmm_isa_active(), isa);
        } else {
            assert_int_equal(rc, DERAS_EUNSUPPORTED);
            assert_non_null(strstr(deras_errmsg(), "lacks"));
            assert_int_equal(qmm_isa_active(), best); /* unchanged */
        }
    }
    assert_int_equal(qmm_isa_force(-1), DERAS_EINVAL);
    assert_int_equal(qmm_isa_force(3), DERAS_EINVAL);
    int isa;
    assert_int_equal(qmm_isa_parse("avx2", &isa), DERAS_OK);
    assert_int_equal(isa, QMM_ISA_AVX2);
    assert_int_equal(qmm_isa_parse("sse", &isa), DERAS_EINVAL);
    assert_string_equal(qmm_isa_name(QMM_ISA_AVX512), "avx512");
    assert_string_equal(qmm_isa_name(7), "unknown");
    assert_int_equal(qmm_isa_force(best), DERAS_OK);
}

/* $DERAS_CPU_ISA is read once, at first use: each case runs in a fresh child process. */
static int env_case(const char *value)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("DERAS_CPU_ISA", value, 1);
        int want, rc = qmm_isa_parse(value, &want);
        int got = qmm_isa_active();
        float x[32] = {1}, y[1];
        uint8_t w[34] = {0};
        qmm_args a = {y, x, w, DT_Q8_0, 1, 1, 32, QMM_EXACT, 1, NULL, 0, 0, NULL, 0};
        int mm = qmm_matmul(&a);
        if (rc) /* unknown name: every call refuses */
            _exit(got == DERAS_EINVAL && mm == DERAS_EINVAL && strstr(deras_errmsg(), "DERAS_CPU_ISA") ? 0 : 1);
        if (want > qmm_isa_best()) /* missing here */
            _exit(got == DERAS_EUNSUPPORTED && mm == DERAS_EUNSUPPORTED ? 0 : 2);
        _exit(got == want && mm == DERAS_OK ? 0 : 3);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

static void environment_variable_picks_the_path(void **state)
{
    (void)state;
    assert_int_equal(env_case("scalar"), 0);
    assert_int_equal(env_case("avx2"), 0);
    assert_int_equal(env_case("avx512"), 0);
    assert_int_equal(env_case("neon"), 0);
}

static void bad_arguments_fail_cleanly(void **state)
{
    (void)state;
    float x[64] = {1}, y[4];
    uint8_t w[4 * 36] = {0};
    uint8_t buf[256] __attribute__((aligned(64)));
    qmm_args a = {y, x, w, DT_Q8_0, 1, 2, 32, QMM_EXACT, 1, NULL, 0, 0, NULL, 0}, b;
    assert_int_equal(qmm_matmul(&a), DERAS_OK);
    assert_int_equal(qmm_matmul(NULL), DERAS_EINVAL);
    b = a, b.y = NULL;
    assert_int_equal(qmm_matmul(&b), DERAS_EINVAL);
    b = a, b.n = 0;
    assert_int_equal(qmm_matmul(&b), DERAS_EINVAL);
    b = a, b.n_out = -3;
    assert_int_equal(qmm_matmul(&b), DERAS_EINVAL);
    b = a, b.n_in = 48;
    assert_int_equal(qmm_matmul(&b), DERAS_EFORMAT);
    b = a, b.dtype = 10; /* Q2_K: not computable */
    assert_int_equal(qmm_matmul(&b), DERAS_EUNSUPPORTED);
    b = a, b.mode = 2;
    assert_int_equal(qmm_matmul(&b), DERAS_EINVAL);
    b = a, b.mode = QMM_Q8; /* needs scratch */
    assert_int_equal(qmm_matmul(&b), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "scratch"));
    b.scratch = buf + 4, b.scratch_bytes = 128; /* misaligned */
    assert_int_equal(qmm_matmul(&b), DERAS_EINVAL);
    b.scratch = buf, b.scratch_bytes = 16; /* too small */
    assert_int_equal(qmm_matmul(&b), DERAS_EINVAL);
    b.scratch_bytes = sizeof buf;
    assert_int_equal(qmm_matmul(&b), DERAS_OK);
    size_t bytes;
    assert_int_equal(qmm_scratch_bytes(DT_Q4_K, QMM_Q8, 3, 512, &bytes), DERAS_OK);
    assert_int_equal(bytes, 3 * 640); /* 2 blocks of 292 bytes, rounded to 64 */
    assert_int_equal(qmm_scratch_bytes(DT_F16, QMM_Q8, 3, 512, &bytes), DERAS_OK);
    assert_int_equal(bytes, 0);
    assert_int_equal(qmm_scratch_bytes(DT_Q4_K, QMM_Q8, 3, 100, &bytes), DERAS_EFORMAT);
    assert_int_equal(qmm_scratch_bytes(DT_Q4_K, QMM_Q8, 3, 256, NULL), DERAS_EINVAL);
    float row[32];
    assert_int_equal(qmm_embed_row(row, w, DT_Q8_0, 4, 32, 4), DERAS_EINVAL);
    assert_int_equal(qmm_embed_row(row, w, DT_Q8_0, 4, 32, -1), DERAS_EINVAL);
    assert_int_equal(qmm_embed_row(NULL, w, DT_Q8_0, 4, 32, 0), DERAS_EINVAL);
    assert_int_equal(qmm_embed_row(row, w, DT_Q8_0, 4, 31, 0), DERAS_EFORMAT);
}

static void embedding_rows_are_the_reference_rows(void **state)
{
    (void)state;
    uint64_t seed = 9;
    for (int di = 0; di < N_DTYPES; di++) {
        const int dt = dtypes[di], n_in = dtype_block_elems(dt) == 256 ? 512 : 96, rows = 5;
        uint8_t *w = malloc(qref_row_bytes(dt, n_in) * rows);
        float *wf = malloc(sizeof(float) * rows * n_in), *row = malloc(sizeof(float) * n_in);
        qref_weights(dt, rows, n_in, &seed, w);
        qref_dequant(dt, w, rows, n_in, wf, NULL);
        for (int r = 0; r < rows; r++) {
            assert_int_equal(qmm_embed_row(row, w, dt, rows, n_in, r), DERAS_OK);
            assert_memory_equal(row, wf + (size_t)r * n_in, sizeof(float) * n_in);
        }
        free(w), free(wf), free(row);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* first: its children must fork before this process selects a path */
        cmocka_unit_test(environment_variable_picks_the_path),
        cmocka_unit_test(paths_can_be_forced_and_are_refused_when_missing),
        cmocka_unit_test(bad_arguments_fail_cleanly),
        cmocka_unit_test(embedding_rows_are_the_reference_rows),
        cmocka_unit_test(activation_converters_agree_byte_for_byte),
        cmocka_unit_test(exact_mode_decodes_weights_bit_for_bit),
        cmocka_unit_test(every_format_mode_and_path_matches_references),
        cmocka_unit_test(packed_weights_match_references_on_every_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
