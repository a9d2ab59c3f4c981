/* SPDX-License-Identifier: Apache-2.0 */
/* test_cuda_sample_dequant.c - device sampling and GGUF dequantization on the GPU.
 *
 * Sampling: each configuration samples many rows of the same random logits with u spread
 * evenly over [0, 1) (u_i = (i + 0.5) / rows), so every token holding more than 1/rows of
 * the kept mass is drawn and the whole cumulative distribution is exercised. A host
 * reference in double precision applies the same cuts (min-p, top-k with ties kept, top-p
 * over the top-k mass with ties kept) to the same f32 scaled logits and finds the token
 * whose cumulative interval, in token order, holds u x total. The GPU sums in f32, so a
 * draw within 1e-4 of the total mass of an interval boundary may go to either neighbour,
 * and a row whose top-p cut sits within 1e-5 of a cumulative boundary is not judged
 * (those rows are counted, and must stay rare). Greedy rows must return the argmax with
 * ties to the lowest id, exactly.
 *
 * Dequantization: random blocks of every GGUF type (scales patched to finite f16 values)
 * against common/base/dtype.c's reference decoders, rounded to the element type on the host:
 * the device computes the same f32 operations in the same order, so results are equal
 * bit for bit (NaN only where the reference is NaN).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/base/dtype.h"
#include "gpu_test.h"

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

typedef struct scfg {
    float t;
    int k;
    float p, min_p;
} scfg;

/* Host reference: the kept threshold, or NAN when the top-p cut is ambiguous. */
static float ref_threshold(const float *w, int vocab, const scfg *c, float mx)
{
    float thr = c->min_p > 0 ? mx + logf(c->min_p) : -INFINITY;
    float *sorted = malloc((size_t)vocab * sizeof(float));
    int n = 0;
    for (int i = 0; i < vocab; i++)
        if (w[i] >= thr)
            sorted[n++] = w[i];
    qsort(sorted, (size_t)n, sizeof(float), cmp_desc);
    if (c->k > 0 && c->k < n) {
        thr = fmaxf(thr, sorted[c->k - 1]);
        while (n > 0 && sorted[n - 1] < thr)
            n--;
    }
    if (c->p < 1.0f) {
        double z = 0;
        for (int i = 0; i < n; i++)
            z += exp((double)sorted[i] - mx);
        const double need = (double)c->p * z;
        double acc = 0;
        for (int i = 0; i < n; i++) {
            double before = acc;
            acc += exp((double)sorted[i] - mx);
            if (acc >= need) {
                if (fabs(acc - need) < 1e-5 * z || fabs(before - need) < 1e-5 * z) {
                    free(sorted);
                    return NAN;
                }
                thr = fmaxf(thr, sorted[i]);
                break;
            }
        }
    }
    free(sorted);
    return thr;
}

static void run_sampling(backend_t *g, int dt, int vocab, const scfg *c, uint64_t *seed)
{
    const int rows = 256;
    float *lg = gpu_random(dt, (size_t)vocab, seed, 8.0f);
    float *all = malloc((size_t)rows * vocab * sizeof(float));
    for (int r = 0; r < rows; r++)
        memcpy(all + (size_t)r * vocab, lg, (size_t)vocab * sizeof(float));
    void *d_lg, *d_par, *d_tok;
    GPU_OK(backend_alloc(g, (size_t)rows * vocab * 2, &d_lg));
    GPU_OK(backend_upload_f32(g, d_lg, all, (size_t)rows * vocab));
    cuda_sample_params *par = malloc(rows * sizeof *par);
    for (int r = 0; r < rows; r++)
        par[r] = (cuda_sample_params){c->t, c->k, c->p, c->min_p, (float)((r + 0.5) / rows)};
    GPU_OK(backend_alloc(g, rows * sizeof *par, &d_par));
    GPU_OK(backend_upload(g, d_par, par, rows * sizeof *par));
    GPU_OK(backend_alloc(g, rows * sizeof(int32_t), &d_tok));
    gpu_poison(g, d_tok, rows * sizeof(int32_t));
    GPU_OK(backend_cuda_sample(g, d_tok, d_lg, d_par, rows, vocab));
    GPU_OK(backend_sync(g));
    int32_t *tok = malloc(rows * sizeof(int32_t));
    GPU_OK(backend_cuda_download(g, tok, d_tok, rows * sizeof(int32_t)));

    char what[128];
    snprintf(what, sizeof what, "sample vocab %d t %g k %d p %g min_p %g (%s)", vocab, c->t, c->k,
             c->p, c->min_p, gpu_dtype_name(dt));
    if (c->t == 0) {
        int best = 0;
        for (int i = 1; i < vocab; i++)
            if (lg[i] > lg[best])
                best = i;
        for (int r = 0; r < rows; r++)
            if (tok[r] != best)
                fail_msg("%s: row %d: got token %d, expected the argmax %d", what, r, tok[r], best);
    } else {
        float *w = malloc((size_t)vocab * sizeof(float));
        const float inv_t = 1.0f / c->t;
        float mx = -INFINITY;
        for (int i = 0; i < vocab; i++) {
            w[i] = lg[i] * inv_t;
            mx = fmaxf(mx, w[i]);
        }
        const float thr = ref_threshold(w, vocab, c, mx);
        if (isnan(thr)) {
            printf("  %s: top-p cut within rounding of a boundary, not judged\n", what);
        } else {
            double *cum = malloc(((size_t)vocab + 1) * sizeof(double));
            cum[0] = 0;
            for (int i = 0; i < vocab; i++)
                cum[i + 1] = cum[i] + (w[i] >= thr ? exp((double)w[i] - mx) : 0.0);
            const double z = cum[vocab], slack = 1e-4 * z;
            for (int r = 0; r < rows; r++) {
                const int t = tok[r];
                const double target = par[r].u * z;
                if (t < 0 || t >= vocab || !(w[t] >= thr))
                    fail_msg("%s: row %d (u %.4f): got token %d, outside the kept set "
                             "(threshold %.6g)",
                             what, r, par[r].u, t, thr);
                if (!(cum[t] - slack <= target && target <= cum[t + 1] + slack))
                    fail_msg("%s: row %d (u %.4f): got token %d covering [%.6g, %.6g) of "
                             "%.6g, expected the token covering %.6g",
                             what, r, par[r].u, t, cum[t], cum[t + 1], z, target);
            }
            free(cum);
        }
        free(w);
    }
    free(lg);
    free(all);
    free(par);
    free(tok);
    backend_free(g, d_lg);
    backend_free(g, d_par);
    backend_free(g, d_tok);
}

static void sampling_cuts_and_draws_like_the_reference(void **state)
{
    static const scfg cfgs[] = {
        {0.0f, 0, 1.0f, 0.0f},  {1.0f, 0, 1.0f, 0.0f},   {0.7f, 50, 1.0f, 0.0f},
        {1.3f, 0, 0.9f, 0.0f},  {1.0f, 100, 0.8f, 0.0f}, {0.5f, 0, 1.0f, 0.05f},
        {1.0f, 1, 1.0f, 0.0f},  {2.0f, 1000, 0.3f, 0.01f}, {1.0f, 0, 0.05f, 0.0f},
    };
    static const int vocabs[] = {151936, 32000, 1000, 5};
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = NULL;
        GPU_OK(backend_new(gpu_spec(dt), 0, &g));
        uint64_t seed = 900 + dt;
        for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++)
            for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++)
                run_sampling(g, dt, vocabs[v], &cfgs[c], &seed);
        backend_destroy(&g);
    }
}

static void greedy_ties_go_to_the_lowest_id(void **state)
{
    backend_t *g = NULL;
    GPU_OK(backend_new("cuda:0", 0, &g));
    const int vocab = 70000;
    float *lg = malloc(vocab * sizeof(float));
    uint64_t seed = 77;
    test_fill_random(lg, vocab, &seed, 1.0f);
    lg[40000] = lg[12345] = lg[69999] = 3.0f;
    void *d_lg, *d_par, *d_tok;
    GPU_OK(backend_alloc(g, vocab * 2, &d_lg));
    GPU_OK(backend_upload_f32(g, d_lg, lg, vocab));
    cuda_sample_params par = {0.0f, 0, 1.0f, 0.0f, 0.5f};
    GPU_OK(backend_alloc(g, sizeof par, &d_par));
    GPU_OK(backend_upload(g, d_par, &par, sizeof par));
    GPU_OK(backend_alloc(g, 4, &d_tok));
    GPU_OK(backend_cuda_sample(g, d_tok, d_lg, d_par, 1, vocab));
    int32_t tok = -1;
    GPU_OK(backend_cuda_download(g, &tok, d_tok, 4));
    if (tok != 12345)
        fail_msg("greedy with the maximum at ids 12345, 40000, 69999: got %d, expected 12345", tok);
    free(lg);
    backend_free(g, d_lg);
    backend_free(g, d_par);
    backend_free(g, d_tok);
    backend_destroy(&g);
}

static void put_f16(uint8_t *p, float f)
{
    uint16_t h = f32_to_fp16(f);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

static void dequant_matches_the_reference_bit_for_bit(void **state)
{
    static const int types[] = {DT_F32, DT_F16, DT_BF16, DT_Q4_0, DT_Q4_1, DT_Q5_0,
                                DT_Q5_1, DT_Q8_0, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    for (int dt = 0; dt < 2; dt++) {
        backend_t *g = NULL;
        GPU_OK(backend_new(gpu_spec(dt), 0, &g));
        uint64_t seed = 1100 + dt;
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const int ty = types[ti];
            const int64_t n = 256 * 1037; /* whole blocks of 32 and of 256 */
            size_t nbytes;
            GPU_OK(dtype_nbytes(ty, n, &nbytes));
            uint8_t *raw = malloc(nbytes);
            for (size_t i = 0; i < nbytes; i++)
                raw[i] = (uint8_t)test_rng_next(&seed);
            const size_t bb = dtype_block_bytes(ty);
            for (size_t b = 0; b < nbytes / bb; b++) {
                uint8_t *blk = raw + b * bb;
                float d = test_rng_float(&seed) * 0.05f, m = test_rng_float(&seed) * 0.5f;
                switch (ty) {
                case DT_Q4_0: case DT_Q5_0: case DT_Q8_0: put_f16(blk, d); break;
                case DT_Q4_1: case DT_Q5_1: case DT_Q4_K: case DT_Q5_K:
                    put_f16(blk, d);
                    put_f16(blk + 2, m);
                    break;
                case DT_Q6_K: put_f16(blk + 208, d); break;
                default: break; /* plain types keep their random bits: NaN, inf, subnormals */
                }
            }
            float *ref = malloc((size_t)n * sizeof(float)), *got = malloc((size_t)n * sizeof(float));
            GPU_OK(dtype_to_f32(ty, raw, ref, n));
            void *d_raw, *d_out;
            GPU_OK(backend_alloc(g, nbytes, &d_raw));
            GPU_OK(backend_upload(g, d_raw, raw, nbytes));
            GPU_OK(backend_alloc(g, (size_t)n * 2, &d_out));
            gpu_poison(g, d_out, (size_t)n * 2);
            GPU_OK(backend_cuda_dequant(g, d_out, d_raw, ty, n));
            GPU_OK(backend_sync(g));
            GPU_OK(backend_download_f32(g, got, d_out, (size_t)n));
            for (int64_t i = 0; i < n; i++) {
                float want = gpu_round(dt, ref[i]);
                bool same = isnan(want) ? isnan(got[i]) : got[i] == want;
                if (!same)
                    fail_msg("dequant %s to %s: element %lld: got %.9g, expected %.9g "
                             "(reference f32 %.9g)",
                             dtype_name(ty), gpu_dtype_name(dt), (long long)i, got[i], want, ref[i]);
            }
            free(raw);
            free(ref);
            free(got);
            backend_free(g, d_raw);
            backend_free(g, d_out);
        }
        /* refusals */
        void *buf;
        GPU_OK(backend_alloc(g, 4096, &buf));
        int rc = backend_cuda_dequant(g, buf, buf, 10 /* Q2_K */, 256);
        if (rc != DERAS_EUNSUPPORTED)
            fail_msg("dequant Q2_K: expected %d (DERAS_EUNSUPPORTED), got %d", DERAS_EUNSUPPORTED, rc);
        rc = backend_cuda_dequant(g, buf, buf, DT_Q4_K, 100);
        if (rc != DERAS_EFORMAT)
            fail_msg("dequant 100 Q4_K elements: expected %d (DERAS_EFORMAT), got %d",
                     DERAS_EFORMAT, rc);
        backend_free(g, buf);
        backend_destroy(&g);
    }
}

int main(void)
{
    gpu_require_device();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(greedy_ties_go_to_the_lowest_id),
        cmocka_unit_test(sampling_cuts_and_draws_like_the_reference),
        cmocka_unit_test(dequant_matches_the_reference_bit_for_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
